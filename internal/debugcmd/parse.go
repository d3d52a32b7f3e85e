package debugcmd

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"nuon.dev/nuon/schemas"
)

// Operations a Command may name.
const (
	OpGet        = "get"
	OpDescribe   = "describe"
	OpEvents     = "events"
	OpLogs       = "logs"
	OpStatus     = "status"
	OpHistory    = "history"
	OpStateList  = "state list"
	OpStateShow  = "state show"
	maxTail      = 100000
	maxSince     = 7 * 24 * time.Hour
	maxWordBytes = 256
	maxWords     = 32
)

// ErrRefused marks a command that is not on the allow-list, or that
// reaches outside the install: running it again would be refused again.
var ErrRefused = errors.New("debug command refused")

// Refusal says why a command was refused.
type Refusal struct {
	// Command is the command as asked.
	Command []string
	// Reason is why it was refused, for the person who asked.
	Reason string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("%s: %q: %s", ErrRefused, strings.Join(r.Command, " "), r.Reason)
}

// Is makes errors.Is(r, ErrRefused) true.
func (r *Refusal) Is(target error) bool { return target == ErrRefused }

// Command is one parsed, allowed debug command.
type Command struct {
	// Op is one of the Op constants.
	Op string
	// Kind is the kind or resource name of get and describe, as asked
	// (pod, pods, Deployment, deployments.apps, …).
	Kind string
	// Name is the object of get (optional), describe and logs (the pod),
	// or the release of status and history.
	Name string
	// Namespace is -n; empty means the component's namespace.
	Namespace string
	// Container is logs -c.
	Container string
	// Tail is logs --tail: the last lines only; 0 means all.
	Tail int64
	// Since is logs --since: only lines newer than this.
	Since time.Duration
	// Address is the resource of state show.
	Address string
}

// Words returns the command in canonical words; Parse(plugin, c.Words())
// gives c back.
func (c Command) Words() []string {
	w := strings.Fields(c.Op)
	switch c.Op {
	case OpGet, OpDescribe:
		w = append(w, c.Kind)
		if c.Name != "" {
			w = append(w, c.Name)
		}
	case OpLogs, OpStatus, OpHistory:
		w = append(w, c.Name)
	case OpStateShow:
		w = append(w, c.Address)
	}
	if c.Namespace != "" {
		w = append(w, "-n", c.Namespace)
	}
	if c.Container != "" {
		w = append(w, "-c", c.Container)
	}
	if c.Tail > 0 {
		w = append(w, "--tail", strconv.FormatInt(c.Tail, 10))
	}
	if c.Since > 0 {
		w = append(w, "--since", c.Since.String())
	}
	return w
}

// Kubernetes tells whether c reads the Kubernetes API.
func (c Command) Kubernetes() bool {
	switch c.Op {
	case OpGet, OpDescribe, OpEvents, OpLogs:
		return true
	}
	return false
}

// Allowed lists the operations each plugin serves.
var Allowed = map[string][]string{
	schemas.TypeManifests: {OpGet, OpDescribe, OpEvents, OpLogs},
	schemas.TypeHelm:      {OpGet, OpDescribe, OpEvents, OpLogs, OpStatus, OpHistory},
	schemas.TypeTerraform: {OpStateList, OpStateShow},
}

var (
	// dnsName is a Kubernetes object, namespace or release name.
	dnsName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
	// kindName is a kind or resource, optionally with a group: pods,
	// Deployment, deployments.apps, certificates.cert-manager.io.
	kindName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]{0,62}(\.[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)?$`)
	// tfAddress is a Terraform resource address: module.a.b_c.name,
	// data.x.y, with [0] or ["key"] indexes.
	tfAddress = regexp.MustCompile(`^((module\.[A-Za-z_][A-Za-z0-9_-]*(\[[0-9]+\]|\["[A-Za-z0-9_.:-]*"\])?\.)*)(data\.)?[A-Za-z_][A-Za-z0-9_-]*\.[A-Za-z_][A-Za-z0-9_-]*(\[[0-9]+\]|\["[A-Za-z0-9_.:-]*"\])?$`)
)

// Parse checks words against plugin's allow-list and returns the
// command. Every error is a *Refusal.
func Parse(plugin string, words []string) (Command, error) {
	refuse := func(format string, args ...any) (Command, error) {
		return Command{}, &Refusal{Command: words, Reason: fmt.Sprintf(format, args...)}
	}
	if len(words) == 0 {
		return refuse("no command")
	}
	if len(words) > maxWords {
		return refuse("more than %d words", maxWords)
	}
	for _, w := range words {
		if len(w) > maxWordBytes {
			return refuse("a word longer than %d bytes", maxWordBytes)
		}
	}
	allowed, ok := Allowed[plugin]
	if !ok {
		return refuse("plugin %q has no debug commands", plugin)
	}
	op, rest := words[0], words[1:]
	if op == "state" && len(rest) > 0 {
		op, rest = "state "+rest[0], rest[1:]
	}
	found := false
	for _, a := range allowed {
		found = found || a == op
	}
	if !found {
		return refuse("%q is not an allowed %s command (allowed: %s)", op, plugin, strings.Join(allowed, ", "))
	}
	c := Command{Op: op}
	var args []string
	for i := 0; i < len(rest); i++ {
		w := rest[i]
		flag, value, hasValue := strings.Cut(w, "=")
		if !strings.HasPrefix(w, "-") {
			args = append(args, w)
			continue
		}
		if !hasValue {
			if i+1 >= len(rest) {
				return refuse("flag %s needs a value", w)
			}
			i++
			value = rest[i]
		}
		var err error
		switch {
		case (flag == "-n" || flag == "--namespace") && c.Kubernetes():
			if c.Namespace != "" {
				return refuse("%s given twice", flag)
			}
			if !dnsName.MatchString(value) || strings.Contains(value, ".") {
				return refuse("%q is not a namespace name", value)
			}
			c.Namespace = value
		case (flag == "-c" || flag == "--container") && op == OpLogs:
			if c.Container != "" {
				return refuse("%s given twice", flag)
			}
			if !dnsName.MatchString(value) || strings.Contains(value, ".") {
				return refuse("%q is not a container name", value)
			}
			c.Container = value
		case flag == "--tail" && op == OpLogs:
			if c.Tail, err = strconv.ParseInt(value, 10, 64); err != nil || c.Tail <= 0 || c.Tail > maxTail {
				return refuse("--tail %q is not a number of lines from 1 to %d", value, maxTail)
			}
		case flag == "--since" && op == OpLogs:
			if c.Since, err = time.ParseDuration(value); err != nil || c.Since <= 0 || c.Since > maxSince {
				return refuse("--since %q is not a duration from 1s to %s", value, maxSince)
			}
		default:
			return refuse("flag %s is not allowed for %s", flag, op)
		}
	}
	want := func(min, max int, usage string) error {
		if len(args) < min || len(args) > max {
			return &Refusal{Command: words, Reason: "usage: " + usage}
		}
		return nil
	}
	var err error
	switch op {
	case OpGet:
		if err = want(1, 2, "get KIND [NAME] [-n NS]"); err == nil {
			c.Kind = args[0]
			if len(args) == 2 {
				c.Name = args[1]
			}
		}
	case OpDescribe:
		if err = want(2, 2, "describe KIND NAME [-n NS]"); err == nil {
			c.Kind, c.Name = args[0], args[1]
		}
	case OpEvents:
		err = want(0, 0, "events [-n NS]")
	case OpLogs:
		if err = want(1, 1, "logs POD [-c CONTAINER] [--tail N] [--since DURATION]"); err == nil {
			c.Name = args[0]
		}
	case OpStatus, OpHistory:
		if err = want(1, 1, op+" RELEASE"); err == nil {
			c.Name = args[0]
		}
	case OpStateList:
		err = want(0, 0, "state list")
	case OpStateShow:
		if err = want(1, 1, "state show ADDRESS"); err == nil {
			c.Address = args[0]
		}
	}
	if err != nil {
		return Command{}, err
	}
	if c.Kind != "" && !kindName.MatchString(c.Kind) {
		return refuse("%q is not a kind", c.Kind)
	}
	if c.Name != "" && !dnsName.MatchString(c.Name) {
		return refuse("%q is not an object name", c.Name)
	}
	if c.Address != "" && !tfAddress.MatchString(c.Address) {
		return refuse("%q is not a resource address", c.Address)
	}
	return c, nil
}

// CheckNamespace resolves c's namespace (default def) and refuses it
// unless it is def or one of allowed.
func CheckNamespace(c *Command, def string, allowed []string) error {
	if c.Namespace == "" {
		c.Namespace = def
	}
	if c.Namespace == def && def != "" {
		return nil
	}
	for _, a := range allowed {
		if a == c.Namespace {
			return nil
		}
	}
	return &Refusal{Command: c.Words(), Reason: fmt.Sprintf("namespace %q is not one of the install's namespaces (%s)", c.Namespace, strings.Join(append([]string{def}, allowed...), ", "))}
}

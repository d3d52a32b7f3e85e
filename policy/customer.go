package policy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // windows name IANA zones; the agent's image may have no zoneinfo

	"github.com/robfig/cron/v3"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/schemas"
)

// MaxFileSize bounds the customer's policy file: 256 KiB holds thousands
// of windows, far more than any maintenance calendar needs.
const MaxFileSize = 256 << 10

// Bounds of a window's duration.
const (
	// MinDuration: a window is open for at least a minute; a window of
	// no time is an error, not a window that never opens.
	MinDuration = time.Minute
	// MaxDuration: 366 days, room for a year-long freeze.
	MaxDuration = 366 * 24 * time.Hour
)

// Customer is the customer's policy, checked: its windows with their
// time zones and schedules resolved, its hold, whether vendor requests are
// answered and the customer's approval keys.
type Customer struct {
	// Allow are the windows in which changes may be applied; none means
	// any time no deny window covers.
	Allow []Window
	// Deny are the windows in which no change is applied; deny wins.
	Deny []Window
	// Hold is the hold's reason; Held says there is one.
	Hold string
	Held bool
	// Requests says whether the vendor's read-only requests (logs, debug
	// commands) are answered; default true.
	Requests bool
	// Approvers are the customer's approval keys.
	Approvers []Approver
	// Require names the changes that need one of Approvers' approval in
	// addition to the vendor's; nil: none does.
	Require *schemas.CustomerRequire
}

// Approver is one of the customer's approval keys.
type Approver struct {
	Name string
	Key  ssh.PublicKey
}

// approverKeyTypes are the key types a customer may pin: what OpenSSH
// signs with today, hardware keys included; RSA and DSA are left out.
var approverKeyTypes = []string{
	ssh.KeyAlgoED25519, ssh.KeyAlgoSKED25519,
	ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521, ssh.KeyAlgoSKECDSA256,
}

// Load reads and checks the customer's policy file at path. A file that
// is missing, too large or wrong is an error; the agent holds on any.
func Load(path string) (*Customer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("customer policy %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("customer policy %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("customer policy %s: larger than %d bytes", path, MaxFileSize)
	}
	return Parse(path, data)
}

// Parse checks data, the customer's policy file read from file (YAML or
// JSON), against customer-policy.schema.json and then for what the schema
// cannot say: known time zones, cron expressions that parse and ever
// fire, durations of whole minutes within bounds, each window weekly or
// cron, approval keys of known types, listed once. The error is
// schemas.Problems, each at its file, line and field.
func Parse(file string, data []byte) (*Customer, error) {
	var raw schemas.CustomerPolicy
	loc, err := schemas.DecodeLocated(schemas.SchemaCustomerPolicy, file, data, &raw)
	if err != nil {
		return nil, err
	}
	c := &Customer{Requests: raw.Requests == nil || *raw.Requests}
	if raw.Hold != nil {
		c.Held, c.Hold = true, raw.Hold.Reason
	}
	var ps schemas.Problems
	var fileZone *time.Location
	if raw.Timezone != "" {
		if fileZone, err = zone(raw.Timezone); err != nil {
			ps = append(ps, loc.At("timezone", "%v", err))
		}
	}
	for _, list := range []struct {
		field string
		in    []schemas.CustomerWindow
		out   *[]Window
		deny  bool
	}{{"allow", raw.Allow, &c.Allow, false}, {"deny", raw.Deny, &c.Deny, true}} {
		for i, w := range list.in {
			field := list.field + "[" + strconv.Itoa(i) + "]"
			win, wps := window(loc, field, w, fileZone, raw.Timezone != "")
			ps = append(ps, wps...)
			if win != nil {
				win.Deny = list.deny
				*list.out = append(*list.out, *win)
			}
		}
	}
	names := map[string]string{}
	keys := map[string]string{}
	for i, a := range raw.Approvers {
		field := "approvers[" + strconv.Itoa(i) + "]"
		if first, dup := names[a.Name]; dup {
			ps = append(ps, loc.At(field+".name", "approver %q is listed twice (first at %s)", a.Name, first))
			continue
		}
		names[a.Name] = field
		k, _, options, rest, err := ssh.ParseAuthorizedKey([]byte(a.Key))
		switch {
		case err != nil:
			ps = append(ps, loc.At(field+".key", "not an OpenSSH public key (type, base64 data and an optional comment)"))
			continue
		case len(options) > 0 || len(rest) > 0:
			ps = append(ps, loc.At(field+".key", "one public key without options, as ssh-keygen prints it"))
			continue
		case !slices.Contains(approverKeyTypes, k.Type()):
			ps = append(ps, loc.At(field+".key", "a %s key; approval keys are %s", k.Type(), strings.Join(approverKeyTypes, ", ")))
			continue
		}
		fp := ssh.FingerprintSHA256(k)
		if first, dup := keys[fp]; dup {
			ps = append(ps, loc.At(field+".key", "key %s is listed twice (first at %s)", fp, first))
			continue
		}
		keys[fp] = field
		c.Approvers = append(c.Approvers, Approver{Name: a.Name, Key: k})
	}
	if r := raw.RequireApproval; r != nil {
		if len(raw.Approvers) == 0 {
			ps = append(ps, loc.At("requireApproval", "changes need the customer's approval but no approvers are listed: nothing could ever approve them"))
		}
		c.Require = r
	}
	if err := ps.Err(); err != nil {
		return nil, err
	}
	return c, nil
}

// Needs says whether a plan of component that makes the changes of sum
// needs the customer's own approval, and why. A no-op never does.
func (c *Customer) Needs(component string, sum schemas.PlanSummary) (bool, string) {
	if c == nil || c.Require == nil {
		return false, ""
	}
	r := c.Require
	if len(r.Components) > 0 && !slices.Contains(r.Components, component) {
		return false, ""
	}
	kinds := sum.Kinds()
	if len(kinds) == 0 {
		return false, ""
	}
	if len(r.Changes) == 0 {
		return true, "the customer's policy requires the customer's approval of every change to " + component
	}
	for _, k := range kinds {
		if slices.Contains(r.Changes, k) {
			return true, fmt.Sprintf("the customer's policy requires the customer's approval of a %s of %s", k, component)
		}
	}
	return false, ""
}

// ApprovalKeys are the customer's approvers as approval keys: one
// approval by any of them approves. No key vendor lists or excludes (the
// vendor's approvers, render and request keys) ever counts as the
// customer's, even pinned here: the customer's approval is one the vendor
// cannot give.
func (c *Customer) ApprovalKeys(vendor *Approvers) *Approvers {
	as := &Approvers{Threshold: 1, source: "the customer's policy", excluded: map[string]string{}}
	if c != nil {
		for _, a := range c.Approvers {
			as.keys = append(as.keys, approverKey{name: a.Name, key: a.Key})
		}
	}
	if vendor != nil {
		for fp, what := range vendor.excluded {
			as.excluded[fp] = "the vendor's " + what
		}
		for _, k := range vendor.keys {
			as.excluded[ssh.FingerprintSHA256(k.key)] = "the vendor's approver (" + k.name + ")"
		}
	}
	return as
}

// window checks one window of the file, found at field.
func window(loc *schemas.Located, field string, w schemas.CustomerWindow, fileZone *time.Location, hasFileZone bool) (*Window, schemas.Problems) {
	var ps schemas.Problems
	win := &Window{Name: w.Name}
	if win.Name == "" {
		win.Name = field
	}
	d, err := time.ParseDuration(w.Duration)
	switch {
	case err != nil:
		ps = append(ps, loc.At(field+".duration", "%q is not a duration such as 90m or 4h", w.Duration))
	case d < MinDuration:
		ps = append(ps, loc.At(field+".duration", "%s is an empty window; a window is open for at least %s", w.Duration, MinDuration))
	case d > MaxDuration:
		ps = append(ps, loc.At(field+".duration", "%s is longer than %s (366 days)", w.Duration, MaxDuration))
	case d%time.Minute != 0:
		ps = append(ps, loc.At(field+".duration", "%s is not a whole number of minutes", w.Duration))
	}
	win.Duration = d
	switch {
	case w.Timezone != "":
		if win.Location, err = zone(w.Timezone); err != nil {
			ps = append(ps, loc.At(field+".timezone", "%v", err))
		}
	case hasFileZone:
		win.Location = fileZone
	default:
		ps = append(ps, loc.At(field, "no time zone: set timezone on the window or at the top of the file"))
	}
	weekly := len(w.Days) > 0 || w.Start != ""
	spec := w.Cron
	switch {
	case weekly && w.Cron != "":
		ps = append(ps, loc.At(field+".cron", "a window is weekly (days and start) or cron, not both"))
		return nil, ps
	case !weekly && w.Cron == "":
		ps = append(ps, loc.At(field, "no start times: give days and start, or cron"))
		return nil, ps
	case weekly && len(w.Days) == 0:
		ps = append(ps, loc.At(field, "start without days: name the days the window opens on"))
		return nil, ps
	case weekly && w.Start == "":
		ps = append(ps, loc.At(field, "days without start: give the time of day the window opens, HH:MM"))
		return nil, ps
	case weekly:
		// The schema has checked the form HH:MM.
		h, _ := strconv.Atoi(w.Start[:2])
		m, _ := strconv.Atoi(w.Start[3:])
		spec = fmt.Sprintf("%d %d * * %s", m, h, strings.Join(w.Days, ","))
	}
	s, err := parseCron(spec)
	if err != nil {
		ps = append(ps, loc.At(field+".cron", "%v", err))
		return nil, ps
	}
	win.spec = s
	win.times = timesOfDay(s)
	if !win.ever() {
		ps = append(ps, loc.At(field+".cron", "%q names no day that exists: the window would never open", w.Cron))
	}
	if len(ps) > 0 {
		return nil, ps
	}
	return win, nil
}

// parser reads the five standard cron fields and the @yearly… shorthands.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseCron parses a cron expression into its fields. The time zone comes
// from the window, never from the expression.
func parseCron(spec string) (*cron.SpecSchedule, error) {
	t := strings.TrimSpace(spec)
	if strings.HasPrefix(t, "TZ=") || strings.HasPrefix(t, "CRON_TZ=") {
		return nil, errors.New("name the time zone in timezone, not in the cron expression")
	}
	if strings.HasPrefix(t, "@every") {
		return nil, errors.New("@every is not a calendar: give start times (five fields, or @daily and the like)")
	}
	s, err := parser.Parse(t)
	if err != nil {
		return nil, fmt.Errorf("cron %q: %w", spec, err)
	}
	ss, ok := s.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("cron %q: not a calendar schedule", spec)
	}
	return ss, nil
}

// zone loads an IANA time zone from the embedded database. "Local" is
// refused: it would mean whatever the agent's machine is set to.
func zone(name string) (*time.Location, error) {
	if name == "Local" {
		return nil, errors.New(`time zone "Local" depends on the agent's machine; name an IANA zone such as Europe/Berlin or UTC`)
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q; name an IANA zone such as Europe/Berlin or UTC", name)
	}
	return l, nil
}

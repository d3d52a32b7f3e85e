// Package plans evaluates the vendor's Rego policies on plans
// (policies/*.rego on main, rendered into each install's signed desired
// state) with the Open Policy Agent library, inside the agent: deny blocks
// a change, warn makes it need an approval. It lives apart from package
// policy because OPA links net/http; no builtin that reaches the network,
// the clock's randomness or the process is available to a policy.
package plans

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"

	"nuon.dev/nuon/schemas"
)

// Bounds of plan policies.
const (
	// MaxPolicySize bounds one policy file.
	MaxPolicySize = 64 << 10
	// DefaultEvalTimeout bounds one evaluation of every policy on one plan.
	DefaultEvalTimeout = 2 * time.Second
	// maxMessages bounds the messages one evaluation reports per kind.
	maxMessages = 20
)

// ErrPolicy marks a plan policy that does not compile or whose evaluation
// failed (ran past its time, a runtime error): the change it judges is
// blocked, never let through.
var ErrPolicy = errors.New("plan policy")

// Set is the Rego policies on plans (policies/*.rego on main), compiled
// once. Each file is a Rego v1 module; in any package, its rules
//
//	deny contains msg if { … }   # blocks the change, msg says why
//	warn contains msg if { … }   # the change needs an approval
//
// read the input: {"install": ID, "component": NAME, "type": TYPE,
// "plan": the plan as JSON (terraform show -json)}.
type Set struct {
	query   rego.PreparedEvalQuery
	timeout time.Duration
	files   []string
}

// CompilePlans checks and compiles the policy files, by name (their path
// on main, e.g. policies/no-delete.rego). A file that does not parse or
// compile is an error at its file:line.
func Compile(files map[string]string) (*Set, error) {
	if len(files) == 0 {
		return nil, nil
	}
	modules := map[string]*ast.Module{}
	var errs []error
	var pkgs []string
	for _, name := range slices.Sorted(maps.Keys(files)) {
		src := files[name]
		if len(src) > MaxPolicySize {
			errs = append(errs, fmt.Errorf("%s: %d bytes, more than %d", name, len(src), MaxPolicySize))
			continue
		}
		m, err := ast.ParseModuleWithOpts(name, src, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			errs = append(errs, &locatedError{err})
			continue
		}
		modules[name] = m
		pkgs = append(pkgs, m.Package.Path.String())
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrPolicy, errors.Join(errs...))
	}
	c := ast.NewCompiler().WithStrict(true).WithCapabilities(Capabilities())
	c.Compile(modules)
	if c.Failed() {
		return nil, fmt.Errorf("%w: %w", ErrPolicy, &locatedError{c.Errors})
	}
	slices.Sort(pkgs)
	pkgs = slices.Compact(pkgs)
	var deny, warn []string
	for _, p := range pkgs {
		deny = append(deny, p+".deny")
		warn = append(warn, p+".warn")
	}
	// Undefined rules (a package with no deny) count as empty.
	q := fmt.Sprintf("deny := [m | some r in [%s]; some m in r]; warn := [m | some r in [%s]; some m in r]",
		orEmpty(deny), orEmpty(warn))
	pq, err := rego.New(rego.Query(q), rego.Compiler(c), rego.Capabilities(Capabilities()), rego.StrictBuiltinErrors(true)).PrepareForEval(context.Background())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPolicy, located(err))
	}
	return &Set{query: pq, timeout: DefaultEvalTimeout, files: slices.Sorted(maps.Keys(files))}, nil
}

// orEmpty lists refs each defaulting to the empty set when undefined.
func orEmpty(refs []string) string {
	var parts []string
	for _, r := range refs {
		parts = append(parts, fmt.Sprintf("object.get(%s, set())", parentAndKey(r)))
	}
	return strings.Join(parts, ", ")
}

// parentAndKey turns data.a.b.deny into "data.a.b, \"deny\"" for object.get.
func parentAndKey(ref string) string {
	i := strings.LastIndexByte(ref, '.')
	return fmt.Sprintf("%s, %q", ref[:i], ref[i+1:])
}

// Check compiles files as Compile does and reports what does not compile
// as schemas.Problems, each at its file, line and column: the renderer's
// check of policies/*.rego on main.
func Check(files map[string]string) error {
	_, err := Compile(files)
	if err == nil {
		return nil
	}
	var ps schemas.Problems
	var es ast.Errors
	if errors.As(err, &es) {
		for _, e := range es {
			p := schemas.Problem{Message: e.Message}
			if e.Location != nil {
				p.File, p.Line, p.Column = e.Location.File, e.Location.Row, e.Location.Col
			}
			ps = append(ps, p)
		}
		return ps
	}
	return err
}

// located formats OPA's errors as file:line:col: message.
func located(err error) error {
	var es ast.Errors
	if errors.As(err, &es) {
		var out []error
		for _, e := range es {
			if e.Location != nil {
				out = append(out, fmt.Errorf("%s:%d:%d: %s", e.Location.File, e.Location.Row, e.Location.Col, e.Message))
			} else {
				out = append(out, errors.New(e.Message))
			}
		}
		return errors.Join(out...)
	}
	return err
}

// locatedError prints OPA's errors as file:line:col: message and keeps
// them for errors.As.
type locatedError struct{ err error }

func (e *locatedError) Error() string { return located(e.err).Error() }
func (e *locatedError) Unwrap() error { return e.err }

// WithTimeout bounds each evaluation; default DefaultEvalTimeout.
func (p *Set) WithTimeout(d time.Duration) *Set {
	c := *p
	c.timeout = d
	return &c
}

// Files are the policy files compiled.
func (p *Set) Files() []string { return p.files }

// Judgement is what the policies say of one plan.
type Judgement struct {
	// Deny are the messages of deny rules: the change is blocked.
	Deny []string
	// Warn are the messages of warn rules: the change needs approval.
	Warn []string
}

// Evaluate runs every policy on input within the timeout. An evaluation
// that fails or runs out of time is an error wrapping ErrPolicy: the caller
// blocks the change.
func (p *Set) Evaluate(ctx context.Context, input map[string]any) (Judgement, error) {
	var j Judgement
	if p == nil {
		return j, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	rs, err := p.query.Eval(ctx, rego.EvalInput(input))
	if err != nil {
		var he *topdown.Error
		if errors.As(err, &he) && he.Code == topdown.CancelErr || ctx.Err() != nil {
			return j, fmt.Errorf("%w: evaluation ran past %s", ErrPolicy, p.timeout)
		}
		return j, fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	if len(rs) != 1 {
		return j, fmt.Errorf("%w: %d results", ErrPolicy, len(rs))
	}
	j.Deny = messages(rs[0].Bindings["deny"])
	j.Warn = messages(rs[0].Bindings["warn"])
	return j, nil
}

func messages(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, m := range list {
		s, ok := m.(string)
		if !ok {
			s = fmt.Sprint(m)
		}
		out = append(out, s)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > maxMessages {
		out = append(out[:maxMessages], fmt.Sprintf("… and %d more", len(out)-maxMessages))
	}
	return out
}

// unsafe are the builtins a plan policy may not call: they reach the
// network, read the agent's environment or differ between two runs.
var unsafe = map[string]bool{
	"http.send": true, "net.lookup_ip_addr": true, "opa.runtime": true,
	"rand.intn": true, "time.now_ns": true, "uuid.rfc4122": true, "trace": true,
	"io.jwt.decode_verify": true, "providers.aws.sign_req": true,
}

// Capabilities are OPA's capabilities less the unsafe builtins.
func Capabilities() *ast.Capabilities {
	caps := ast.CapabilitiesForThisVersion()
	var keep []*ast.Builtin
	for _, b := range caps.Builtins {
		if !unsafe[b.Name] {
			keep = append(keep, b)
		}
	}
	caps.Builtins = keep
	caps.AllowNet = []string{}
	return caps
}

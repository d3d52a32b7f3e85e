package reconciler

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"nuon.dev/nuon/schemas"
)

// Actions of a plan step.
const (
	// Apply creates or updates the component; which one, or nothing, is
	// decided once its dependencies' outputs are known (see Decide).
	Apply = "apply"
	// Delete destroys a component that is no longer desired.
	Delete = "delete"
)

// Applied is a component as the agent last recorded it.
type Applied struct {
	// Spec is the resolved spec that was applied (inputs with every
	// output reference replaced by its value).
	Spec   *schemas.ComponentState
	Status schemas.ComponentStatus
}

// Step is one component's work in a plan.
type Step struct {
	Component string
	Action    string
	// Desired is the rendered spec (Apply); Applied what was applied
	// before, if anything.
	Desired *schemas.ComponentState
	Applied *Applied
	// After names the steps that must finish first.
	After []string
}

// Plan orders the work of one reconcile: every desired component after the
// ones it depends on, then the deletes of components no longer desired,
// each after the deletes of the components that depended on it.
type Plan struct {
	Steps []Step
}

// NewPlan compares desired components with applied ones. order is the
// desired components in dependency order.
func NewPlan(desired map[string]*schemas.ComponentState, order []string, applied map[string]*Applied) *Plan {
	p := &Plan{}
	for _, name := range order {
		cs := desired[name]
		p.Steps = append(p.Steps, Step{
			Component: name,
			Action:    Apply,
			Desired:   cs,
			Applied:   applied[name],
			After:     slices.Clone(cs.DependsOn),
		})
	}
	// Deletes run after every apply, dependents first.
	gone := map[string]*Applied{}
	for name, a := range applied {
		if _, ok := desired[name]; !ok && a.Status.Phase != schemas.PhaseDeleted {
			gone[name] = a
		}
	}
	names := slices.Sorted(maps.Keys(gone))
	for _, name := range names {
		var after []string
		for _, other := range names {
			if spec := gone[other].Spec; spec != nil && slices.Contains(spec.DependsOn, name) {
				after = append(after, other)
			}
		}
		after = append(after, order...)
		p.Steps = append(p.Steps, Step{Component: name, Action: Delete, Applied: gone[name], After: after})
	}
	return p
}

// Outputs are the known outputs of finished components: component →
// output → value. Sensitive outputs are absent. The sandbox's are under
// schemas.SandboxComponent.
type Outputs map[string]map[string]any

// Resolve returns a copy of cs whose ${components.X.outputs.Y} and
// ${install.sandbox.outputs.OUTPUT[.KEY]} references, in its inputs and
// its artifacts' install-registry references, are replaced by the
// outputs' values. ${secrets.…} stay: the job resolves them inside the
// install.
func Resolve(cs *schemas.ComponentState, outs Outputs, sensitive map[string][]string) (*schemas.ComponentState, error) {
	out := *cs
	if len(cs.Artifacts) > 0 {
		out.Artifacts = slices.Clone(cs.Artifacts)
		for i, a := range out.Artifacts {
			if !strings.Contains(a.Local, "${") {
				continue
			}
			v, err := substitute("artifact "+a.Name, a.Local, outs, sensitive, true)
			if err != nil {
				return nil, err
			}
			local, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("artifact %s: %s resolves to a %T, not a string", a.Name, a.Local, v)
			}
			out.Artifacts[i].Local = local
		}
	}
	if len(cs.Inputs) == 0 {
		return &out, nil
	}
	inputs, err := schemas.WalkStrings(map[string]any(cs.Inputs), "", func(field, s string) (any, error) {
		return substitute("input "+field, s, outs, sensitive, false)
	})
	if err != nil {
		return nil, err
	}
	out.Inputs = inputs.(map[string]any)
	return &out, nil
}

// substitute resolves the output references in s; what is the field's
// name for errors. With onlyStrings, every value must be a string (an
// artifact reference is made of them).
func substitute(what, s string, outs Outputs, sensitive map[string][]string, onlyStrings bool) (any, error) {
	var missing error
	v, err := schemas.Substitute(s, func(r schemas.Ref) (any, bool) {
		v, ok := lookup(what, r, outs, sensitive, &missing)
		if _, isString := v.(string); ok && onlyStrings && !isString && missing == nil {
			missing = fmt.Errorf("%s: ${%s} is a %T, not a string", what, r, v)
		}
		return v, ok
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return v, missing
}

// lookup finds one output reference's value; the first reference without
// one sets *missing.
func lookup(what string, r schemas.Ref, outs Outputs, sensitive map[string][]string, missing *error) (any, bool) {
	var v any
	var ok bool
	var why error
	switch r.Kind {
	case schemas.RefOutput:
		if v, ok = outs[r.Name][r.Output]; ok {
			break
		}
		if slices.Contains(sensitive[r.Name], r.Output) {
			why = fmt.Errorf("%s: ${%s} is a sensitive output; it cannot be passed on as an input", what, r)
		} else {
			why = fmt.Errorf("%s: ${%s} has no value: component %s did not output %q", what, r, r.Name, r.Output)
		}
	case schemas.RefSandbox:
		if v, ok = sandboxOutput(outs, r); ok {
			break
		}
		if _, applied := outs[schemas.SandboxComponent]; !applied {
			why = fmt.Errorf("%s: ${%s} has no value: the sandbox has recorded no outputs yet", what, r)
		} else {
			why = fmt.Errorf("%s: ${%s} has no value: the sandbox did not output it", what, r)
		}
	}
	if why != nil && *missing == nil {
		*missing = why
	}
	return v, ok
}

// sandboxOutput looks a sandbox reference up: the whole output, or one
// key of it.
func sandboxOutput(outs Outputs, r schemas.Ref) (any, bool) {
	v, ok := outs[schemas.SandboxComponent][r.Name]
	if !ok || r.Output == "" {
		return v, ok
	}
	obj, isObj := v.(map[string]any)
	if !isObj {
		return nil, false
	}
	v, ok = obj[r.Output]
	return v, ok
}

// SpecHash identifies a resolved spec: two specs with the same hash need
// no job between them.
func SpecHash(cs *schemas.ComponentState) string {
	b, _ := json.Marshal(cs)
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Decide returns the operation for an Apply step once its spec is
// resolved: "" when nothing needs doing.
func Decide(resolved *schemas.ComponentState, applied *Applied) string {
	switch {
	case applied == nil || applied.Status.Phase == schemas.PhaseDeleted || applied.Spec == nil:
		return schemas.OpCreate
	case applied.Status.Phase == schemas.PhaseApplied && applied.Status.Spec == SpecHash(resolved):
		return ""
	default:
		return schemas.OpUpdate
	}
}

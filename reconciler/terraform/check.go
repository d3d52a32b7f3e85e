package terraform

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-exec/tfexec"
	tfjson "github.com/hashicorp/terraform-json"

	"nuon.dev/nuon/internal/debugcmd"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

var (
	_ reconciler.DriftChecker  = (*Plugin)(nil)
	_ reconciler.HealthChecker = (*Plugin)(nil)
	_ reconciler.Debugger      = (*Plugin)(nil)
)

// maxDriftFields bounds the attributes reported per drifted resource.
const maxDriftFields = 10

// Drift plans the component against its state and changes nothing: one
// `terraform plan -detailed-exitcode` (which refreshes, and does not
// write the state), then `show -json` of the saved plan. Each resource
// the plan would touch is reported: missing (create), extra (delete) or
// changed (update or replace), with the attributes that differ; a change
// made outside terraform (the plan's resource_drift) is said in Diff. The
// plan's values never reach the log: the plan holds the variables,
// secrets included. With terraform.health, Health is the check's.
func (p *Plugin) Drift(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	r, err := p.start(job, env)
	if err != nil {
		return nil, err
	}
	defer r.cleanup()
	if none, _ := r.noState(); none {
		return nil, fmt.Errorf("terraform drift %s: nothing applied yet (no state)", job.Component)
	}
	res := &schemas.JobResult{APIVersion: schemas.APIVersion, Job: job.ID}
	if err := r.do(ctx,
		step{"inputs", r.resolveInputs},
		step{"extract", r.extract},
		step{"init", r.init},
		step{"plan", r.planChanges},
		step{"show", func(ctx context.Context) (err error) { res.Drift, err = r.showDrift(ctx); return err }},
		step{"health", func(ctx context.Context) (err error) { res.Health, err = r.health(ctx); return err }},
	); err != nil {
		return nil, err
	}
	res.BrokenLock = r.brokenLock.Schema()
	for _, d := range res.Drift {
		fmt.Fprintf(r.out, "%s %s: %s %s\n", d.Address, d.Action, strings.Join(d.Fields, ", "), d.Diff)
	}
	fmt.Fprintf(r.out, "terraform %s: %d resources drifted\n", job.Component, len(res.Drift))
	return res, nil
}

// showDrift reads the saved plan as JSON and lists what it would change.
func (r *run) showDrift(ctx context.Context) ([]schemas.ResourceDrift, error) {
	if !r.changed {
		return nil, nil
	}
	r.tf.SetStdout(nil)
	plan, err := r.tf.ShowPlanFile(ctx, r.plan)
	r.tf.SetStdout(r.out)
	if err != nil {
		return nil, err
	}
	outside := map[string]*tfjson.ResourceChange{}
	for _, rc := range plan.ResourceDrift {
		outside[rc.Address] = rc
	}
	var out []schemas.ResourceDrift
	seen := map[string]bool{}
	for _, rc := range plan.ResourceChanges {
		if rc.Change == nil || rc.Mode == tfjson.DataResourceMode {
			continue
		}
		a := rc.Change.Actions
		d := schemas.ResourceDrift{Address: rc.Address}
		switch {
		case a.NoOp() || a.Read():
			continue
		case a.Create():
			d.Action = schemas.DriftMissing
		case a.Delete():
			d.Action = schemas.DriftExtra
		default: // update, replace
			d.Action = schemas.DriftChanged
			d.Fields = changedFields(rc.Change)
			if a.Replace() {
				d.Diff = "must be replaced"
			}
		}
		if o := outside[rc.Address]; o != nil && o.Change != nil {
			d.Diff = strings.TrimSpace(d.Diff + "; " + outsideNote(o))
			d.Diff = strings.TrimPrefix(d.Diff, "; ")
		}
		seen[rc.Address] = true
		out = append(out, d)
	}
	// Changes outside terraform that the configuration does not undo are
	// drift too: the state would take them in on the next apply.
	for _, rc := range plan.ResourceDrift {
		if seen[rc.Address] || rc.Change == nil || rc.Change.Actions.NoOp() {
			continue
		}
		d := schemas.ResourceDrift{Address: rc.Address, Action: schemas.DriftChanged, Fields: changedFields(rc.Change), Diff: outsideNote(rc)}
		if rc.Change.Actions.Delete() {
			d.Action = schemas.DriftMissing
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b schemas.ResourceDrift) int { return strings.Compare(a.Address, b.Address) })
	return out, nil
}

func outsideNote(rc *tfjson.ResourceChange) string {
	if rc.Change.Actions.Delete() {
		return "deleted or replaced outside terraform"
	}
	if f := changedFields(rc.Change); len(f) > 0 {
		return "changed outside terraform: " + strings.Join(f, ", ")
	}
	return "changed outside terraform"
}

// changedFields names the top-level attributes whose value differs
// between before and after, or that the plan only knows after apply.
// Values are never reported: they may be sensitive.
func changedFields(c *tfjson.Change) []string {
	before, _ := c.Before.(map[string]any)
	after, _ := c.After.(map[string]any)
	unknown, _ := c.AfterUnknown.(map[string]any)
	keys := map[string]bool{}
	for k := range before {
		keys[k] = true
	}
	for k := range after {
		keys[k] = true
	}
	var fields []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if u, ok := unknown[k].(bool); ok && u {
			if before[k] != nil {
				fields = append(fields, k)
			}
			continue
		}
		if !reflect.DeepEqual(before[k], after[k]) {
			fields = append(fields, k)
		}
	}
	if len(fields) > maxDriftFields {
		fields = append(fields[:maxDriftFields], fmt.Sprintf("(%d more)", len(fields)-maxDriftFields))
	}
	return fields
}

// Health runs the component's health check against its state without
// planning: `terraform output`. Without terraform.health a component's
// health is its last job's outcome, and Health says Unknown.
func (p *Plugin) Health(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.Health, error) {
	r, err := p.start(job, env)
	if err != nil {
		return nil, err
	}
	defer r.cleanup()
	if job.Terraform == nil || job.Terraform.Health == nil || job.Terraform.Health.Output == "" {
		return &schemas.Health{Status: schemas.HealthUnknown, Message: "no health check (terraform.health)"}, nil
	}
	if none, _ := r.noState(); none {
		return &schemas.Health{Status: schemas.HealthUnknown, Message: "nothing applied yet"}, nil
	}
	var h *schemas.Health
	if err := r.do(ctx,
		step{"inputs", r.resolveInputs},
		step{"extract", r.extract},
		step{"init", r.init},
		step{"health", func(ctx context.Context) (err error) { h, err = r.health(ctx); return err }},
	); err != nil {
		return nil, err
	}
	return h, nil
}

// health checks terraform.health.output against the state's outputs;
// without a check it returns nil.
func (r *run) health(ctx context.Context) (*schemas.Health, error) {
	if r.job.Terraform == nil || r.job.Terraform.Health == nil || r.job.Terraform.Health.Output == "" {
		return nil, nil
	}
	outs := r.outs
	if outs == nil {
		r.tf.SetStdout(nil)
		var err error
		outs, err = r.tf.Output(ctx)
		r.tf.SetStdout(r.out)
		if err != nil {
			return nil, err
		}
	}
	return healthOf(r.job.Terraform.Health.Output, outs), nil
}

// healthOf is Ready when the output name is true, and Failed otherwise,
// with why.
func healthOf(name string, outs map[string]tfexec.OutputMeta) *schemas.Health {
	failed := func(msg string) *schemas.Health {
		return &schemas.Health{Status: schemas.HealthFailed, Message: msg,
			Resources: []schemas.ResourceHealth{{Address: "output." + name, Status: schemas.HealthFailed, Message: msg}}}
	}
	o, ok := outs[name]
	if !ok {
		return failed(fmt.Sprintf("health check output %q does not exist", name))
	}
	var v any
	if err := json.Unmarshal(o.Value, &v); err != nil {
		return failed(fmt.Sprintf("health check output %q: %v", name, err))
	}
	switch v {
	case true:
		return &schemas.Health{Status: schemas.HealthReady, Message: fmt.Sprintf("output %s is true", name)}
	case false:
		return failed(fmt.Sprintf("health check output %s is false", name))
	}
	return failed(fmt.Sprintf("health check output %s is not a boolean (%s)", name, typeName(v)))
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case float64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// Debug answers `state list` and `state show ADDRESS` from the state as
// `terraform show -json` reads it: the address is looked up in the JSON,
// never passed to terraform, and every attribute terraform marks
// sensitive (in the provider's schema or the configuration) is shown as
// (sensitive).
func (p *Plugin) Debug(ctx context.Context, job *schemas.Job, env reconciler.Env, cmd debugcmd.Command, out io.Writer) error {
	r, err := p.start(job, env)
	if err != nil {
		return err
	}
	defer r.cleanup()
	if none, _ := r.noState(); none {
		fmt.Fprintln(out, "(no state: nothing applied yet)")
		return nil
	}
	var st *tfjson.State
	if err := r.do(ctx,
		step{"inputs", r.resolveInputs},
		step{"extract", r.extract},
		step{"init", r.init},
		step{"show", func(ctx context.Context) (err error) {
			r.tf.SetStdout(nil)
			st, err = r.tf.Show(ctx)
			r.tf.SetStdout(r.out)
			return err
		}},
	); err != nil {
		return err
	}
	var resources []*tfjson.StateResource
	if st.Values != nil {
		resources = allResources(st.Values.RootModule)
	}
	slices.SortFunc(resources, func(a, b *tfjson.StateResource) int { return strings.Compare(a.Address, b.Address) })
	var b bytes.Buffer
	switch cmd.Op {
	case debugcmd.OpStateList:
		for _, res := range resources {
			fmt.Fprintln(&b, res.Address)
		}
	case debugcmd.OpStateShow:
		i := slices.IndexFunc(resources, func(res *tfjson.StateResource) bool { return res.Address == cmd.Address })
		if i < 0 {
			fmt.Fprintf(&b, "no resource %s in the state\n", cmd.Address)
			break
		}
		if err := showResource(&b, resources[i]); err != nil {
			return err
		}
	default:
		return &debugcmd.Refusal{Command: cmd.Words(), Reason: "not a terraform command"}
	}
	_, err = out.Write(b.Bytes())
	return err
}

func allResources(m *tfjson.StateModule) []*tfjson.StateResource {
	if m == nil {
		return nil
	}
	out := slices.Clone(m.Resources)
	for _, c := range m.ChildModules {
		out = append(out, allResources(c)...)
	}
	return out
}

// Sensitive replaces a sensitive value in a state show answer.
const Sensitive = "(sensitive)"

// showResource writes one resource as `terraform state show` does, in
// HCL-like lines, its sensitive attributes masked.
func showResource(w io.Writer, res *tfjson.StateResource) error {
	var sensitive any
	if len(res.SensitiveValues) > 0 {
		if err := json.Unmarshal(res.SensitiveValues, &sensitive); err != nil {
			return fmt.Errorf("sensitive values of %s: %w", res.Address, err)
		}
	}
	fmt.Fprintf(w, "# %s:\n", res.Address)
	fmt.Fprintf(w, "resource %q %q {\n", res.Type, res.Name)
	attrs, _ := mask(res.AttributeValues, sensitive).(map[string]any)
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		v, err := json.Marshal(attrs[k])
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "    %s = %s\n", k, v)
	}
	fmt.Fprintln(w, "}")
	return nil
}

// mask replaces the parts of v that sensitive (terraform's
// sensitive_values: the same shape, true where sensitive) marks.
func mask(v, sensitive any) any {
	if s, ok := sensitive.(bool); ok && s {
		return Sensitive
	}
	switch v := v.(type) {
	case map[string]any:
		sm, _ := sensitive.(map[string]any)
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = mask(x, sm[k])
		}
		return out
	case []any:
		sl, _ := sensitive.([]any)
		out := make([]any, len(v))
		for i, x := range v {
			var s any
			if i < len(sl) {
				s = sl[i]
			}
			out[i] = mask(x, s)
		}
		return out
	}
	return v
}

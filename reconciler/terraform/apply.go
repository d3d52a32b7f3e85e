package terraform

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/hashicorp/terraform-exec/tfexec"

	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// Apply makes the component match the job: it plans against the state in
// env.StateDir, applies exactly that plan and reports the outputs, and
// with terraform.health the check's outcome as the result's Health (a
// failed check does not fail the job: the apply happened).
//
// A plan-bound job (job.Plan) does something else: mode record plans and
// keeps the saved plan (Record); mode apply applies the saved plan whose
// hash the job names and nothing else (ApplySaved).
func (p *Plugin) Apply(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	if job != nil && job.Plan != nil {
		return reconciler.ApplyPlanBound(ctx, p, "terraform", job, env)
	}
	r, err := p.start(job, env)
	if err != nil {
		return nil, err
	}
	defer r.cleanup()
	if err := r.do(ctx,
		step{"inputs", r.resolveInputs},
		step{"extract", r.extract},
		step{"init", r.init},
		step{"plan", r.planChanges},
		step{"apply", r.applyPlan},
		step{"output", r.outputs},
		step{"health", func(ctx context.Context) (err error) { r.result.Health, err = r.health(ctx); return err }},
	); err != nil {
		return nil, err
	}
	return r.result, nil
}

// planChanges saves a plan and notes whether it changes anything.
func (r *run) planChanges(ctx context.Context) error {
	return r.locking(ctx, func(ctx context.Context) error {
		changed, err := r.tf.Plan(ctx, tfexec.Out(r.plan))
		r.changed = changed
		return err
	})
}

// applyPlan applies the saved plan, nothing else. An empty plan is applied
// too: it records the refreshed state.
func (r *run) applyPlan(ctx context.Context) error {
	return r.locking(ctx, func(ctx context.Context) error {
		return r.tf.Apply(ctx, tfexec.DirOrPlan(r.plan))
	})
}

// outputs reads the module's outputs from the state into the result. The
// values of sensitive outputs stay in the state; the result names them.
func (r *run) outputs(ctx context.Context) error {
	// terraform-exec copies the stdout of every command to the log, and
	// `output -json` prints sensitive values.
	r.tf.SetStdout(nil)
	outs, err := r.tf.Output(ctx)
	r.tf.SetStdout(r.out)
	if err != nil {
		return err
	}
	r.outs = outs
	res := &schemas.JobResult{
		APIVersion: schemas.APIVersion,
		Job:        r.job.ID,
		Changed:    r.changed,
	}
	for name, o := range outs {
		if o.Sensitive {
			res.Sensitive = append(res.Sensitive, name)
			continue
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(o.Value))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("output %s: %w", name, err)
		}
		if res.Outputs == nil {
			res.Outputs = map[string]any{}
		}
		res.Outputs[name] = v
	}
	slices.Sort(res.Sensitive)
	res.BrokenLock = r.brokenLock.Schema()
	r.result = res
	return nil
}

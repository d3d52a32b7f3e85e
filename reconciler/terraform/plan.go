package terraform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"

	"nuon.dev/nuon/internal/atomicfile"
	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// plansDir, in the component's state directory, keeps saved plans that
// wait for approval: <hex>.tfplan, the plan exactly as terraform saved it,
// and <hex>.json, its record (reconciler.SavedPlan). It lives outside
// moduleDir, which every job extracts afresh.
const plansDir = reconciler.PlansDir

// ErrPlanMismatch means a plan-bound apply found no saved plan with the
// approved hash, or a file whose content has another hash: nothing is
// applied. Retrying does not help; only a new plan and its approval do.
var ErrPlanMismatch = reconciler.ErrPlanMismatch

// savedPlan is the <hex>.json beside a saved plan. Its Content is the
// SHA-256 of the plan's JSON form without the moment it was made: two
// plans that make the same change from the same state with the same
// configuration and variables have the same Content, while their files
// (which hold timestamps) differ.
type savedPlan = reconciler.SavedPlan

// HashFile is the plan hash of a saved plan file: "sha256:" and the hex
// SHA-256 of its bytes.
func HashFile(path string) (string, []byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	return hashBytes(b), b, nil
}

func hashBytes(b []byte) string { return reconciler.HashBytes(b) }

// plansPath is the directory of saved plans of this run's component.
func (r *run) plansPath() string { return filepath.Join(filepath.Dir(r.state), plansDir) }

// planFile is the saved plan with hash h in plansPath.
func (r *run) savedFile(h, ext string) string {
	return filepath.Join(r.plansPath(), strings.TrimPrefix(h, "sha256:")+ext)
}

// Record plans the job's change and keeps the saved plan for a later
// plan-bound apply, changing nothing: one `terraform plan -out`, `show
// -json` and `show` of it. The result's Plan is the record: the hash over
// the saved file, a summary by resource address and the readable diff,
// redacted and bounded. When job.Plan.Keep names a saved plan that makes
// exactly the same change, that plan and its record are kept (an identical
// re-plan keeps its approval) and the new one is dropped. Every other saved
// plan of the component is removed: its approval can no longer apply.
func (p *Plugin) Record(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	r, err := p.start(job, env)
	if err != nil {
		return nil, err
	}
	defer r.cleanup()
	res := &schemas.JobResult{APIVersion: schemas.APIVersion, Job: job.ID}
	if err := r.do(ctx,
		step{"inputs", r.resolveInputs},
		step{"extract", r.extract},
		step{"init", r.init},
		step{"plan", r.planChanges},
		step{"record", func(ctx context.Context) (err error) { res.Plan, err = r.record(ctx); return err }},
	); err != nil {
		return nil, err
	}
	res.BrokenLock = r.brokenLock.Schema()
	s := res.Plan.Summary
	fmt.Fprintf(r.out, "terraform %s: plan %s saved: %d to create, %d to update, %d to delete, %d to replace\n", job.Component, res.Plan.Hash,
		s.Counts[schemas.ChangeCreate], s.Counts[schemas.ChangeUpdate], s.Counts[schemas.ChangeDelete], s.Counts[schemas.ChangeReplace])
	return res, nil
}

// record reads the plan just saved, writes it and its record into
// plansPath and returns the record (or the kept one).
func (r *run) record(ctx context.Context) (*schemas.PlanRecord, error) {
	r.tf.SetStdout(nil)
	defer r.tf.SetStdout(r.out)
	plan, err := r.tf.ShowPlanFile(ctx, r.plan)
	if err != nil {
		return nil, err
	}
	text, err := r.tf.ShowPlanFileRaw(ctx, r.plan)
	if err != nil {
		return nil, err
	}
	content, err := contentHash(plan)
	if err != nil {
		return nil, err
	}
	h, data, err := HashFile(r.plan)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(r.plansPath(), 0o700); err != nil {
		return nil, err
	}
	if keep := r.job.Plan.Keep; keep != "" {
		if kept, ok := r.kept(keep, content); ok {
			r.prune(keep)
			return kept, nil
		}
	}
	red, err := r.redactor()
	if err != nil {
		return nil, err
	}
	rec := &schemas.PlanRecord{
		Component: r.job.Component,
		Hash:      h,
		Job:       r.job.ID,
		Size:      int64(len(data)),
		Summary:   Summarize(plan),
	}
	rec.Diff, rec.DiffTruncated = reconciler.BoundDiff(red.String(text))
	if err := atomicfile.Write(r.savedFile(h, ".tfplan"), data, 0o600); err != nil {
		return nil, err
	}
	// The plan as JSON, for the agent's policies: it holds the values
	// of variables, secrets included, so it stays in the install, owner
	// only, like the state.
	planJSON, err := json.Marshal(plan)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(r.savedFile(h, reconciler.PlanJSONExt), planJSON, 0o600); err != nil {
		return nil, err
	}
	if err := atomicfile.WriteJSON(r.savedFile(h, ".json"), savedPlan{Record: *rec, Content: content}); err != nil {
		return nil, err
	}
	r.prune(h)
	return rec, nil
}

// kept returns the record of the saved plan keep when its file is intact
// and it makes the change content.
func (r *run) kept(keep, content string) (*schemas.PlanRecord, bool) {
	b, err := os.ReadFile(r.savedFile(keep, ".json"))
	if err != nil {
		return nil, false
	}
	var sp savedPlan
	if json.Unmarshal(b, &sp) != nil || sp.Content != content || sp.Record.Hash != keep {
		return nil, false
	}
	if h, _, err := HashFile(r.savedFile(keep, ".tfplan")); err != nil || h != keep {
		return nil, false
	}
	return &sp.Record, true
}

// prune removes every saved plan but keep.
func (r *run) prune(keep string) {
	entries, _ := os.ReadDir(r.plansPath())
	stem := strings.TrimPrefix(keep, "sha256:")
	for _, e := range entries {
		if s, _, _ := strings.Cut(e.Name(), "."); s == stem {
			continue
		}
		if err := os.Remove(filepath.Join(r.plansPath(), e.Name())); err != nil {
			r.logger.Warn("terraform prune saved plan", "file", e.Name(), "error", err)
		}
	}
}

// redactor redacts the job's secret values, resolved from its inputs, from
// the record: the job process redacts its result again.
func (r *run) redactor() (*redact.Redactor, error) {
	var vars map[string]any
	if err := roundTrip(r.job.Inputs, &vars); err != nil {
		return nil, fmt.Errorf("inputs: %w", err)
	}
	return reconciler.PlanRedactor(vars, r.lookup)
}

// contentHash is the SHA-256 of plan's JSON form less its timestamp.
func contentHash(plan *tfjson.Plan) (string, error) {
	b, err := json.Marshal(plan)
	if err != nil {
		return "", err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return "", err
	}
	delete(m, "timestamp")
	// Re-encoding a map sorts its keys: the form is canonical.
	if b, err = json.Marshal(m); err != nil {
		return "", err
	}
	return hashBytes(b), nil
}

// Summarize lists what plan changes by resource address, per kind. Reads
// of data sources and no-ops are left out; the lists are cut at
// schemas.MaxPlanAddresses in all, the counts stay exact.
func Summarize(plan *tfjson.Plan) schemas.PlanSummary {
	s := schemas.PlanSummary{Counts: map[string]int{}}
	listed := 0
	for _, rc := range plan.ResourceChanges {
		if rc.Change == nil || rc.Mode == tfjson.DataResourceMode {
			continue
		}
		a := rc.Change.Actions
		var list *[]string
		kind := ""
		switch {
		case a.NoOp() || a.Read():
			continue
		case a.Replace():
			kind, list = schemas.ChangeReplace, &s.Replace
		case a.Create():
			kind, list = schemas.ChangeCreate, &s.Create
		case a.Delete():
			kind, list = schemas.ChangeDelete, &s.Delete
		default:
			kind, list = schemas.ChangeUpdate, &s.Update
		}
		s.Counts[kind]++
		if listed >= schemas.MaxPlanAddresses {
			s.Truncated++
			continue
		}
		listed++
		*list = append(*list, rc.Address)
	}
	for _, l := range []*[]string{&s.Create, &s.Update, &s.Delete, &s.Replace} {
		slices.Sort(*l)
	}
	if len(s.Counts) == 0 {
		s.Counts = nil
	}
	return s
}

// applySaved is the apply step of a plan-bound apply: it reads the saved
// plan the job names, checks that its bytes have the approved hash, writes
// exactly those bytes where terraform reads them, and applies them.
// Terraform refuses a plan whose state moved on since it was made (a stale
// plan), so an approved plan never applies over changes it did not see.
func (r *run) applySaved(ctx context.Context) error {
	want := r.job.Plan.Hash
	if !schemas.ValidPlanHash(want) {
		return fmt.Errorf("%w: %q is not a plan hash", ErrPlanMismatch, want)
	}
	h, data, err := HashFile(r.savedFile(want, ".tfplan"))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %s is not saved in this install", ErrPlanMismatch, want)
	}
	if err != nil {
		return err
	}
	if h != want {
		return fmt.Errorf("%w: the saved plan %s now hashes to %s", ErrPlanMismatch, want, h)
	}
	if err := atomicfile.Write(r.plan, data, 0o600); err != nil {
		return err
	}
	if b, err := os.ReadFile(r.plan); err != nil || !bytes.Equal(b, data) {
		return fmt.Errorf("%w: the plan copied for apply differs", ErrPlanMismatch)
	}
	if b, err := os.ReadFile(r.savedFile(want, ".json")); err == nil {
		var sp savedPlan
		if json.Unmarshal(b, &sp) == nil {
			r.saved = &sp.Record
		}
	}
	r.changed = true
	if err := r.applyPlan(ctx); err != nil {
		return err
	}
	// Applied: the plan is stale from now on, and gone.
	r.prune("")
	return nil
}

// ApplySaved applies the saved plan whose hash job.Plan.Hash names, and
// nothing else: no new plan is made. A plan that is not saved, or whose
// file no longer has that hash, fails with ErrPlanMismatch before
// terraform runs; a stale one fails in terraform. The result's Plan is the
// applied plan's record.
func (p *Plugin) ApplySaved(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	r, err := p.start(job, env)
	if err != nil {
		return nil, err
	}
	defer r.cleanup()
	if err := r.do(ctx,
		step{"inputs", r.resolveInputs},
		step{"extract", r.extract},
		step{"init", r.init},
		step{"apply", r.applySaved},
		step{"output", r.outputs},
		step{"health", func(ctx context.Context) (err error) { r.result.Health, err = r.health(ctx); return err }},
	); err != nil {
		return nil, err
	}
	r.result.Plan = r.saved
	return r.result, nil
}

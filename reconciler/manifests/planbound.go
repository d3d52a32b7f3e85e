package manifests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/fluxcd/cli-utils/pkg/object"
	"github.com/fluxcd/pkg/ssa"
	ssaerrors "github.com/fluxcd/pkg/ssa/errors"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/reconciler/kube"
	"nuon.dev/nuon/schemas"
)

// ErrPlanMismatch means a plan-bound apply found no saved plan with the
// approved hash, a file whose content has another hash, or a plan made
// over an inventory that has moved since: nothing is applied. Only a new
// plan and its approval help. It is reconciler.ErrPlanMismatch.
var ErrPlanMismatch = reconciler.ErrPlanMismatch

// savedExt ends the name of a saved manifests plan: the exact object set
// as canonical JSON (SavedSet), whose SHA-256 is the plan hash.
const savedExt = ".objects.json"

// SavedSet is a saved manifests plan: every object the apply sends, as
// rendered (inputs substituted, namespace and owner labels set), sorted by
// id, the inventory entries it prunes, and the inventory it was planned
// over. Encoded with sorted keys and no spaces, the same change always
// has the same bytes, so an identical re-plan has the same hash.
type SavedSet struct {
	Component string           `json:"component"`
	Objects   []map[string]any `json:"objects"`
	Prune     []Entry          `json:"prune"`
	// Base is the inventory the plan was made over (ids and digests): an
	// apply over another inventory is stale and refused.
	Base []Entry `json:"base"`
	// Recreate is manifests.recreate when the plan was made: whether a
	// replace deletes and creates the object. It is part of what is
	// approved, so the apply takes it from here, not from the job.
	Recreate bool `json:"recreate,omitempty"`
}

// encode is the canonical form of s.
func (s *SavedSet) encode() ([]byte, error) { return reconciler.Canonical(s) }

func hashBytes(b []byte) string { return reconciler.HashBytes(b) }

// Record plans the job's change with server-side dry-runs and keeps the
// saved plan for a later plan-bound apply, changing nothing. Each object
// is a create (it does not exist), an update (the dry-run changes fields
// of it, listed), a replace (the API server refuses the change of an
// immutable field) or a no-op; each inventory object the manifests no
// longer hold is a delete. The plan hash is the SHA-256 of the saved
// object set (SavedSet), so an identical re-plan keeps its hash and its
// approval. Every other saved plan of the component is removed.
func (p *Plugin) Record(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	r, err := p.start(job, env)
	if err != nil {
		return nil, err
	}
	var rec *schemas.PlanRecord
	if err := r.do(ctx,
		step{"inputs", r.resolveInputs},
		step{"extract", r.extract},
		step{"connect", r.connect},
		step{"load", r.load},
		step{"inventory", r.readInventory},
		step{"plan", r.planChanges},
		step{"record", func(ctx context.Context) (err error) { rec, err = r.recordPlan(ctx); return err }},
	); err != nil {
		return nil, err
	}
	s := rec.Summary
	fmt.Fprintf(r.log, "manifests %s: plan %s saved: %d to create, %d to update, %d to delete, %d to replace\n", job.Component, rec.Hash,
		s.Counts[schemas.ChangeCreate], s.Counts[schemas.ChangeUpdate], s.Counts[schemas.ChangeDelete], s.Counts[schemas.ChangeReplace])
	return &schemas.JobResult{APIVersion: schemas.APIVersion, Job: job.ID, Plan: rec}, nil
}

// savedSet is the object set of this run's plan.
func (r *run) savedSet() *SavedSet {
	s := &SavedSet{Component: r.job.Component, Prune: []Entry{}, Base: []Entry{}}
	ds := slices.Clone(r.desired)
	slices.SortFunc(ds, func(a, b *desired) int { return strings.Compare(fmtID(a.id), fmtID(b.id)) })
	for _, d := range ds {
		s.Objects = append(s.Objects, d.obj.Object)
	}
	for _, e := range r.plan.prune {
		e.ResourceVersion = ""
		s.Prune = append(s.Prune, e)
	}
	s.Base = baseOf(r.inv)
	s.Recreate = r.settings.Recreate
	return s
}

// baseOf is inv's entries without their resourceVersions (a status write
// does not make a plan stale), sorted.
func baseOf(inv *Inventory) []Entry {
	out := []Entry{}
	if inv == nil {
		return out
	}
	for _, e := range inv.Objects {
		e.ResourceVersion = ""
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// recordPlan dry-runs the changed objects, writes the saved set, its JSON
// form for the policies and its record, and returns the record.
func (r *run) recordPlan(ctx context.Context) (*schemas.PlanRecord, error) {
	changes, err := r.dryRunAll(ctx)
	if err != nil {
		return nil, err
	}
	data, err := r.savedSet().encode()
	if err != nil {
		return nil, err
	}
	h := hashBytes(data)
	red, err := r.redactor()
	if err != nil {
		return nil, err
	}
	rec := &schemas.PlanRecord{
		Component: r.job.Component,
		Hash:      h,
		Job:       r.job.ID,
		Size:      int64(len(data)),
		Summary:   kube.Summarize(changes),
	}
	rec.Diff, rec.DiffTruncated = reconciler.BoundDiff(red.String(kube.ReadableDiff(changes)))
	planJSON, err := json.Marshal(PolicyInput(changes))
	if err != nil {
		return nil, err
	}
	// The saved set holds Secrets' data: owner only, never out of the
	// install.
	if err := reconciler.SavePlan(r.dir, savedExt, data, planJSON, rec, r.logger); err != nil {
		return nil, err
	}
	return rec, nil
}

// dryRunAll finds each object's change: creates and no-ops from the
// plan's LIST, updates and replaces from a server-side dry-run.
func (r *run) dryRunAll(ctx context.Context) ([]kube.Change, error) {
	var mu sync.Mutex
	var out []kube.Change
	add := func(c kube.Change) {
		mu.Lock()
		out = append(out, c)
		mu.Unlock()
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.p.concurrency())
	for _, d := range r.desired {
		id := fmtID(d.id)
		switch d.action {
		case actionCreate:
			add(kube.Change{ID: id, Kind: schemas.ChangeCreate, Obj: d.obj.Object})
			continue
		case actionSkip:
			add(kube.Change{ID: id, Kind: schemas.ChangeNoop, Obj: d.obj.Object})
			continue
		}
		g.Go(func() error {
			entry, live, merged, err := r.manager.Diff(gctx, d.obj.DeepCopy(), ssa.DiffOptions{})
			if err != nil {
				cause := err
				var dre *ssaerrors.DryRunErr
				if errors.As(err, &dre) {
					cause = dre.Unwrap()
				}
				if apierrors.IsInvalid(cause) && strings.Contains(cause.Error(), "immutable") {
					add(kube.Change{ID: id, Kind: schemas.ChangeReplace, Obj: d.obj.Object, Why: cause.Error()})
					return nil
				}
				return fmt.Errorf("%s (%s): dry-run: %w", id, d.file, cause)
			}
			switch entry.Action {
			case ssa.CreatedAction:
				add(kube.Change{ID: id, Kind: schemas.ChangeCreate, Obj: d.obj.Object})
			case ssa.ConfiguredAction:
				c := kube.Change{ID: id, Kind: schemas.ChangeUpdate, Obj: d.obj.Object}
				if live != nil && merged != nil {
					c.Before, c.After = live.Object, merged.Object
					c.Fields = diffPaths(live.Object, merged.Object)
				}
				add(c)
			default:
				add(kube.Change{ID: id, Kind: schemas.ChangeNoop, Obj: d.obj.Object})
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for _, e := range r.plan.prune {
		add(kube.Change{ID: e.String(), Kind: schemas.ChangeDelete, Obj: e.Object().Object})
	}
	slices.SortFunc(out, func(a, b kube.Change) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// redactor redacts the values of the job's secrets from the record.
func (r *run) redactor() (*redact.Redactor, error) {
	inputs, err := normalizeInputs(r.job.Inputs)
	if err != nil {
		return nil, err
	}
	return reconciler.PlanRedactor(inputs, r.p.lookup())
}

// ApplySaved applies the saved plan whose hash job.Plan.Hash names, and
// nothing else: the objects are the saved set's, not the job's manifests
// read again. A plan that is not saved, whose file no longer has that
// hash, or that was made over another inventory (another apply happened
// since) fails with ErrPlanMismatch before anything is sent. The result's
// Plan is the applied plan's record; the saved plan is gone after.
func (p *Plugin) ApplySaved(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	r, err := p.start(job, env)
	if err != nil {
		return nil, err
	}
	var rec *schemas.PlanRecord
	if err := r.do(ctx,
		step{"inventory", r.readInventory},
		step{"saved", func(context.Context) (err error) { rec, err = r.loadSaved(); return err }},
		step{"connect", r.connect},
		step{"plan", r.planChanges},
		step{"apply", r.apply},
		step{"prune", r.prune},
		step{"record", r.record},
		step{"wait", r.wait},
		step{"health", r.healthAfterApply},
	); err != nil {
		r.keepCreated()
		return nil, err
	}
	reconciler.PrunePlans(r.dir, "", r.logger)
	res := r.report()
	res.Plan = rec
	return res, nil
}

// loadSaved reads the saved set the job names, checks its hash and its
// base, and makes its objects the run's desired ones.
func (r *run) loadSaved() (*schemas.PlanRecord, error) {
	want := r.job.Plan.Hash
	data, err := reconciler.LoadPlan(r.dir, want, savedExt)
	if err != nil {
		return nil, err
	}
	var s SavedSet
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: saved plan %s: %w", ErrPlanMismatch, want, err)
	}
	if s.Component != r.job.Component {
		return nil, fmt.Errorf("%w: saved plan %s is component %s's", ErrPlanMismatch, want, s.Component)
	}
	if base := baseOf(r.inv); !slices.Equal(base, s.Base) {
		return nil, fmt.Errorf("%w: plan %s is stale: the component's objects were applied since it was made", ErrPlanMismatch, want)
	}
	r.settings.Recreate = s.Recreate
	for _, o := range s.Objects {
		if o == nil {
			return nil, fmt.Errorf("%w: saved plan %s holds a null object", ErrPlanMismatch, want)
		}
		obj := &unstructured.Unstructured{Object: reconciler.TypedNumbers(o).(map[string]any)}
		if obj.GetAPIVersion() == "" || obj.GetKind() == "" || obj.GetName() == "" {
			return nil, fmt.Errorf("%w: saved plan %s holds an object without apiVersion, kind or name", ErrPlanMismatch, want)
		}
		d := &desired{obj: obj, id: object.UnstructuredToObjMetadata(obj), file: "plan " + want, stage: stageOf(obj)}
		if d.digest, err = digest(obj); err != nil {
			return nil, err
		}
		r.desired = append(r.desired, d)
	}
	rec, err := reconciler.SavedPlanRecord(r.dir, want)
	if err != nil {
		rec = nil
	}
	return rec, nil
}

// PolicyInput is the plan as the policies read it: kube.PolicyInput in
// the nuon-manifests format.
func PolicyInput(changes []kube.Change) map[string]any {
	return kube.PolicyInput("nuon-manifests", changes)
}

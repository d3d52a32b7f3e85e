package manifests

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fluxcd/cli-utils/pkg/object"
	"github.com/fluxcd/pkg/ssa"
	ssaerrors "github.com/fluxcd/pkg/ssa/errors"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// ErrImmutable reports an object whose new version changes a field the API
// server does not allow to change, in a component that does not allow
// recreating objects (manifests.recreate).
var ErrImmutable = errors.New("immutable field changed")

// changes is what a run did, by object id.
type changes struct {
	mu         sync.Mutex
	created    []string
	configured []string
	unchanged  int
	deleted    []string
	skipped    []string // prune candidates no longer ours
	drift      []Drift
}

// Drift is one object that someone other than the plugin changed since
// the last apply, in fields the plugin manages. The apply sets them back.
type Drift struct {
	// Object is Kind/namespace/name.
	Object string `json:"object"`
	// Fields are the paths that differ, at most maxDriftFields.
	Fields []string `json:"fields"`
}

// maxDriftFields bounds the paths reported per drifted object.
const maxDriftFields = 10

func (c *changes) add(list *[]string, id string) {
	c.mu.Lock()
	*list = append(*list, id)
	c.mu.Unlock()
}

// Apply makes the cluster hold exactly the component's manifests: it
// applies what changed, sets drifted fields back, prunes what the new
// version dropped, records the inventory and, with manifests.wait, waits
// for every object to become ready. The result's Health is the objects'
// health as kstatus computes it, whether or not the apply waited.
//
// A plan-bound job (job.Plan) does something else: mode record dry-runs
// and keeps the saved object set (Record); mode apply applies the saved
// set whose hash the job names and nothing else (ApplySaved).
func (p *Plugin) Apply(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	if job != nil && job.Plan != nil {
		return reconciler.ApplyPlanBound(ctx, p, "manifests", job, env)
	}
	r, err := p.start(job, env)
	if err != nil {
		return nil, err
	}
	if err := r.do(ctx,
		step{"inputs", r.resolveInputs},
		step{"extract", r.extract},
		step{"connect", r.connect},
		step{"load", r.load},
		step{"inventory", r.readInventory},
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
	return r.report(), nil
}

// keepCreated adds the objects a failed run created to the inventory, so
// that a later version that drops them prunes them. Their digest is left
// empty: the next run dry-runs them.
func (r *run) keepCreated() {
	if r.inv == nil || r.plan == nil || len(r.changes.created) == 0 {
		return
	}
	known := map[string]bool{}
	for _, e := range r.inv.Objects {
		known[e.String()] = true
	}
	created := map[string]bool{}
	for _, id := range r.changes.created {
		created[id] = true
	}
	added := false
	for _, d := range r.desired {
		if id := fmtID(d.id); created[id] && !known[id] {
			r.inv.Objects = append(r.inv.Objects, entryOf(d.obj, ""))
			added = true
		}
	}
	if !added {
		return
	}
	r.inv.APIVersion, r.inv.Kind, r.inv.Component = schemas.APIVersion, kindInventory, r.job.Component
	if err := r.inv.write(r.dir); err != nil {
		r.logger.Warn("record the objects of a failed apply", "error", err)
	}
}

// resolveInputs copies the job's inputs with their secrets resolved.
func (r *run) resolveInputs(context.Context) error {
	inputs, err := normalizeInputs(r.job.Inputs)
	if err != nil {
		return err
	}
	inputs, _, err = reconciler.ResolveSecrets(inputs, r.p.lookup())
	if err != nil {
		return err
	}
	r.inputs = inputs
	return nil
}

// extract replaces STATEDIR/manifests with the job's manifests artifact.
func (r *run) extract(ctx context.Context) error {
	a, err := reconciler.JobArtifact(r.job, ManifestsArtifact)
	if err != nil {
		return err
	}
	return reconciler.ExtractFresh(ctx, r.env, a, r.manifests)
}

func (r *run) readInventory(context.Context) error {
	inv, ok, err := readInventory(r.dir)
	r.inv, r.hadInv = inv, ok
	return err
}

// apply applies the desired objects stage by stage. In each stage, new
// objects are applied at once, in parallel; changed ones go through ssa's
// dry-run and apply; unchanged ones that someone wrote since are
// dry-run first to tell drift from a status update. Definitions are
// waited for before the next stage.
func (r *run) apply(ctx context.Context) error {
	for stage := range stageCount {
		var create, update, check []*desired
		for _, d := range r.desired {
			if d.stage != stage {
				continue
			}
			switch d.action {
			case actionCreate:
				create = append(create, d)
			case actionUpdate:
				update = append(update, d)
			case actionCheck:
				check = append(check, d)
			case actionSkip:
				r.changes.unchanged++
			}
		}
		if err := r.create(ctx, create); err != nil {
			return err
		}
		drifted, err := r.checkDrift(ctx, check)
		if err != nil {
			return err
		}
		if err := r.update(ctx, append(update, drifted...)); err != nil {
			return err
		}
		if stage == stageDefinitions && len(create)+len(update)+len(drifted) > 0 {
			set := object.ObjMetadataSet{}
			for _, d := range slices.Concat(create, update, drifted) {
				set = append(set, d.id)
			}
			opts := ssa.WaitOptions{Interval: 200 * time.Millisecond, Timeout: r.waitTimeout(ctx)}
			if err := r.manager.WaitForSetWithContext(ctx, set, opts); err != nil {
				return fmt.Errorf("definitions not ready: %w", err)
			}
		}
	}
	return nil
}

// create applies objects that do not exist yet, in parallel, without the
// dry-run: there is nothing to compare them with.
func (r *run) create(ctx context.Context, objs []*desired) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(r.p.concurrency())
	for _, d := range objs {
		g.Go(func() error {
			obj := d.obj.DeepCopy()
			err := r.client.Patch(ctx, obj, client.Apply, client.ForceOwnership, client.FieldOwner(FieldManager))
			if err != nil {
				return fmt.Errorf("%s (%s): %w", fmtID(d.id), d.file, err)
			}
			d.rv = obj.GetResourceVersion()
			r.changes.add(&r.changes.created, fmtID(d.id))
			return nil
		})
	}
	return g.Wait()
}

// checkDrift dry-runs objects that someone wrote since the last apply and
// returns those whose fields drifted from the manifests.
func (r *run) checkDrift(ctx context.Context, objs []*desired) ([]*desired, error) {
	var mu sync.Mutex
	var drifted []*desired
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(r.p.concurrency())
	for _, d := range objs {
		g.Go(func() error {
			entry, live, merged, err := r.manager.Diff(ctx, d.obj.DeepCopy(), ssa.DiffOptions{Force: r.settings.Recreate})
			if err != nil {
				return r.applyError(d, err)
			}
			if entry.Action != ssa.ConfiguredAction && entry.Action != ssa.CreatedAction {
				mu.Lock()
				r.changes.unchanged++
				mu.Unlock()
				return nil
			}
			var fields []string
			if live != nil && merged != nil {
				fields = diffPaths(live.Object, merged.Object)
			}
			mu.Lock()
			defer mu.Unlock()
			drifted = append(drifted, d)
			r.changes.drift = append(r.changes.drift, Drift{Object: fmtID(d.id), Fields: fields})
			return nil
		})
	}
	err := g.Wait()
	slices.SortFunc(r.changes.drift, func(a, b Drift) int { return strings.Compare(a.Object, b.Object) })
	return drifted, err
}

// update applies changed objects with ssa: a dry-run of each, and an apply
// of those that differ. With manifests.recreate an object whose immutable
// fields changed is deleted and created again.
func (r *run) update(ctx context.Context, objs []*desired) error {
	if len(objs) == 0 {
		return nil
	}
	byID := map[object.ObjMetadata]*desired{}
	us := make([]*unstructured.Unstructured, len(objs))
	for i, d := range objs {
		us[i] = d.obj.DeepCopy()
		byID[d.id] = d
	}
	opts := ssa.DefaultApplyOptions()
	opts.Force = r.settings.Recreate
	opts.WaitInterval = 200 * time.Millisecond
	opts.WaitTimeout = r.waitTimeout(ctx)
	cs, err := r.manager.ApplyAll(ctx, us, opts)
	if err != nil {
		var dre *ssaerrors.DryRunErr
		if errors.As(err, &dre) && dre.InvolvedObject() != nil {
			if d := byID[object.UnstructuredToObjMetadata(dre.InvolvedObject())]; d != nil {
				return r.applyError(d, err)
			}
		}
		return err
	}
	for _, e := range cs.Entries {
		id := fmtID(e.ObjMetadata)
		switch e.Action {
		case ssa.CreatedAction:
			r.changes.add(&r.changes.created, id)
		case ssa.ConfiguredAction:
			r.changes.add(&r.changes.configured, id)
		default:
			r.changes.unchanged++
		}
		if d := byID[e.ObjMetadata]; d != nil && e.Action != ssa.UnchangedAction {
			d.rv = "" // read back by record
		}
	}
	return nil
}

// applyError explains a failed dry-run of d: an immutable field, a
// conflict, or the API server's own message.
func (r *run) applyError(d *desired, err error) error {
	cause := err
	var dre *ssaerrors.DryRunErr
	if errors.As(err, &dre) {
		cause = dre.Unwrap()
	}
	msg := cause.Error()
	if apierrors.IsInvalid(cause) && strings.Contains(msg, "immutable") {
		return fmt.Errorf("%w: %s (%s): %s; set manifests.recreate to let the plugin delete and recreate it", ErrImmutable, fmtID(d.id), d.file, msg)
	}
	return fmt.Errorf("%s (%s): %w", fmtID(d.id), d.file, cause)
}

// prune deletes the inventory's objects that the manifests no longer hold,
// if they still carry the component's labels.
func (r *run) prune(ctx context.Context) error {
	return r.deleteEntries(ctx, r.plan.prune)
}

// deleteEntries deletes the objects of entries that still carry the
// component's labels, in the reverse order of apply.
func (r *run) deleteEntries(ctx context.Context, entries []Entry) error {
	if len(entries) == 0 {
		return nil
	}
	objs := make([]*unstructured.Unstructured, len(entries))
	for i, e := range entries {
		objs[i] = e.Object()
	}
	opts := ssa.DefaultDeleteOptions()
	opts.Inclusions = r.ownerLabels()
	cs, err := r.manager.DeleteAll(ctx, objs, opts)
	if cs != nil {
		for _, e := range cs.Entries {
			switch e.Action {
			case ssa.DeletedAction:
				r.changes.add(&r.changes.deleted, fmtID(e.ObjMetadata))
			case ssa.SkippedAction:
				r.changes.add(&r.changes.skipped, fmtID(e.ObjMetadata))
			}
		}
	}
	return err
}

// record reads back the resourceVersion of every object ssa applied (one
// LIST per kind and namespace) and writes the new inventory.
func (r *run) record(ctx context.Context) error {
	keys := map[listKey]bool{}
	for _, d := range r.desired {
		if d.rv == "" {
			keys[listKey{d.obj.GroupVersionKind(), d.id.Namespace}] = true
		}
	}
	if len(keys) > 0 {
		live, err := r.listLive(ctx, slices.Collect(maps.Keys(keys)))
		if err != nil {
			return err
		}
		for _, d := range r.desired {
			if d.rv == "" {
				d.rv = live[d.id]
			}
		}
	}
	inv := &Inventory{APIVersion: schemas.APIVersion, Kind: kindInventory, Component: r.job.Component}
	for _, d := range r.desired {
		e := entryOf(d.obj, d.digest)
		e.ResourceVersion = d.rv
		inv.Objects = append(inv.Objects, e)
	}
	r.inv = inv
	return inv.write(r.dir)
}

// report is the job's result; its outputs are the inventory and the
// drift found.
func (r *run) report() *schemas.JobResult {
	c := &r.changes
	for _, list := range [][]string{c.created, c.configured, c.deleted, c.skipped} {
		slices.Sort(list)
	}
	for _, line := range []struct {
		verb string
		ids  []string
	}{{"created", c.created}, {"configured", c.configured}, {"deleted", c.deleted}, {"not pruned (labels changed)", c.skipped}} {
		for _, id := range line.ids {
			fmt.Fprintf(r.log, "%s %s\n", id, line.verb)
		}
	}
	for _, d := range c.drift {
		fmt.Fprintf(r.log, "%s drifted: %s\n", d.Object, strings.Join(d.Fields, ", "))
	}
	fmt.Fprintf(r.log, "manifests %s: %d created, %d configured, %d unchanged, %d deleted, %d drifted\n",
		r.job.Component, len(c.created), len(c.configured), c.unchanged, len(c.deleted), len(c.drift))
	res := &schemas.JobResult{
		APIVersion: schemas.APIVersion,
		Job:        r.job.ID,
		Changed:    len(c.created)+len(c.configured)+len(c.deleted) > 0,
		Outputs:    map[string]any{"inventory": r.inv.names()},
		Health:     r.healthResult,
	}
	if len(c.drift) > 0 {
		drift := make([]any, len(c.drift))
		for i, d := range c.drift {
			fields := make([]any, len(d.Fields))
			for j, f := range d.Fields {
				fields[j] = f
			}
			drift[i] = map[string]any{"object": d.Object, "fields": fields}
		}
		res.Outputs["drift"] = drift
	}
	return res
}

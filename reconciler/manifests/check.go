package manifests

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/fluxcd/pkg/ssa"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"nuon.dev/nuon/internal/debugcmd"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/reconciler/kube"
	"nuon.dev/nuon/schemas"
)

var (
	_ reconciler.DriftChecker  = (*Plugin)(nil)
	_ reconciler.HealthChecker = (*Plugin)(nil)
	_ reconciler.Debugger      = (*Plugin)(nil)
)

// Drift compares the cluster with the job's manifests and changes
// nothing: no PATCH, no delete, no inventory write. An object that
// neither the manifests nor anyone else changed since the last apply (its
// digest and resourceVersion match the inventory's) is settled by the
// plan's metadata LISTs alone; any other is dry-run with server-side
// apply (ssa's Diff). The result lists, per object, what differs:
// changed (the fields), missing (in the manifests or the inventory, not
// in the cluster) or extra (in the inventory and the cluster, no longer
// in the manifests: an apply prunes it). Its Health is the objects'.
func (p *Plugin) Drift(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	r, err := p.start(job, env)
	if err != nil {
		return nil, err
	}
	if err := r.checkDir(); err != nil {
		return nil, err
	}
	defer os.RemoveAll(r.manifests)
	var drift []schemas.ResourceDrift
	if err := r.do(ctx,
		step{"inputs", r.resolveInputs},
		step{"extract", r.extract},
		step{"connect", r.connect},
		step{"load", r.load},
		step{"inventory", r.readInventory},
		step{"plan", r.planChanges},
		step{"drift", func(ctx context.Context) (err error) { drift, err = r.drift(ctx); return err }},
		step{"health", r.health},
	); err != nil {
		return nil, err
	}
	for _, d := range drift {
		line := fmt.Sprintf("%s/%s/%s %s", d.Kind, d.Namespace, d.Name, d.Action)
		if len(d.Fields) > 0 {
			line += ": " + strings.Join(d.Fields, ", ")
		}
		fmt.Fprintln(r.log, line)
	}
	fmt.Fprintf(r.log, "manifests %s: %d of %d objects drifted\n", job.Component, len(drift), len(r.desired))
	return &schemas.JobResult{APIVersion: schemas.APIVersion, Job: job.ID, Drift: drift, Health: r.healthResult}, nil
}

// checkDir points the read-only operations at a manifests directory of
// their own, so that they never disturb an apply's files.
func (r *run) checkDir() error {
	dir, err := os.MkdirTemp(r.dir, "check-")
	if err != nil {
		return fmt.Errorf("manifests %s: %w", r.job.Component, err)
	}
	r.manifests = dir
	return nil
}

// drift dry-runs every desired object that may have drifted and lists the
// objects that differ.
func (r *run) drift(ctx context.Context) ([]schemas.ResourceDrift, error) {
	var mu sync.Mutex
	var out []schemas.ResourceDrift
	add := func(d schemas.ResourceDrift) {
		mu.Lock()
		out = append(out, d)
		mu.Unlock()
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.p.concurrency())
	for _, d := range r.desired {
		rd := resourceDrift(d.id.GroupKind.Kind, d.id.GroupKind.Group, d.id.Namespace, d.id.Name)
		switch d.action {
		case actionSkip:
			continue
		case actionCreate:
			rd.Action = schemas.DriftMissing
			add(rd)
			continue
		}
		g.Go(func() error {
			entry, live, merged, err := r.manager.Diff(gctx, d.obj.DeepCopy(), ssa.DiffOptions{Force: r.settings.Recreate})
			if err != nil {
				// An object the dry-run refuses (an immutable field) differs:
				// say how, and go on with the others.
				rd.Action, rd.Diff = schemas.DriftChanged, r.applyError(d, err).Error()
				add(rd)
				return nil
			}
			if entry.Action != ssa.ConfiguredAction && entry.Action != ssa.CreatedAction {
				return nil
			}
			rd.Action = schemas.DriftChanged
			if live != nil && merged != nil {
				rd.Fields = diffPaths(live.Object, merged.Object)
			}
			add(rd)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	// The inventory's objects that the manifests dropped and that are still
	// there: an apply would prune them.
	live, err := r.listLive(ctx, r.pruneKeys())
	if err != nil {
		return nil, err
	}
	for _, e := range r.plan.prune {
		if _, ok := live[e.ID()]; ok {
			rd := resourceDrift(e.Kind, e.Group, e.Namespace, e.Name)
			rd.Action = schemas.DriftExtra
			out = append(out, rd)
		}
	}
	slices.SortFunc(out, func(a, b schemas.ResourceDrift) int {
		return strings.Compare(a.Kind+"/"+a.Namespace+"/"+a.Name, b.Kind+"/"+b.Namespace+"/"+b.Name)
	})
	return out, nil
}

// pruneKeys are the LISTs that tell whether the prune candidates exist;
// the plan listed them already, but its result only kept desired objects.
func (r *run) pruneKeys() []listKey {
	seen := map[listKey]bool{}
	var keys []listKey
	for _, e := range r.plan.prune {
		k := listKey{e.GVK(), e.Namespace}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

func resourceDrift(kind, group, namespace, name string) schemas.ResourceDrift {
	return schemas.ResourceDrift{Kind: kube.KindName(schema.GroupKind{Group: group, Kind: kind}), Namespace: namespace, Name: name}
}

// Health reports how the objects of the component's inventory stand, as
// kstatus computes them; it changes nothing and needs no artifact.
func (p *Plugin) Health(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.Health, error) {
	r, err := p.start(job, env)
	if err != nil {
		return nil, err
	}
	if err := r.do(ctx,
		step{"connect", r.connect},
		step{"inventory", r.readInventory},
		step{"health", r.inventoryHealth},
	); err != nil {
		return nil, err
	}
	return r.healthResult, nil
}

// health computes the desired objects' health (after an apply or in a
// drift check).
func (r *run) health(ctx context.Context) error {
	objs := make([]kube.Object, len(r.desired))
	for i, d := range r.desired {
		objs[i] = kube.Object{ID: d.id, Version: d.obj.GroupVersionKind().Version}
	}
	h, err := kube.Health(ctx, r.client, objs, r.p.concurrency())
	r.healthResult = h
	return err
}

// healthAfterApply is health for Apply: the objects are applied and
// recorded, so a failure to read their health is reported as Unknown
// rather than failing the job.
func (r *run) healthAfterApply(ctx context.Context) error {
	if err := r.health(ctx); err != nil {
		r.logger.Warn("manifests health", "error", err)
		r.healthResult = &schemas.Health{Status: schemas.HealthUnknown, Message: err.Error()}
	}
	return nil
}

// inventoryHealth computes the health of the inventory's objects.
func (r *run) inventoryHealth(ctx context.Context) error {
	if !r.hadInv {
		r.healthResult = &schemas.Health{Status: schemas.HealthUnknown, Message: "nothing applied yet"}
		return nil
	}
	objs := make([]kube.Object, len(r.inv.Objects))
	for i, e := range r.inv.Objects {
		objs[i] = kube.Object{ID: e.ID(), Version: e.Version}
	}
	h, err := kube.Health(ctx, r.client, objs, r.p.concurrency())
	r.healthResult = h
	return err
}

// Debug answers a Kubernetes debug command in the component's namespace
// (manifests.namespace, or default) or one of the install's.
func (p *Plugin) Debug(ctx context.Context, job *schemas.Job, env reconciler.Env, cmd debugcmd.Command, out io.Writer) error {
	ns := "default"
	if job.Manifests != nil && job.Manifests.Namespace != "" {
		ns = job.Manifests.Namespace
	}
	var allowed []string
	if job.Debug != nil {
		allowed = job.Debug.Namespaces
	}
	if err := debugcmd.CheckNamespace(&cmd, ns, allowed); err != nil {
		return err
	}
	cfg, err := p.RESTConfig()
	if err != nil {
		return fmt.Errorf("manifests debug %s: %w", job.Component, err)
	}
	return kube.Debug(ctx, cfg, cmd, out)
}

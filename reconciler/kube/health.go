package kube

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/fluxcd/cli-utils/pkg/object"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"nuon.dev/nuon/schemas"
)

// Object is one object whose health is asked: its identity and version.
type Object struct {
	ID      object.ObjMetadata
	Version string
}

// KindName is gk's kind, followed by its group (Kind.group) unless the
// group is a built-in one whose kinds are unique.
func KindName(gk schema.GroupKind) string {
	if gk.Group == "" || builtinGroups[gk.Group] {
		return gk.Kind
	}
	return gk.Kind + "." + gk.Group
}

var builtinGroups = map[string]bool{
	"apps": true, "batch": true, "rbac.authorization.k8s.io": true, "networking.k8s.io": true,
	"policy": true, "autoscaling": true, "apiextensions.k8s.io": true, "storage.k8s.io": true,
	"scheduling.k8s.io": true, "coordination.k8s.io": true, "discovery.k8s.io": true,
}

// Status maps a kstatus status to a health status.
func Status(s status.Status) string {
	switch s {
	case status.CurrentStatus:
		return schemas.HealthReady
	case status.InProgressStatus, status.TerminatingStatus:
		return schemas.HealthProgressing
	case status.FailedStatus, status.NotFoundStatus:
		return schemas.HealthFailed
	default:
		return schemas.HealthUnknown
	}
}

// rank orders health statuses from best to worst: the component's health
// is its worst object's.
var rank = map[string]int{schemas.HealthReady: 0, schemas.HealthUnknown: 1, schemas.HealthProgressing: 2, schemas.HealthFailed: 3}

// Worst returns the worse of two health statuses.
func Worst(a, b string) string {
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// Health computes the health of objs with c: one LIST per kind and
// namespace, then kstatus for each object. The result lists the objects
// that are not Ready, sorted, and says how many are.
func Health(ctx context.Context, c client.Client, objs []Object, concurrency int) (*schemas.Health, error) {
	type key struct {
		gvk schema.GroupVersionKind
		ns  string
	}
	keys := map[key]bool{}
	for _, o := range objs {
		keys[key{schema.GroupVersionKind{Group: o.ID.GroupKind.Group, Version: o.Version, Kind: o.ID.GroupKind.Kind}, o.ID.Namespace}] = true
	}
	var mu sync.Mutex
	live := map[object.ObjMetadata]*unstructured.Unstructured{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(concurrency, 1))
	for k := range keys {
		g.Go(func() error {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(k.gvk.GroupVersion().WithKind(k.gvk.Kind + "List"))
			var opts []client.ListOption
			if k.ns != "" {
				opts = append(opts, client.InNamespace(k.ns))
			}
			if err := c.List(gctx, list, opts...); err != nil {
				if meta.IsNoMatchError(err) {
					return nil
				}
				return fmt.Errorf("list %s in %q: %w", k.gvk.Kind, k.ns, err)
			}
			mu.Lock()
			defer mu.Unlock()
			for i := range list.Items {
				u := &list.Items[i]
				live[object.ObjMetadata{Namespace: u.GetNamespace(), Name: u.GetName(), GroupKind: k.gvk.GroupKind()}] = u
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	h := &schemas.Health{Status: schemas.HealthReady}
	ready := 0
	for _, o := range objs {
		rh := schemas.ResourceHealth{Kind: KindName(o.ID.GroupKind), Namespace: o.ID.Namespace, Name: o.ID.Name}
		u, ok := live[o.ID]
		if !ok {
			rh.Status, rh.Message = schemas.HealthFailed, "not found"
		} else if res, err := status.Compute(u); err != nil {
			rh.Status, rh.Message = schemas.HealthUnknown, err.Error()
		} else {
			rh.Status, rh.Message = Status(res.Status), res.Message
		}
		h.Status = Worst(h.Status, rh.Status)
		if rh.Status == schemas.HealthReady {
			ready++
			continue
		}
		h.Resources = append(h.Resources, rh)
	}
	slices.SortFunc(h.Resources, func(a, b schemas.ResourceHealth) int {
		return strings.Compare(a.Kind+"/"+a.Namespace+"/"+a.Name, b.Kind+"/"+b.Namespace+"/"+b.Name)
	})
	h.Message = fmt.Sprintf("%d of %d resources ready", ready, len(objs))
	if len(h.Resources) > 0 {
		counts := map[string]int{}
		for _, r := range h.Resources {
			counts[r.Status]++
		}
		var parts []string
		for _, s := range slices.Sorted(maps.Keys(counts)) {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
		h.Message += " (" + strings.Join(parts, ", ") + ")"
	}
	return h, nil
}

package manifests

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/fluxcd/cli-utils/pkg/object"
	"github.com/fluxcd/pkg/ssa/utils"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Stages objects are applied in, as ssa.ApplyAllStaged does: definitions
// (CRDs, namespaces, cluster roles) first and waited for, then classes,
// then everything else.
const (
	stageDefinitions = iota
	stageClasses
	stageResources
	stageCount
)

// action is what the plan does with one desired object.
type action int

const (
	// actionCreate: the object does not exist; it is applied at once,
	// without a dry-run.
	actionCreate action = iota
	// actionUpdate: the object exists and the manifests changed it (or it
	// is not in the inventory); ssa dry-runs it and applies what differs.
	actionUpdate
	// actionCheck: the manifests did not change the object, but someone
	// wrote it since the last apply; a dry-run tells whether our fields
	// drifted.
	actionCheck
	// actionSkip: neither the manifests nor the object changed since the
	// last apply; nothing is sent.
	actionSkip
)

// desired is one object of the manifests, ready to apply.
type desired struct {
	obj    *unstructured.Unstructured
	id     object.ObjMetadata
	file   string
	digest string
	stage  int
	action action
	// rv is the live object's resourceVersion: from the plan's list, then
	// from the apply.
	rv string
}

// plan is what the plan step found.
type plan struct {
	// prune are the inventory's objects the manifests no longer hold.
	prune []Entry
}

// listKey is one LIST: a kind in a namespace ("" for cluster-scoped).
type listKey struct {
	gvk       schema.GroupVersionKind
	namespace string
}

// load reads the extracted manifests, substitutes the inputs, fills in
// namespaces and the owner labels, and computes each object's digest.
func (r *run) load(context.Context) error {
	objs, files, err := readDir(r.manifests)
	if err != nil {
		return err
	}
	crdScopes := map[schema.GroupKind]bool{}
	for _, o := range objs {
		if utils.IsCRD(o) {
			group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
			scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
			crdScopes[schema.GroupKind{Group: group, Kind: kind}] = scope == "Namespaced"
		}
	}
	seen := map[object.ObjMetadata]string{}
	for i, o := range objs {
		where := fmt.Sprintf("%s: %s/%s", files[i], o.GetKind(), o.GetName())
		if err := substitute(o.Object, r.inputs); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		namespaced, err := r.namespaced(o, crdScopes)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		switch {
		case !namespaced:
			o.SetNamespace("")
		case o.GetNamespace() == "" && r.settings.Namespace != "":
			o.SetNamespace(r.settings.Namespace)
		case o.GetNamespace() == "":
			o.SetNamespace(metav1.NamespaceDefault)
		}
		labels := o.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		maps.Copy(labels, r.ownerLabels())
		o.SetLabels(labels)
		d := &desired{obj: o, id: object.UnstructuredToObjMetadata(o), file: files[i], stage: stageOf(o)}
		if prev, dup := seen[d.id]; dup {
			return fmt.Errorf("%w: %s is declared twice: in %s and in %s", ErrInvalid, fmtID(d.id), prev, files[i])
		}
		seen[d.id] = files[i]
		if d.digest, err = digest(o); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		r.desired = append(r.desired, d)
	}
	return nil
}

func stageOf(o *unstructured.Unstructured) int {
	switch {
	case utils.IsClusterDefinition(o):
		return stageDefinitions
	case utils.IsClassDefinition(o):
		return stageClasses
	default:
		return stageResources
	}
}

// namespaced tells whether o's kind is namespaced: from a CRD among the
// manifests, or from the API server's discovery.
func (r *run) namespaced(o *unstructured.Unstructured, crdScopes map[schema.GroupKind]bool) (bool, error) {
	gvk := o.GroupVersionKind()
	if gvk.Kind == "" || o.GetAPIVersion() == "" {
		return false, fmt.Errorf("%w: no apiVersion or kind", ErrInvalid)
	}
	if ns, ok := crdScopes[gvk.GroupKind()]; ok {
		return ns, nil
	}
	m, err := r.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return false, fmt.Errorf("%w: the cluster has no kind %s in %s, and no CustomResourceDefinition among the manifests defines it", ErrInvalid, gvk.Kind, gvk.GroupVersion())
	}
	if err != nil {
		return false, err
	}
	return m.Scope.Name() == meta.RESTScopeNameNamespace, nil
}

// planChanges lists every kind the manifests and the inventory hold, once
// per namespace and with metadata only, and sorts the desired objects
// into create, update, check and skip.
func (r *run) planChanges(ctx context.Context) error {
	inv := map[object.ObjMetadata]Entry{}
	keys := map[listKey]bool{}
	for _, e := range r.inv.Objects {
		inv[e.ID()] = e
		keys[listKey{e.GVK(), e.Namespace}] = true
	}
	for _, d := range r.desired {
		keys[listKey{d.obj.GroupVersionKind(), d.id.Namespace}] = true
	}
	live, err := r.listLive(ctx, slices.Collect(maps.Keys(keys)))
	if err != nil {
		return err
	}
	r.plan = &plan{}
	want := map[object.ObjMetadata]bool{}
	for _, d := range r.desired {
		want[d.id] = true
		rv, exists := live[d.id]
		e, known := inv[d.id]
		d.rv = rv
		switch {
		case !exists:
			d.action = actionCreate
		case known && e.Digest == d.digest && e.ResourceVersion == rv:
			d.action = actionSkip
		case known && e.Digest == d.digest:
			d.action = actionCheck
		default:
			d.action = actionUpdate
		}
	}
	for _, e := range r.inv.Objects {
		if !want[e.ID()] {
			r.plan.prune = append(r.plan.prune, e)
		}
	}
	return nil
}

// listLive lists the objects of each key, metadata only, and returns the
// resourceVersion of each by id. A kind the cluster does not know (yet)
// has no objects.
func (r *run) listLive(ctx context.Context, keys []listKey) (map[object.ObjMetadata]string, error) {
	var mu sync.Mutex
	live := map[object.ObjMetadata]string{}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(r.p.concurrency())
	for _, k := range keys {
		g.Go(func() error {
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(k.gvk.GroupVersion().WithKind(k.gvk.Kind + "List"))
			var opts []client.ListOption
			if k.namespace != "" {
				opts = append(opts, client.InNamespace(k.namespace))
			}
			if err := r.client.List(ctx, list, opts...); err != nil {
				if meta.IsNoMatchError(err) {
					return nil
				}
				return fmt.Errorf("list %s in %q: %w", k.gvk.Kind, k.namespace, err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, item := range list.Items {
				id := object.ObjMetadata{Namespace: item.Namespace, Name: item.Name, GroupKind: k.gvk.GroupKind()}
				live[id] = item.ResourceVersion
			}
			return nil
		})
	}
	return live, g.Wait()
}

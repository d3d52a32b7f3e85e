package helm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/reconciler/kube"
	"nuon.dev/nuon/schemas"
)

// ErrPlanMismatch means a plan-bound apply found no saved plan with the
// approved hash, a file whose content has another hash, a job whose chart
// or values are not the plan's, hooks that render otherwise, or a release
// whose revisions moved since the plan was made: nothing is applied. It
// is reconciler.ErrPlanMismatch.
var ErrPlanMismatch = reconciler.ErrPlanMismatch

// savedExt ends the name of a saved helm plan (SavedRelease as canonical
// JSON), whose SHA-256 is the plan hash.
const savedExt = ".release.json"

// SavedRelease is a saved helm plan: what the install or upgrade was
// planned from (the chart's digest and the values, secrets resolved), the
// exact manifest and hooks it renders, and the release's revisions it was
// planned over. Encoded canonically (keys sorted, numbers exact): a
// re-plan of the same change has the same bytes, so the same hash.
type SavedRelease struct {
	Component string         `json:"component"`
	Release   string         `json:"release"`
	Namespace string         `json:"namespace"`
	Chart     string         `json:"chart"`
	Values    map[string]any `json:"values"`
	// Manifest is the rendered manifest, hooks apart, byte for byte what
	// the apply sends (through a post-renderer that returns it).
	Manifest string      `json:"manifest"`
	Hooks    []SavedHook `json:"hooks"`
	Base     ReleaseBase `json:"base"`
}

// SavedHook is one rendered hook of a saved plan.
type SavedHook struct {
	Path           string   `json:"path"`
	Kind           string   `json:"kind"`
	Name           string   `json:"name"`
	Manifest       string   `json:"manifest"`
	Events         []string `json:"events"`
	Weight         int      `json:"weight"`
	DeletePolicies []string `json:"deletePolicies"`
}

// ReleaseBase is the release's history a plan was made over: its deployed
// revision and its last one (0 when there is none). An apply over any
// other history is stale.
type ReleaseBase struct {
	Deployed int `json:"deployed"`
	Last     int `json:"last"`
}

// Record plans the job's install or upgrade with a server-side dry-run
// (Helm renders the chart against the cluster, lookups included, and
// writes nothing) and keeps the saved plan for a later plan-bound apply.
// The summary compares the rendered objects with the deployed revision's
// manifest: create, update (with the changed paths), delete; a hook that
// is new, changed or gone counts too, so a change only a hook makes never
// passes for a no-op. Every other saved plan of the component is removed.
func (p *Plugin) Record(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	r, err := p.start(ctx, job, env)
	if err != nil {
		return nil, err
	}
	var rec *schemas.PlanRecord
	if err := r.do(ctx,
		step{"values", r.values},
		step{"extract", r.extract},
		step{"connect", r.connect},
		step{"plan", func(ctx context.Context) (err error) { rec, err = r.recordPlan(ctx); return err }},
	); err != nil {
		return nil, err
	}
	s := rec.Summary
	fmt.Fprintf(r.out, "helm %s: plan %s saved: %d to create, %d to update, %d to delete\n", job.Component, rec.Hash,
		s.Counts[schemas.ChangeCreate], s.Counts[schemas.ChangeUpdate], s.Counts[schemas.ChangeDelete])
	return &schemas.JobResult{APIVersion: schemas.APIVersion, Job: job.ID, Plan: rec}, nil
}

// history is the release's revisions sorted, its deployed one (or nil)
// and the base they make.
func (r *run) history() ([]*release.Release, *release.Release, ReleaseBase, error) {
	hist, err := r.cfg.Releases.History(r.release)
	if err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil, ReleaseBase{}, fmt.Errorf("release %s history: %w", r.release, err)
	}
	releaseutil.SortByRevision(hist)
	var deployed *release.Release
	var base ReleaseBase
	for _, rel := range hist {
		if rel.Info != nil && rel.Info.Status == release.StatusDeployed {
			deployed = rel
			base.Deployed = rel.Version
		}
	}
	if len(hist) > 0 {
		base.Last = hist[len(hist)-1].Version
	}
	return hist, deployed, base, nil
}

// render dry-runs what deploy would do, on the server (lookups read the
// cluster) and writing nothing: an upgrade of the deployed revision, or an
// install.
func (r *run) render(ctx context.Context, deployed *release.Release, replace bool) (*release.Release, error) {
	if deployed != nil {
		up := action.NewUpgrade(r.cfg)
		up.Namespace = r.namespace
		up.ResetValues = true
		up.DryRun = true
		up.DryRunOption = "server"
		return up.RunWithContext(ctx, r.release, r.chart, r.vals)
	}
	in := action.NewInstall(r.cfg)
	in.ReleaseName = r.release
	in.Namespace = r.namespace
	in.DryRun = true
	in.DryRunOption = "server"
	in.Replace = replace
	return in.RunWithContext(ctx, r.chart, r.vals)
}

// savedRelease renders the job's release and returns the saved plan and
// the deployed revision it compares with.
func (r *run) savedRelease(ctx context.Context) (*SavedRelease, *release.Release, error) {
	hist, deployed, base, err := r.history()
	if err != nil {
		return nil, nil, err
	}
	rel, err := r.render(ctx, deployed, len(hist) > 0)
	if err != nil {
		return nil, nil, fmt.Errorf("dry-run: %w", err)
	}
	s := &SavedRelease{
		Component: r.job.Component,
		Release:   r.release,
		Namespace: r.namespace,
		Chart:     r.digest,
		Values:    r.vals,
		Manifest:  rel.Manifest,
		Hooks:     savedHooks(rel.Hooks),
		Base:      base,
	}
	if s.Values == nil {
		s.Values = map[string]any{}
	}
	return s, deployed, nil
}

func savedHooks(hs []*release.Hook) []SavedHook {
	out := []SavedHook{}
	for _, h := range hs {
		sh := SavedHook{Path: h.Path, Kind: h.Kind, Name: h.Name, Manifest: h.Manifest, Weight: h.Weight, Events: []string{}, DeletePolicies: []string{}}
		for _, e := range h.Events {
			sh.Events = append(sh.Events, e.String())
		}
		for _, d := range h.DeletePolicies {
			sh.DeletePolicies = append(sh.DeletePolicies, d.String())
		}
		out = append(out, sh)
	}
	slices.SortFunc(out, func(a, b SavedHook) int { return strings.Compare(a.Path+"\x00"+a.Name, b.Path+"\x00"+b.Name) })
	return out
}

// recordPlan renders, compares, writes the saved plan, its policy input
// and its record, and returns the record.
func (r *run) recordPlan(ctx context.Context) (*schemas.PlanRecord, error) {
	s, deployed, err := r.savedRelease(ctx)
	if err != nil {
		return nil, err
	}
	data, err := reconciler.Canonical(s)
	if err != nil {
		return nil, err
	}
	changes, err := r.changes(ctx, s, deployed)
	if err != nil {
		return nil, err
	}
	red, err := r.redactor()
	if err != nil {
		return nil, err
	}
	rec := &schemas.PlanRecord{
		Component: r.job.Component,
		Hash:      reconciler.HashBytes(data),
		Job:       r.job.ID,
		Size:      int64(len(data)),
		Summary:   kube.Summarize(changes),
	}
	rec.Diff, rec.DiffTruncated = reconciler.BoundDiff(red.String(kube.ReadableDiff(changes)))
	planJSON, err := json.Marshal(kube.PolicyInput("nuon-helm", changes))
	if err != nil {
		return nil, err
	}
	// The saved plan holds the values and the rendered Secrets: owner
	// only, never out of the install.
	if err := reconciler.SavePlan(r.dir, savedExt, data, planJSON, rec, r.logger); err != nil {
		return nil, err
	}
	return rec, nil
}

// changes compares the plan's objects and hooks with the deployed
// revision's, by id.
func (r *run) changes(ctx context.Context, s *SavedRelease, deployed *release.Release) ([]kube.Change, error) {
	mapper := r.mapper()
	after, err := manifestObjects(s.Manifest, r.namespace, mapper)
	if err != nil {
		return nil, err
	}
	before := map[string]map[string]any{}
	beforeHooks := map[string]map[string]any{}
	if deployed != nil {
		if before, err = manifestObjects(deployed.Manifest, r.namespace, mapper); err != nil {
			return nil, err
		}
		var hm strings.Builder
		for _, h := range deployed.Hooks {
			fmt.Fprintf(&hm, "---\n%s\n", h.Manifest)
		}
		if beforeHooks, err = manifestObjects(hm.String(), r.namespace, mapper); err != nil {
			return nil, err
		}
	}
	var hm strings.Builder
	for _, h := range s.Hooks {
		fmt.Fprintf(&hm, "---\n%s\n", h.Manifest)
	}
	afterHooks, err := manifestObjects(hm.String(), r.namespace, mapper)
	if err != nil {
		return nil, err
	}
	out := compare(before, after, "")
	if deployed != nil {
		if err := r.driftChanges(ctx, out, deployed); err != nil {
			return nil, err
		}
	}
	out = append(out, compare(beforeHooks, afterHooks, "hook ")...)
	slices.SortFunc(out, func(a, b kube.Change) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// driftChanges turns the no-ops of objects that drifted in the cluster
// from the deployed revision into what the apply does to them: an update
// (the fields that differ) or a create (the object is gone). A plan that
// only sets drift back is never a no-op, so it is judged like any change.
func (r *run) driftChanges(ctx context.Context, changes []kube.Change, deployed *release.Release) error {
	c, err := r.cluster()
	if err != nil {
		return err
	}
	drift, err := r.drift(ctx, c, deployed)
	if err != nil {
		return fmt.Errorf("drift of revision %d: %w", deployed.Version, err)
	}
	found := map[string]schemas.ResourceDrift{}
	for _, d := range drift {
		found[d.Kind+"/"+d.Namespace+"/"+d.Name] = d
	}
	for i, ch := range changes {
		if ch.Kind != schemas.ChangeNoop {
			continue
		}
		u := unstructured.Unstructured{Object: ch.Obj}
		d, ok := found[u.GetKind()+"/"+u.GetNamespace()+"/"+u.GetName()]
		if !ok {
			continue
		}
		if d.Action == schemas.DriftMissing {
			changes[i].Kind, changes[i].Why = schemas.ChangeCreate, "missing from the cluster: created again"
			continue
		}
		changes[i].Kind, changes[i].Fields, changes[i].After, changes[i].Drifted = schemas.ChangeUpdate, d.Fields, ch.Obj, true
		if len(d.Fields) == 0 {
			changes[i].Fields = []string{"(drifted in the cluster)"}
		}
	}
	return nil
}

// compare lists, by id, what turns before into after; prefix marks hooks.
func compare(before, after map[string]map[string]any, prefix string) []kube.Change {
	var out []kube.Change
	for id, obj := range after {
		old, ok := before[id]
		switch {
		case !ok:
			out = append(out, kube.Change{ID: prefix + id, Kind: schemas.ChangeCreate, Obj: obj})
		case reflect.DeepEqual(old, obj):
			out = append(out, kube.Change{ID: prefix + id, Kind: schemas.ChangeNoop, Obj: obj})
		default:
			out = append(out, kube.Change{ID: prefix + id, Kind: schemas.ChangeUpdate, Obj: obj, Before: old, After: obj, Fields: changedPaths(old, obj)})
		}
	}
	for id, obj := range before {
		if _, ok := after[id]; !ok {
			out = append(out, kube.Change{ID: prefix + id, Kind: schemas.ChangeDelete, Obj: obj})
		}
	}
	return out
}

// changedPaths are the paths where a and b differ, metadata's name and
// namespace apart; a change only to other metadata is still listed.
func changedPaths(a, b map[string]any) []string {
	if p := diffPaths(a, b); len(p) > 0 {
		return p
	}
	return []string{"metadata"}
}

// mapper is the cluster's REST mapper, or nil when it cannot be had: ids
// then take the release's namespace only where the object names none and
// its kind is not known to be cluster-wide.
func (r *run) mapper() meta.RESTMapper {
	c, err := r.cluster()
	if err != nil {
		return nil
	}
	return c.mapper
}

// manifestObjects parses a rendered manifest into objects by id
// (Kind[.group]/namespace/name), namespaced objects without a namespace
// in ns.
func manifestObjects(manifest, ns string, mapper meta.RESTMapper) (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	docs := releaseutil.SplitManifests(manifest)
	for _, k := range slices.Sorted(maps.Keys(docs)) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(docs[k]), &u.Object); err != nil {
			return nil, fmt.Errorf("rendered manifest: %w", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		gvk := u.GroupVersionKind()
		if u.GetNamespace() == "" {
			namespaced := true
			if mapper != nil {
				if m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
					namespaced = m.Scope.Name() == meta.RESTScopeNameNamespace
				}
			}
			if namespaced {
				u.SetNamespace(ns)
			}
		}
		kind := gvk.Kind
		if gvk.Group != "" {
			kind += "." + gvk.Group
		}
		out[kind+"/"+u.GetNamespace()+"/"+u.GetName()] = u.Object
	}
	return out, nil
}

// redactor redacts the values of the job's secrets from the record.
func (r *run) redactor() (*redact.Redactor, error) {
	return reconciler.PlanRedactor(r.job.Inputs, r.p.lookup())
}

// ApplySaved installs or upgrades the release with the saved plan whose
// hash job.Plan.Hash names, and nothing else. Before anything is written
// it checks that the saved file still has that hash and is this
// component's release, that the job's chart digest and values are the
// plan's, that the release's revisions have not moved since (stale), and
// that the chart renders the plan's hooks again (hooks are Helm's own to
// run); any difference is ErrPlanMismatch. The release is then deployed
// as Apply does, with a post-renderer that returns the saved manifest
// bytes: the objects applied are the plan's whatever the chart renders.
// The saved plan is gone after.
func (p *Plugin) ApplySaved(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	r, err := p.start(ctx, job, env)
	if err != nil {
		return nil, err
	}
	var rec *schemas.PlanRecord
	if err := r.do(ctx,
		step{"values", r.values},
		step{"extract", r.extract},
		step{"connect", r.connect},
		step{"saved", func(ctx context.Context) (err error) { rec, err = r.loadSaved(ctx); return err }},
		step{"release", r.deploy},
		step{"health", r.waitAndHealth},
	); err != nil {
		return nil, err
	}
	reconciler.PrunePlans(r.dir, "", r.logger)
	r.result.Plan = rec
	return r.result, nil
}

// loadSaved reads and checks the saved plan the job names and sets the
// run's post-renderer to its manifest.
func (r *run) loadSaved(ctx context.Context) (*schemas.PlanRecord, error) {
	want := r.job.Plan.Hash
	data, err := reconciler.LoadPlan(r.dir, want, savedExt)
	if err != nil {
		return nil, err
	}
	saved, err := decodeSaved(data)
	if err != nil {
		return nil, fmt.Errorf("%w: saved plan %s: %w", ErrPlanMismatch, want, err)
	}
	mismatch := func(format string, a ...any) error {
		return fmt.Errorf("%w: plan %s: %s", ErrPlanMismatch, want, fmt.Sprintf(format, a...))
	}
	switch {
	case saved.Component != r.job.Component || saved.Release != r.release || saved.Namespace != r.namespace:
		return nil, mismatch("is release %s/%s of component %s", saved.Namespace, saved.Release, saved.Component)
	case saved.Chart != r.digest:
		return nil, mismatch("was made from chart %s, the job has %s", saved.Chart, r.digest)
	}
	jobVals := r.vals
	if jobVals == nil {
		jobVals = map[string]any{}
	}
	vals, err := reconciler.Canonical(jobVals)
	if err != nil {
		return nil, err
	}
	savedVals, err := reconciler.Canonical(saved.Values)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(vals, savedVals) {
		return nil, mismatch("was made from other values than the job's")
	}
	hist, deployed, base, err := r.history()
	if err != nil {
		return nil, err
	}
	if base != saved.Base {
		return nil, mismatch("is stale: it was made over revisions %d (deployed) and %d (last), the release now has %d and %d",
			saved.Base.Deployed, saved.Base.Last, base.Deployed, base.Last)
	}
	rel, err := r.render(ctx, deployed, len(hist) > 0)
	if err != nil {
		return nil, fmt.Errorf("dry-run: %w", err)
	}
	if !reflect.DeepEqual(savedHooks(rel.Hooks), saved.Hooks) {
		return nil, mismatch("the chart's hooks render otherwise than in the plan")
	}
	r.post = savedManifest(saved.Manifest)
	rec, err := reconciler.SavedPlanRecord(r.dir, want)
	if err != nil {
		rec = nil
	}
	return rec, nil
}

// decodeSaved reads a saved plan, numbers exact.
func decodeSaved(data []byte) (*SavedRelease, error) {
	var s SavedRelease
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, err
	}
	if s.Values == nil || s.Hooks == nil {
		return nil, errors.New("no values or no hooks")
	}
	s.Values = reconciler.TypedNumbers(s.Values).(map[string]any)
	return &s, nil
}

// savedManifest is a post-renderer that replaces whatever the chart
// rendered by the saved plan's manifest.
type savedManifest string

func (m savedManifest) Run(*bytes.Buffer) (*bytes.Buffer, error) {
	return bytes.NewBufferString(string(m)), nil
}

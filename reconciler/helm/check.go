package helm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/cli-utils/pkg/object"
	"github.com/fluxcd/pkg/ssa"
	"golang.org/x/sync/errgroup"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

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

// HelmFieldManager is the field manager Helm writes objects with; a drift
// check dry-runs the release's objects under it.
const HelmFieldManager = "helm"

// KindRelease names the release itself in a drift report.
const KindRelease = "HelmRelease"

// ErrNotReady reports a release whose resources did not become Ready
// within the job's timeout (helm.wait).
var ErrNotReady = errors.New("not ready")

// maxDriftFields bounds the paths reported per drifted object.
const maxDriftFields = 10

// cluster is what the checks need of the cluster: a client, its mapper
// and an ssa manager under Helm's field manager.
type cluster struct {
	client  client.Client
	mapper  meta.RESTMapper
	manager *ssa.ResourceManager
}

func (r *run) cluster() (*cluster, error) {
	cfg, err := r.p.RESTConfig()
	if err != nil {
		return nil, err
	}
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		cfg.QPS = -1
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	c := &cluster{}
	if c.mapper, err = apiutil.NewDynamicRESTMapper(cfg, hc); err != nil {
		return nil, err
	}
	if c.client, err = client.New(cfg, client.Options{HTTPClient: hc, Mapper: c.mapper}); err != nil {
		return nil, err
	}
	c.manager = ssa.NewResourceManager(c.client, polling.NewStatusPoller(c.client, c.mapper, polling.Options{}), ssa.Owner{Field: HelmFieldManager})
	return c, nil
}

// objects are the release's objects from its manifest (hooks apart), with
// the release's namespace filled in where the kind is namespaced.
func (r *run) objects(rel *release.Release, c *cluster) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	manifests := releaseutil.SplitManifests(rel.Manifest)
	for _, k := range slices.Sorted(maps.Keys(manifests)) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(manifests[k]), &u.Object); err != nil {
			return nil, fmt.Errorf("release %s manifest: %w", rel.Name, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		gvk := u.GroupVersionKind()
		m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, fmt.Errorf("release %s: %s: %w", rel.Name, gvk.Kind, err)
		}
		if m.Scope.Name() == meta.RESTScopeNameNamespace && u.GetNamespace() == "" {
			u.SetNamespace(rel.Namespace)
		}
		out = append(out, u)
	}
	return out, nil
}

// deployedRelease is the release's deployed revision, or nil.
func (r *run) deployedRelease() (*release.Release, error) {
	rel, err := r.cfg.Releases.Deployed(r.release)
	if errors.Is(err, driver.ErrReleaseNotFound) || errors.Is(err, driver.ErrNoDeployedReleases) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("release %s: %w", r.release, err)
	}
	return rel, nil
}

// Drift compares the deployed release with the job and with the cluster,
// and changes nothing: the release is changed if the job's chart or
// values differ from the deployed revision's; each object of its
// manifest is dry-run with server-side apply under Helm's field manager,
// and is missing if it does not exist or changed (with the fields that
// differ) if the dry-run would change it. Health is the objects'.
func (p *Plugin) Drift(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	r, err := p.start(ctx, job, env)
	if err != nil {
		return nil, err
	}
	res := &schemas.JobResult{APIVersion: schemas.APIVersion, Job: job.ID}
	var c *cluster
	var rel *release.Release
	if err := r.do(ctx,
		step{"values", r.values},
		step{"connect", r.connect},
		step{"release", func(context.Context) (err error) { rel, err = r.deployedRelease(); return err }},
		step{"cluster", func(context.Context) (err error) { c, err = r.cluster(); return err }},
		step{"drift", func(ctx context.Context) (err error) { res.Drift, err = r.drift(ctx, c, rel); return err }},
		step{"health", func(ctx context.Context) (err error) { res.Health, err = r.health(ctx, c, rel); return err }},
	); err != nil {
		return nil, err
	}
	for _, d := range res.Drift {
		fmt.Fprintf(r.out, "%s/%s/%s %s: %s %s\n", d.Kind, d.Namespace, d.Name, d.Action, strings.Join(d.Fields, ", "), d.Diff)
	}
	fmt.Fprintf(r.out, "helm %s: %d drifted\n", job.Component, len(res.Drift))
	return res, nil
}

func (r *run) drift(ctx context.Context, c *cluster, rel *release.Release) ([]schemas.ResourceDrift, error) {
	self := schemas.ResourceDrift{Kind: KindRelease, Namespace: r.namespace, Name: r.release}
	if rel == nil {
		self.Action = schemas.DriftMissing
		return []schemas.ResourceDrift{self}, nil
	}
	var out []schemas.ResourceDrift
	a, err := reconciler.JobArtifact(r.job, ChartArtifact)
	if err != nil {
		return nil, err
	}
	if spec := specHash(a.Digest, r.vals); rel.Labels[LabelSpec] != spec {
		self.Action, self.Diff = schemas.DriftChanged, fmt.Sprintf("the chart or values differ from revision %d's", rel.Version)
		out = append(out, self)
	}
	objs, err := r.objects(rel, c)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, o := range objs {
		g.Go(func() error {
			entry, live, merged, err := c.manager.Diff(gctx, o, ssa.DiffOptions{})
			d := schemas.ResourceDrift{Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName()}
			switch {
			case err != nil:
				d.Action, d.Diff = schemas.DriftChanged, err.Error()
			case entry.Action == ssa.CreatedAction:
				d.Action = schemas.DriftMissing
			case entry.Action == ssa.ConfiguredAction:
				d.Action = schemas.DriftChanged
				if live != nil && merged != nil {
					d.Fields = diffPaths(live.Object, merged.Object)
				}
			default:
				return nil
			}
			mu.Lock()
			out = append(out, d)
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b schemas.ResourceDrift) int {
		return strings.Compare(a.Kind+"/"+a.Namespace+"/"+a.Name, b.Kind+"/"+b.Namespace+"/"+b.Name)
	})
	return out, nil
}

// diffPaths returns the top-level paths under which live and merged
// differ, outside metadata and status, at most maxDriftFields.
func diffPaths(live, merged map[string]any) []string {
	var paths []string
	var walk func(path string, a, b any)
	walk = func(path string, a, b any) {
		am, aok := a.(map[string]any)
		bm, bok := b.(map[string]any)
		if aok && bok {
			keys := map[string]bool{}
			for k := range am {
				keys[k] = true
			}
			for k := range bm {
				keys[k] = true
			}
			for _, k := range slices.Sorted(maps.Keys(keys)) {
				walk(path+"."+k, am[k], bm[k])
			}
			return
		}
		if fmt.Sprint(a) != fmt.Sprint(b) {
			paths = append(paths, strings.TrimPrefix(path, "."))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(merged)) {
		if k == "status" || k == "metadata" || k == "apiVersion" || k == "kind" {
			continue
		}
		walk(k, live[k], merged[k])
	}
	if len(paths) > maxDriftFields {
		paths = append(paths[:maxDriftFields], fmt.Sprintf("(%d more)", len(paths)-maxDriftFields))
	}
	return paths
}

// Health reports how the deployed release's objects stand, as kstatus
// computes them; it changes nothing and needs no chart.
func (p *Plugin) Health(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.Health, error) {
	r, err := p.start(ctx, job, env)
	if err != nil {
		return nil, err
	}
	var h *schemas.Health
	var c *cluster
	var rel *release.Release
	if err := r.do(ctx,
		step{"connect", r.connect},
		step{"release", func(context.Context) (err error) { rel, err = r.deployedRelease(); return err }},
		step{"cluster", func(context.Context) (err error) { c, err = r.cluster(); return err }},
		step{"health", func(ctx context.Context) (err error) { h, err = r.health(ctx, c, rel); return err }},
	); err != nil {
		return nil, err
	}
	return h, nil
}

func (r *run) health(ctx context.Context, c *cluster, rel *release.Release) (*schemas.Health, error) {
	if rel == nil {
		return &schemas.Health{Status: schemas.HealthFailed, Message: fmt.Sprintf("release %s has no deployed revision", r.release)}, nil
	}
	objs, err := r.objects(rel, c)
	if err != nil {
		return nil, err
	}
	ids := make([]kube.Object, len(objs))
	for i, o := range objs {
		ids[i] = kube.Object{ID: object.UnstructuredToObjMetadata(o), Version: o.GroupVersionKind().Version}
	}
	return kube.Health(ctx, c.client, ids, 8)
}

// waitAndHealth is the last step of Apply: with helm.wait it waits,
// within the job's timeout, until every object of the release is Ready as
// kstatus computes it; then it reports the objects' health. Without wait
// a failure to read health is reported as Unknown, not as a failed job.
func (r *run) waitAndHealth(ctx context.Context) error {
	wait := r.job.Helm != nil && r.job.Helm.Wait
	if r.result == nil || r.rel == nil {
		return nil
	}
	c, err := r.cluster()
	if err == nil && wait {
		err = r.wait(ctx, c)
		if err != nil {
			return err
		}
	}
	var h *schemas.Health
	if err == nil {
		h, err = r.health(ctx, c, r.rel)
	}
	if err != nil {
		r.logger.Warn("helm health", "error", err)
		h = &schemas.Health{Status: schemas.HealthUnknown, Message: err.Error()}
	}
	r.result.Health = h
	return nil
}

func (r *run) wait(ctx context.Context, c *cluster) error {
	objs, err := r.objects(r.rel, c)
	if err != nil {
		return err
	}
	set := make(object.ObjMetadataSet, len(objs))
	for i, o := range objs {
		set[i] = object.UnstructuredToObjMetadata(o)
	}
	began := time.Now()
	err = c.manager.WaitForSetWithContext(ctx, set, ssa.WaitOptions{Interval: time.Second, Timeout: r.timeout, FailFast: true})
	if err == nil {
		fmt.Fprintf(r.out, "release %s: %d objects ready after %s\n", r.release, len(set), time.Since(began).Round(time.Millisecond))
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	h, herr := r.health(context.WithoutCancel(ctx), c, r.rel)
	if herr != nil || h.Status == schemas.HealthReady {
		return fmt.Errorf("%w after %s: %w", ErrNotReady, r.timeout, err)
	}
	var lines []string
	for _, res := range h.Resources {
		lines = append(lines, fmt.Sprintf("%s/%s/%s is %s (%s)", res.Kind, res.Namespace, res.Name, res.Status, res.Message))
	}
	return fmt.Errorf("%w after %s: %s", ErrNotReady, r.timeout, strings.Join(lines, "; "))
}

// Debug answers Helm's status and history of a release in the
// component's namespace, and the Kubernetes commands in the component's
// namespace (helm.namespace, or default) or one of the install's. Neither
// ever shows the release's values or notes: they may hold secrets.
func (p *Plugin) Debug(ctx context.Context, job *schemas.Job, env reconciler.Env, cmd debugcmd.Command, out io.Writer) error {
	r, err := p.start(ctx, job, env)
	if err != nil {
		return err
	}
	if cmd.Kubernetes() {
		var allowed []string
		if job.Debug != nil {
			allowed = job.Debug.Namespaces
		}
		if err := debugcmd.CheckNamespace(&cmd, r.namespace, allowed); err != nil {
			return err
		}
		cfg, err := p.RESTConfig()
		if err != nil {
			return fmt.Errorf("helm debug %s: %w", job.Component, err)
		}
		return kube.Debug(ctx, cfg, cmd, out)
	}
	if err := r.do(ctx, step{"connect", r.connect}); err != nil {
		return err
	}
	hist, err := r.cfg.Releases.History(cmd.Name)
	if errors.Is(err, driver.ErrReleaseNotFound) || err == nil && len(hist) == 0 {
		fmt.Fprintf(out, "release %s not found in namespace %s\n", cmd.Name, r.namespace)
		return nil
	}
	if err != nil {
		return fmt.Errorf("release %s: %w", cmd.Name, err)
	}
	releaseutil.SortByRevision(hist)
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	switch cmd.Op {
	case debugcmd.OpStatus:
		rel := hist[len(hist)-1]
		fmt.Fprintf(w, "NAME:\t%s\n", rel.Name)
		fmt.Fprintf(w, "NAMESPACE:\t%s\n", rel.Namespace)
		fmt.Fprintf(w, "REVISION:\t%d\n", rel.Version)
		fmt.Fprintf(w, "STATUS:\t%s\n", rel.Info.Status)
		fmt.Fprintf(w, "CHART:\t%s\n", chartName(rel))
		fmt.Fprintf(w, "APP VERSION:\t%s\n", appVersion(rel))
		fmt.Fprintf(w, "LAST DEPLOYED:\t%s\n", rel.Info.LastDeployed.UTC().Format(time.RFC3339))
		fmt.Fprintf(w, "DESCRIPTION:\t%s\n", rel.Info.Description)
		if c, err := r.cluster(); err == nil {
			if objs, err := r.objects(rel, c); err == nil {
				fmt.Fprintln(w, "RESOURCES:")
				for _, o := range objs {
					fmt.Fprintf(w, "  %s/%s\n", o.GetKind(), o.GetName())
				}
			}
		}
	case debugcmd.OpHistory:
		fmt.Fprintln(w, "REVISION\tUPDATED\tSTATUS\tCHART\tAPP VERSION\tDESCRIPTION")
		for _, rel := range hist {
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\n", rel.Version, rel.Info.LastDeployed.UTC().Format(time.RFC3339),
				rel.Info.Status, chartName(rel), appVersion(rel), rel.Info.Description)
		}
	default:
		return &debugcmd.Refusal{Command: cmd.Words(), Reason: "not a helm command"}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err = out.Write(b.Bytes())
	return err
}

func chartName(rel *release.Release) string {
	if rel.Chart == nil || rel.Chart.Metadata == nil {
		return ""
	}
	return rel.Chart.Metadata.Name + "-" + rel.Chart.Metadata.Version
}

func appVersion(rel *release.Release) string {
	if rel.Chart == nil || rel.Chart.Metadata == nil {
		return ""
	}
	return rel.Chart.Metadata.AppVersion
}

package helm

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// Apply makes the release match the job: it installs it, upgrades it when
// the chart or the values changed (rolling back a failed upgrade), or
// leaves it alone, and reports the release as outputs. With helm.wait it
// then waits until the release's objects are Ready (kstatus) within the
// job's timeout; the result's Health is theirs either way.
func (p *Plugin) Apply(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	if job != nil && job.Plan != nil {
		return reconciler.ApplyPlanBound(ctx, p, "helm", job, env)
	}
	r, err := p.start(ctx, job, env)
	if err != nil {
		return nil, err
	}
	if err := r.do(ctx,
		step{"values", r.values},
		step{"extract", r.extract},
		step{"connect", r.connect},
		step{"release", r.deploy},
		step{"health", r.waitAndHealth},
	); err != nil {
		return nil, err
	}
	return r.result, nil
}

// values resolves the job's inputs into the chart's values.
func (r *run) values(context.Context) error {
	vals, err := chartValues(r.job.Inputs, r.p.lookup())
	if err != nil {
		return err
	}
	r.vals = vals
	return nil
}

// extract replaces STATEDIR/chart with the job's chart artifact and loads
// it.
func (r *run) extract(ctx context.Context) error {
	a, err := reconciler.JobArtifact(r.job, ChartArtifact)
	if err != nil {
		return err
	}
	dir := filepath.Join(r.dir, chartDir)
	if err := reconciler.ExtractFresh(ctx, r.env, a, dir); err != nil {
		return err
	}
	ch, err := loader.Load(dir)
	if err != nil {
		return fmt.Errorf("chart %s: %w", a.Digest, err)
	}
	r.chart, r.digest = ch, a.Digest
	return nil
}

// deploy decides from the release's history what to do: install a new
// release, upgrade one whose chart or values changed, or nothing.
func (r *run) deploy(ctx context.Context) error {
	spec := specHash(r.digest, r.vals)
	hist, err := r.cfg.Releases.History(r.release)
	if err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return fmt.Errorf("release %s history: %w", r.release, err)
	}
	releaseutil.SortByRevision(hist)
	if len(hist) > 0 {
		if err := r.unstick(hist[len(hist)-1]); err != nil {
			return err
		}
	}
	var deployed *release.Release
	for _, rel := range hist {
		if rel.Info.Status == release.StatusDeployed {
			deployed = rel
		}
	}
	switch {
	case len(hist) == 0:
		return r.install(ctx, spec)
	case deployed == nil:
		// Only failed or uninstalled revisions: nothing runs that an
		// upgrade could start from.
		fmt.Fprintf(r.out, "release %s has no deployed revision; installing it afresh\n", r.release)
		if err := r.uninstall(true); err != nil {
			return err
		}
		return r.install(ctx, spec)
	case deployed == hist[len(hist)-1] && deployed.Labels[LabelSpec] == spec:
		// The chart and values match; the cluster may not (a hand edit,
		// a deleted object). An upgrade to the same revision sets it back:
		// Helm's three-way merge restores what the manifest says.
		c, err := r.cluster()
		if err != nil {
			return err
		}
		drift, err := r.drift(ctx, c, deployed)
		if err != nil {
			return err
		}
		if len(drift) == 0 {
			fmt.Fprintf(r.out, "release %s revision %d is up to date\n", r.release, deployed.Version)
			r.report(deployed, false)
			return nil
		}
		for _, d := range drift {
			fmt.Fprintf(r.out, "%s/%s/%s drifted: %s %s\n", d.Kind, d.Namespace, d.Name, d.Action, strings.Join(d.Fields, ", "))
		}
		fmt.Fprintf(r.out, "release %s revision %d drifted; upgrading to set it back\n", r.release, deployed.Version)
		return r.upgrade(ctx, spec, deployed)
	default:
		return r.upgrade(ctx, spec, deployed)
	}
}

// unstick marks a revision left pending (the job process was killed
// during an install, upgrade or rollback) as failed, so that Helm accepts
// the next operation. The job's lock means no other operation of this
// release is running.
func (r *run) unstick(last *release.Release) error {
	if !last.Info.Status.IsPending() {
		return nil
	}
	fmt.Fprintf(r.out, "release %s revision %d was left %s by an interrupted job; marking it failed\n", r.release, last.Version, last.Info.Status)
	last.Info.Status = release.StatusFailed
	last.Info.Description = "interrupted: marked failed by nuon"
	if err := r.cfg.Releases.Update(last); err != nil {
		return fmt.Errorf("release %s revision %d: %w", r.release, last.Version, err)
	}
	return nil
}

func (r *run) install(ctx context.Context, spec string) error {
	if err := r.ensureNamespace(ctx); err != nil {
		return err
	}
	in := action.NewInstall(r.cfg)
	in.ReleaseName = r.release
	in.Namespace = r.namespace
	in.Wait = r.p.Wait
	in.Timeout = r.timeout
	in.Labels = map[string]string{LabelSpec: spec}
	in.PostRenderer = r.post
	rel, err := in.RunWithContext(ctx, r.chart, r.vals)
	if err != nil {
		ierr := fmt.Errorf("%w: %w", ErrInstallFailed, err)
		if rel != nil {
			if uerr := r.uninstall(true); uerr != nil {
				return errors.Join(ierr, fmt.Errorf("uninstall the failed release: %w", uerr))
			}
		}
		return ierr
	}
	fmt.Fprintf(r.out, "release %s revision %d installed: %s\n", rel.Name, rel.Version, rel.Info.Description)
	r.report(rel, true)
	return nil
}

// upgrade upgrades the release with the job's chart and values only (no
// values reused from earlier revisions). If it fails, the release is
// rolled back to deployed, the revision it ran before.
func (r *run) upgrade(ctx context.Context, spec string, deployed *release.Release) error {
	up := action.NewUpgrade(r.cfg)
	up.Namespace = r.namespace
	up.ResetValues = true
	up.Wait = r.p.Wait
	up.Timeout = r.timeout
	up.MaxHistory = r.p.maxHistory()
	up.Labels = map[string]string{LabelSpec: spec}
	up.PostRenderer = r.post
	rel, err := up.RunWithContext(ctx, r.release, r.chart, r.vals)
	if err == nil {
		fmt.Fprintf(r.out, "release %s revision %d upgraded: %s\n", rel.Name, rel.Version, rel.Info.Description)
		r.report(rel, true)
		return nil
	}
	fmt.Fprintf(r.out, "upgrade of release %s failed: %v; rolling back to revision %d\n", r.release, err, deployed.Version)
	rb := action.NewRollback(r.cfg)
	rb.Version = deployed.Version
	rb.Wait = r.p.Wait
	rb.Timeout = r.timeout
	rb.MaxHistory = r.p.maxHistory()
	if rerr := rb.Run(r.release); rerr != nil {
		return fmt.Errorf("%w: %w; rollback to revision %d failed too: %w", ErrUpgradeFailed, err, deployed.Version, rerr)
	}
	return fmt.Errorf("%w: %w; rolled back to revision %d", ErrUpgradeFailed, err, deployed.Version)
}

// uninstall removes the release and, with purge, its history.
func (r *run) uninstall(purge bool) error {
	un := action.NewUninstall(r.cfg)
	un.KeepHistory = !purge
	un.IgnoreNotFound = true
	un.Wait = r.p.Wait
	un.Timeout = r.timeout
	res, err := un.Run(r.release)
	if err != nil {
		return err
	}
	if res != nil && res.Release != nil {
		fmt.Fprintf(r.out, "release %s uninstalled\n", r.release)
	}
	return nil
}

// report makes the job's result from rel: its name, namespace, revision,
// chart and status.
func (r *run) report(rel *release.Release, changed bool) {
	out := map[string]any{
		"release":   rel.Name,
		"namespace": rel.Namespace,
		"revision":  int64(rel.Version),
		"status":    rel.Info.Status.String(),
	}
	if rel.Chart != nil && rel.Chart.Metadata != nil {
		out["chart"] = rel.Chart.Metadata.Name + "-" + rel.Chart.Metadata.Version
		if rel.Chart.Metadata.AppVersion != "" {
			out["appVersion"] = rel.Chart.Metadata.AppVersion
		}
	}
	r.result = &schemas.JobResult{APIVersion: schemas.APIVersion, Job: r.job.ID, Changed: changed, Outputs: out}
	r.rel = rel
}

// ensureNamespace creates the release's namespace if it does not exist. A
// job that may not read namespaces (least privilege: its role is in the
// release's namespace only) assumes it exists.
func (r *run) ensureNamespace(ctx context.Context) error {
	cfg, err := r.p.RESTConfig()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Namespaces().Get(ctx, r.namespace, metav1.GetOptions{})
	switch {
	case err == nil, apierrors.IsForbidden(err):
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("namespace %s: %w", r.namespace, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{FieldManager: "nuon"}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", r.namespace, err)
	}
	fmt.Fprintf(r.out, "namespace %s created\n", r.namespace)
	return nil
}

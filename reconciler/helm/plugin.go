package helm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/postrender"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// ChartArtifact names the artifact that holds the chart when a job has
// more than one.
const ChartArtifact = "chart"

// LabelSpec is the release label that records specHash: the chart digest
// and values the revision was made from.
const LabelSpec = "nuon.dev/spec"

// Defaults of the Plugin fields.
const (
	// DefaultMaxHistory is how many revisions of a release Helm keeps.
	DefaultMaxHistory = 10
	// DefaultTimeout bounds Helm's hooks and waits when neither the
	// component nor the job's deadline bound them.
	DefaultTimeout = 5 * time.Minute
)

// chartDir is where the chart is extracted in the component's state
// directory, afresh for every job.
const chartDir = "chart"

// Plugin applies helm components with the Helm SDK. The zero value uses the
// default kubeconfig (KUBECONFIG, ~/.kube/config, or the pod's service
// account in a cluster).
type Plugin struct {
	// Kubeconfig is the kubeconfig file; empty means the default loading
	// rules and then the in-cluster config.
	Kubeconfig string
	// Config, if set, is used instead of Kubeconfig.
	Config *rest.Config
	// Wait makes install, upgrade, rollback and uninstall wait until the
	// release's resources are ready or gone, as `helm --wait` does. Off by
	// default, as in the helm CLI: a failed upgrade is then one that the
	// API server or a hook refused.
	Wait bool
	// MaxHistory is how many revisions Helm keeps per release. Default
	// DefaultMaxHistory.
	MaxHistory int
	// LookupEnv reads the variables that hold secrets (see reconciler.SecretEnv).
	// Default os.LookupEnv.
	LookupEnv func(key string) (string, bool)
}

var _ reconciler.Plugin = (*Plugin)(nil)

// Outcomes callers branch on.
var (
	// ErrUpgradeFailed: the upgrade failed and the release was rolled
	// back to its last deployed revision. The error says why.
	ErrUpgradeFailed = errors.New("upgrade failed")
	// ErrInstallFailed: the first install failed; the failed release was
	// uninstalled.
	ErrInstallFailed = errors.New("install failed")
)

// run is one Apply or Destroy of one job: what its steps share.
type run struct {
	p         *Plugin
	job       *schemas.Job
	env       reconciler.Env
	logger    *slog.Logger
	out       io.Writer // the job's log; the job process redacts it
	dir       string
	release   string
	namespace string
	timeout   time.Duration

	vals   map[string]any
	chart  *chart.Chart
	digest string
	cfg    *action.Configuration
	result *schemas.JobResult
	// rel is the release revision the job left deployed.
	rel *release.Release
	// post, in a plan-bound apply, replaces what the chart renders by the
	// saved plan's manifest.
	post postrender.PostRenderer
}

// step is one named stage of a run; its name prefixes its errors.
type step struct {
	name string
	do   func(context.Context) error
}

// start checks the job and prepares a run.
func (p *Plugin) start(ctx context.Context, job *schemas.Job, env reconciler.Env) (*run, error) {
	if job == nil {
		return nil, errors.New("helm: no job")
	}
	if job.Component == "" {
		return nil, fmt.Errorf("helm job %s: no component", job.ID)
	}
	r := &run{p: p, job: job, env: env, logger: env.Logger, release: job.Component, namespace: "default"}
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	r.logger = r.logger.With("plugin", schemas.TypeHelm, "job", job.ID, "component", job.Component)
	r.out = env.Log
	if r.out == nil {
		r.out = io.Discard
	}
	var timeout string
	if h := job.Helm; h != nil {
		if h.Release != "" {
			r.release = h.Release
		}
		if h.Namespace != "" {
			r.namespace = h.Namespace
		}
		timeout = h.Timeout
	}
	r.timeout = helmTimeout(ctx, timeout)
	dir, err := reconciler.StateDir(job, env)
	if err != nil {
		return nil, fmt.Errorf("helm %s: %w", job.Component, err)
	}
	r.dir = dir
	return r, nil
}

// helmTimeout is helm.timeout, bounded by the job's deadline; or the time
// left before the deadline, less a tenth for a rollback to report; or
// DefaultTimeout.
func helmTimeout(ctx context.Context, setting string) time.Duration {
	var left time.Duration
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl)
		left = max(left-left/10, time.Second)
	}
	if d, err := time.ParseDuration(setting); err == nil && d > 0 {
		if left > 0 {
			return min(d, left)
		}
		return d
	}
	if left > 0 {
		return left
	}
	return DefaultTimeout
}

// do runs the steps in order and stops at the first error, wrapped
// "helm STEP COMPONENT: ...".
func (r *run) do(ctx context.Context, steps ...step) error {
	for _, s := range steps {
		began := time.Now()
		err := s.do(ctx)
		r.logger.Info("helm step", "step", s.name, "duration", time.Since(began), "ok", err == nil)
		if err != nil {
			return fmt.Errorf("helm %s %s: %w", s.name, r.job.Component, err)
		}
	}
	return nil
}

// RESTConfig returns the client configuration the plugin connects with.
func (p *Plugin) RESTConfig() (*rest.Config, error) {
	if p.Config != nil {
		return rest.CopyConfig(p.Config), nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = p.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, nil
}

// connect initialises Helm's action configuration: the release's
// namespace, release history in Secrets, Helm's debug lines in the log.
func (r *run) connect(context.Context) error {
	cfg, err := r.p.RESTConfig()
	if err != nil {
		return err
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "nuon-helm"
	}
	r.cfg = &action.Configuration{}
	debug := func(format string, v ...any) {
		fmt.Fprintf(r.out, format+"\n", v...)
	}
	return r.cfg.Init(&getter{cfg: cfg, namespace: r.namespace}, r.namespace, "secret", debug)
}

func (p *Plugin) lookup() func(string) (string, bool) {
	if p.LookupEnv != nil {
		return p.LookupEnv
	}
	return os.LookupEnv
}

func (p *Plugin) maxHistory() int {
	if p.MaxHistory > 0 {
		return p.MaxHistory
	}
	return DefaultMaxHistory
}

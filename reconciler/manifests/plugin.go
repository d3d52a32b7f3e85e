package manifests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/pkg/ssa"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// FieldManager is the server-side apply field manager of every object the
// plugin applies: the fields it sets are owned by "nuon".
const FieldManager = "nuon"

// Labels the plugin sets on every object it applies. Pruning and Destroy
// delete only objects that still carry them, with the job's values.
const (
	LabelInstall   = "nuon.dev/install"
	LabelComponent = "nuon.dev/component"
)

// ManifestsArtifact names the artifact that holds the manifests when a job
// has more than one.
const ManifestsArtifact = "manifests"

// Defaults of the Plugin fields.
const (
	// DefaultConcurrency is how many requests the plugin has in flight at
	// once.
	DefaultConcurrency = 16
	// DefaultWaitTimeout bounds the health wait when neither the component
	// nor the job's deadline bound it.
	DefaultWaitTimeout = 5 * time.Minute
	// DefaultPollInterval is how often the health wait looks at the
	// objects.
	DefaultPollInterval = time.Second
)

// manifestsDir is where the manifests are extracted in the component's
// state directory, afresh for every job.
const manifestsDir = "manifests"

// Plugin applies manifests components: plain Kubernetes YAML, applied
// server-side. The zero value uses the default kubeconfig (KUBECONFIG,
// ~/.kube/config, or the pod's service account in a cluster).
type Plugin struct {
	// Kubeconfig is the kubeconfig file; empty means the default loading
	// rules and then the in-cluster config.
	Kubeconfig string
	// Config, if set, is used instead of Kubeconfig.
	Config *rest.Config
	// Concurrency is how many requests are in flight at once. Default
	// DefaultConcurrency.
	Concurrency int
	// PollInterval is how often the health wait polls. Default
	// DefaultPollInterval.
	PollInterval time.Duration
	// LookupEnv reads the variables that hold secrets (see reconciler.SecretEnv).
	// Default os.LookupEnv.
	LookupEnv func(key string) (string, bool)
}

var _ reconciler.Plugin = (*Plugin)(nil)

// run is one Apply or Destroy of one job: what its steps share.
type run struct {
	p      *Plugin
	job    *schemas.Job
	env    reconciler.Env
	logger *slog.Logger
	log    io.Writer
	dir    string // the component's state directory
	// manifests is where the job's manifests are extracted:
	// STATEDIR/manifests, or a directory of its own for a drift check.
	manifests string

	client  client.Client
	mapper  meta.RESTMapper
	manager *ssa.ResourceManager

	inputs   map[string]any
	settings schemas.ManifestSettings
	desired  []*desired
	inv      *Inventory
	hadInv   bool
	plan     *plan
	changes  changes
	result   *schemas.JobResult
	// healthResult is the objects' health, once computed.
	healthResult *schemas.Health
}

// step is one named stage of a run; its name prefixes its errors.
type step struct {
	name string
	do   func(context.Context) error
}

// start checks the job and prepares a run.
func (p *Plugin) start(job *schemas.Job, env reconciler.Env) (*run, error) {
	if job == nil {
		return nil, errors.New("manifests: no job")
	}
	if job.Component == "" {
		return nil, fmt.Errorf("manifests job %s: no component", job.ID)
	}
	r := &run{p: p, job: job, env: env, logger: env.Logger, log: env.Log}
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	r.logger = r.logger.With("plugin", schemas.TypeManifests, "job", job.ID, "component", job.Component)
	if r.log == nil {
		r.log = io.Discard
	}
	if job.Manifests != nil {
		r.settings = *job.Manifests
	}
	dir, err := reconciler.StateDir(job, env)
	if err != nil {
		return nil, fmt.Errorf("manifests %s: %w", job.Component, err)
	}
	r.dir = dir
	r.manifests = filepath.Join(dir, manifestsDir)
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, fmt.Errorf("manifests %s: %w", job.Component, err)
	}
	return r, nil
}

// do runs the steps in order and stops at the first error, wrapped
// "manifests STEP COMPONENT: ...".
func (r *run) do(ctx context.Context, steps ...step) error {
	for _, s := range steps {
		began := time.Now()
		err := s.do(ctx)
		r.logger.Info("manifests step", "step", s.name, "duration", time.Since(began), "ok", err == nil)
		if err != nil {
			return fmt.Errorf("manifests %s %s: %w", s.name, r.job.Component, err)
		}
	}
	return nil
}

// RESTConfig returns the client configuration the plugin connects with.
// Client-side rate limiting is off unless the configuration sets it: a
// job is short-lived and the API server's own priority and fairness
// protects it.
func (p *Plugin) RESTConfig() (*rest.Config, error) {
	var cfg *rest.Config
	if p.Config != nil {
		cfg = rest.CopyConfig(p.Config)
	} else {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = p.Kubeconfig
		var err error
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
	}
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		cfg.QPS = -1
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "nuon-manifests"
	}
	return cfg, nil
}

// connect makes the clients: a controller-runtime client with a lazy REST
// mapper, and the ssa resource manager on top of it.
func (r *run) connect(context.Context) error {
	cfg, err := r.p.RESTConfig()
	if err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	r.mapper, err = apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return err
	}
	r.client, err = client.New(cfg, client.Options{HTTPClient: hc, Mapper: r.mapper})
	if err != nil {
		return err
	}
	poller := polling.NewStatusPoller(r.client, r.mapper, polling.Options{})
	r.manager = ssa.NewResourceManager(r.client, poller, ssa.Owner{Field: FieldManager, Group: "nuon.dev"})
	r.manager.SetConcurrency(r.p.concurrency())
	return nil
}

func (p *Plugin) concurrency() int {
	if p.Concurrency > 0 {
		return p.Concurrency
	}
	return DefaultConcurrency
}

func (p *Plugin) pollInterval() time.Duration {
	if p.PollInterval > 0 {
		return p.PollInterval
	}
	return DefaultPollInterval
}

func (p *Plugin) lookup() func(string) (string, bool) {
	if p.LookupEnv != nil {
		return p.LookupEnv
	}
	return os.LookupEnv
}

// ownerLabels are the labels that mark the job's objects.
func (r *run) ownerLabels() map[string]string {
	return map[string]string{LabelInstall: r.job.Install, LabelComponent: r.job.Component}
}

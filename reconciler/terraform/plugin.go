package terraform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"

	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/internal/tfstate"
	"nuon.dev/nuon/internal/toolcache"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// Defaults of the Plugin fields.
const (
	// DefaultBinary is the terraform executable, looked up on PATH.
	DefaultBinary = "terraform"
	// DefaultGrace is how long terraform may take to stop once interrupted
	// before it is killed. It is generous: an interrupted apply finishes the
	// provider calls in flight and writes its state, while a killed one
	// forgets resources it already created.
	DefaultGrace = time.Minute
)

// Plugin applies terraform components with the terraform CLI. The zero
// value is ready to use.
type Plugin struct {
	// Binary is the terraform executable: a path, or a name looked up on
	// PATH. Default DefaultBinary.
	Binary string
	// CLIConfig is the terraform CLI configuration file, which says where
	// providers are installed from. Default: TF_CLI_CONFIG_FILE from the
	// job's environment.
	CLIConfig string
	// Grace is how long terraform may take to stop after the job's context
	// ends. Default DefaultGrace.
	Grace time.Duration
	// LookupEnv reads the variables that hold secrets (see reconciler.SecretEnv),
	// and the state's environment (tfstate.EnvStateNamespace, tfstate.EnvStateSecretSuffix,
	// tfstate.EnvStaleLock, KUBECONFIG). Default os.LookupEnv.
	LookupEnv func(key string) (string, bool)
	// Backend keeps the state in Terraform's kubernetes backend. Default:
	// the backend tfstate.EnvStateNamespace and tfstate.EnvStateSecretSuffix name, else
	// the local state file in the component's state directory. A job
	// that names an S3 object (Job.State) uses the s3 backend instead.
	Backend *KubernetesBackend
	// StaleLock is the ID of a state lock held by a job the agent knows is
	// dead: a command that finds the state locked by it runs `terraform
	// force-unlock` and goes on. Default: tfstate.EnvStaleLock.
	StaleLock string
	// LockPoll is how often a state locked by another job is retried.
	// Default DefaultLockPoll.
	LockPoll time.Duration
}

var _ reconciler.Plugin = (*Plugin)(nil)

// run is one Apply or Destroy of one job: what its steps share.
type run struct {
	job    *schemas.Job
	env    reconciler.Env
	logger *slog.Logger
	lookup func(string) (string, bool)
	// out receives terraform's stdout and stderr. The job process redacts
	// secrets from everything it prints and returns (package jobrun).
	out io.Writer
	tf  *tfexec.Terraform
	// cliConfig is the CLI configuration terraform reads: Plugin.CLIConfig,
	// else TF_CLI_CONFIG_FILE; empty: terraform's default.
	cliConfig string

	dir   string // the extracted module, terraform's working directory
	state string // the state file, kept across jobs (local backend)
	plan  string // the saved plan

	// s3, when set (the job's State), keeps the state in an S3 object;
	// else backend, when set, keeps it in the cluster; else state does.
	s3        *S3Backend
	backend   *KubernetesBackend
	staleLock string
	lockPoll  time.Duration
	// brokenLock is the dead job's lock this run broke.
	brokenLock *tfstate.LockInfo

	vars    map[string]any
	changed bool
	// saved is the record of the saved plan a plan-bound apply applied.
	saved  *schemas.PlanRecord
	result *schemas.JobResult
	// outs are the state's outputs once an apply read them.
	outs map[string]tfexec.OutputMeta
}

// step is one named stage of a run; its name prefixes its errors.
type step struct {
	name string
	do   func(context.Context) error
}

// start checks the job and prepares a run in env.StateDir.
func (p *Plugin) start(job *schemas.Job, env reconciler.Env) (*run, error) {
	if job == nil {
		return nil, errors.New("terraform: no job")
	}
	if job.Component == "" {
		return nil, fmt.Errorf("terraform job %s: no component", job.ID)
	}
	r := &run{job: job, env: env, logger: env.Logger, lookup: p.LookupEnv, cliConfig: p.CLIConfig}
	if r.cliConfig == "" {
		r.cliConfig = os.Getenv("TF_CLI_CONFIG_FILE")
	}
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	r.logger = r.logger.With("plugin", schemas.TypeTerraform, "job", job.ID, "component", job.Component)
	if r.lookup == nil {
		r.lookup = os.LookupEnv
	}
	log := env.Log
	if log == nil {
		log = io.Discard
	}
	r.out = &lockedWriter{w: log}

	dir, err := reconciler.StateDir(job, env)
	if err != nil {
		return nil, fmt.Errorf("terraform %s: %w", job.Component, err)
	}
	r.dir = filepath.Join(dir, moduleDir)
	r.state = filepath.Join(dir, stateFile)
	r.plan = filepath.Join(r.dir, planFile)
	if job.State != nil {
		r.s3 = &S3Backend{S3State: *job.State}
	} else {
		r.backend = p.backend()
	}
	r.staleLock = p.StaleLock
	if r.staleLock == "" {
		r.staleLock, _ = r.lookup(tfstate.EnvStaleLock)
	}
	r.lockPoll = p.LockPoll
	if r.lockPoll <= 0 {
		r.lockPoll = DefaultLockPoll
	}

	bin := p.Binary
	if bin == "" {
		bin = DefaultBinary
	}
	if bin, err = exec.LookPath(bin); err != nil {
		return nil, fmt.Errorf("terraform %s: %w", job.Component, err)
	}
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, fmt.Errorf("terraform %s: %w", job.Component, err)
	}
	if r.tf, err = tfexec.NewTerraform(r.dir, bin); err != nil {
		return nil, fmt.Errorf("terraform %s: %w", job.Component, err)
	}
	if err := r.tf.SetEnv(p.environ()); err != nil {
		return nil, fmt.Errorf("terraform %s: %w", job.Component, err)
	}
	grace := p.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	if err := r.tf.SetWaitDelay(grace); err != nil {
		return nil, fmt.Errorf("terraform %s: %w", job.Component, err)
	}
	r.tf.SetStdout(r.out)
	r.tf.SetStderr(r.out)
	r.tf.SetLogger(printfLogger{r.logger})
	return r, nil
}

// backend is Plugin.Backend, or the one the environment names, or nil for
// the local state file.
func (p *Plugin) backend() *KubernetesBackend {
	if p.Backend != nil {
		return p.Backend
	}
	return backendFromEnv(p.lookupEnv())
}

func (p *Plugin) lookupEnv() func(string) (string, bool) {
	if p.LookupEnv != nil {
		return p.LookupEnv
	}
	return os.LookupEnv
}

// environ is terraform's environment: the job's own, less the secrets
// (terraform gets them through the variables file only) and the variables
// terraform-exec sets itself.
func (p *Plugin) environ() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, redact.EnvPrefix) {
			continue
		}
		env[k] = v
	}
	env["CHECKPOINT_DISABLE"] = "1"
	if p.CLIConfig != "" {
		env["TF_CLI_CONFIG_FILE"] = p.CLIConfig
	}
	return tfexec.CleanEnv(env)
}

// do runs the steps in order and stops at the first error, wrapped
// "terraform STEP COMPONENT: ...".
func (r *run) do(ctx context.Context, steps ...step) error {
	for _, s := range steps {
		began := time.Now()
		err := s.do(ctx)
		r.logger.Info("terraform step", "step", s.name, "duration", time.Since(began), "ok", err == nil)
		if err != nil {
			return fmt.Errorf("terraform %s %s: %w", s.name, r.job.Component, err)
		}
	}
	return nil
}

// noState reports that nothing was ever applied: there is no local state
// file. With the kubernetes or s3 backend the plugin cannot tell before
// init, and reports false: terraform finds an empty state itself.
func (r *run) noState() (bool, error) {
	if r.backend != nil || r.s3 != nil {
		return false, nil
	}
	_, err := os.Stat(r.state)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	return false, err
}

// cleanup removes the files that hold resolved secrets; the state keeps
// what terraform itself stores.
func (r *run) cleanup() {
	for _, f := range []string{r.plan, filepath.Join(r.dir, varFile)} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			r.logger.Warn("terraform cleanup", "file", f, "error", err)
		}
	}
}

// init installs the module's providers and connects the state. Without a
// CLI configuration a failure says how to give one: on a machine that
// cannot reach the public registry, providers come from a mirror.
func (r *run) init(ctx context.Context) error {
	if err := r.tf.Init(ctx, tfexec.Upgrade(false)); err != nil {
		return fmt.Errorf("%w\n(%s)", err, toolcache.TerraformHint("the agent's (or nuon job run's) --tf-cli-config", r.cliConfig))
	}
	return nil
}

// lockedWriter serialises terraform's stdout and stderr, which
// terraform-exec copies from two goroutines, into one log.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// printfLogger hands terraform-exec's log lines (the commands it runs) to
// slog at debug level.
type printfLogger struct{ l *slog.Logger }

func (p printfLogger) Printf(format string, v ...any) {
	p.l.Debug(fmt.Sprintf(format, v...))
}

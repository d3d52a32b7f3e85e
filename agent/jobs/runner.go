package jobs

import (
	"context"
	"io"
	"log/slog"
	"os"
	"time"

	"nuon.dev/nuon/schemas"
)

// Runner runs one job to completion. Implementations: Local (a child
// process); a Kubernetes Job runner will be added later beside it.
type Runner interface {
	// Run executes job; dir is the job's own directory (created if
	// missing) where the runner keeps manifest.json, result.json, log and
	// lock.
	Run(ctx context.Context, job *schemas.Job, dir string) (*schemas.JobResult, error)
	// Recover is called after an agent restart for a job that was started
	// but whose outcome is unknown: it waits until no process of that job
	// is running any more and returns its result if it finished, or
	// ErrNotFinished if it must be run again.
	Recover(ctx context.Context, dir string) (*schemas.JobResult, error)
}

// EnvRunner is a Runner that can give one job extra environment, never
// written to its manifest: the sandbox's jobs get the maintenance role's
// temporary AWS credentials this way.
type EnvRunner interface {
	Runner
	// RunEnv is Run with env (KEY=VALUE) added to the job's environment.
	RunEnv(ctx context.Context, job *schemas.Job, dir string, env []string) (*schemas.JobResult, error)
}

var _ EnvRunner = (*Local)(nil)

// Files in a job directory.
const (
	ManifestFile = "manifest.json"
	ResultFile   = "result.json"
	LogFile      = "log"
	LockFile     = "lock"
)

// Defaults of the Local fields.
const (
	// DefaultKillGrace is how long a job's processes may take to stop after
	// SIGTERM before they are killed.
	DefaultKillGrace = 10 * time.Second
	// DefaultTimeoutMargin is how long past its own deadline a job may take
	// to stop and write its result before the runner stops it. It covers a
	// plugin's own grace for the tool it drives (the terraform plugin gives
	// an interrupted terraform a minute to write its state).
	DefaultTimeoutMargin = 2 * time.Minute
)

// Local runs each job as a child process of the agent: `nuon job run
// MANIFEST` in a process group of its own. The zero value is ready to use.
type Local struct {
	// Command is the argv prefix that runs a job; the manifest path is
	// appended. Default: []string{os.Executable(), "job", "run"}.
	Command []string
	// Env is extra environment for the job, appended to os.Environ().
	Env []string
	// Log, if set, receives a copy of the job's output besides dir/log. It
	// must be safe for concurrent use if jobs run in parallel.
	Log io.Writer
	// Logger receives the runner's events (keys install, component, job,
	// plugin). Default: discard.
	Logger *slog.Logger
	// KillGrace is how long the job's processes get between SIGTERM and
	// SIGKILL. Default DefaultKillGrace.
	KillGrace time.Duration
	// TimeoutMargin is added to the job's own timeout before the runner
	// stops it. Default DefaultTimeoutMargin.
	TimeoutMargin time.Duration
}

var _ Runner = (*Local)(nil)

func (l *Local) command() ([]string, error) {
	if len(l.Command) > 0 {
		return l.Command, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return []string{exe, "job", "run"}, nil
}

func (l *Local) logger() *slog.Logger {
	if l.Logger != nil {
		return l.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (l *Local) killGrace() time.Duration {
	if l.KillGrace > 0 {
		return l.KillGrace
	}
	return DefaultKillGrace
}

func (l *Local) timeoutMargin() time.Duration {
	if l.TimeoutMargin > 0 {
		return l.TimeoutMargin
	}
	return DefaultTimeoutMargin
}

package reconciler

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"

	"nuon.dev/nuon/internal/debugcmd"
	"nuon.dev/nuon/schemas"
)

// Plugin applies one component type. A plugin runs inside a job process
// (`nuon job run`), never inside the agent: it may take as long as its
// timeout and use as much memory as it needs without hurting the agent.
type Plugin interface {
	// Apply creates or updates the component the job names, so that it
	// matches the job exactly, and returns its outputs.
	Apply(ctx context.Context, job *schemas.Job, env Env) (*schemas.JobResult, error)
	// Destroy removes everything the component created.
	Destroy(ctx context.Context, job *schemas.Job, env Env) error
}

// DriftChecker is a plugin that can compare the install with a job's
// desired state without changing anything (operation drift): no write to
// the cluster, the cloud or the component's state, and at most one plan.
// The result's Drift lists what differs, per resource, and its Health how
// the component stands when the plugin can tell. Correcting drift is an
// ordinary Apply of the same job.
type DriftChecker interface {
	Drift(ctx context.Context, job *schemas.Job, env Env) (*schemas.JobResult, error)
}

// HealthChecker is a plugin that can tell how a component stands without
// changing anything (operation health).
type HealthChecker interface {
	Health(ctx context.Context, job *schemas.Job, env Env) (*schemas.Health, error)
}

// Debugger is a plugin that runs read-only debug commands (operation
// debug). The job process parses the job's command against the plugin's
// allow-list (debugcmd.Parse) and hands Debug the parsed command; Debug
// writes its answer to out, which bounds it, and refuses a command
// outside the install with a *debugcmd.Refusal. It must never run a shell
// or hand the command's words to a CLI.
type Debugger interface {
	Debug(ctx context.Context, job *schemas.Job, env Env, cmd debugcmd.Command, out io.Writer) error
}

// Env is what the job process hands a plugin.
type Env struct {
	// StateDir is the component's persistent directory (job.StateDir),
	// kept across jobs.
	StateDir string
	// Artifacts opens the job's artifacts.
	Artifacts ArtifactSource
	// Log receives the plugin's human-readable output (terraform's, helm's).
	Log io.Writer
	// Logger is for structured events.
	Logger *slog.Logger
}

// ArtifactSource gives a plugin the content of an artifact, by digest.
type ArtifactSource interface {
	// Extract writes the content of artifact a (a directory tree: a
	// Terraform module, a chart, a set of manifests) into dir, verifying
	// the digest as it reads.
	Extract(ctx context.Context, a schemas.Artifact, dir string) error
}

// ErrNoStateDir means neither the Env nor the job names a state directory.
var ErrNoStateDir = errors.New("no state directory")

// StateDir is the component's absolute state directory: env.StateDir, or
// else the job's own.
func StateDir(job *schemas.Job, env Env) (string, error) {
	dir := env.StateDir
	if dir == "" {
		dir = job.StateDir
	}
	if dir == "" {
		return "", ErrNoStateDir
	}
	return filepath.Abs(dir)
}

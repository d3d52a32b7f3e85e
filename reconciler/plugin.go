package reconciler

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"

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

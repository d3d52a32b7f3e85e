package reconciler

import (
	"context"
	"errors"
	"fmt"
	"os"

	"nuon.dev/nuon/schemas"
)

// ErrNoArtifactSource reports a job that needs an artifact run without an
// Env.Artifacts to read it from: the job process is miswired.
var ErrNoArtifactSource = errors.New("no artifact source")

// JobArtifact picks the job's artifact called name (a plugin's "module",
// "chart" or "manifests"), or its only artifact, so that a component with
// a single artifact need not name it.
func JobArtifact(job *schemas.Job, name string) (schemas.Artifact, error) {
	for _, a := range job.Artifacts {
		if a.Name == name {
			return a, nil
		}
	}
	if len(job.Artifacts) == 1 {
		return job.Artifacts[0], nil
	}
	names := make([]string, len(job.Artifacts))
	for i, a := range job.Artifacts {
		names[i] = a.Name
	}
	return schemas.Artifact{}, fmt.Errorf("no %q artifact among %d: %v", name, len(job.Artifacts), names)
}

// ExtractFresh replaces dir with the content of artifact a from
// env.Artifacts: it removes dir, creates it again readable by its owner
// only, and extracts a into it. Nothing a previous job left in dir
// survives.
func ExtractFresh(ctx context.Context, env Env, a schemas.Artifact, dir string) error {
	if env.Artifacts == nil {
		return fmt.Errorf("artifact %s %s: %w", a.Name, a.Digest, ErrNoArtifactSource)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("artifact %s %s: %w", a.Name, a.Digest, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("artifact %s %s: %w", a.Name, a.Digest, err)
	}
	if err := env.Artifacts.Extract(ctx, a, dir); err != nil {
		return fmt.Errorf("artifact %s %s: %w", a.Name, a.Digest, err)
	}
	return nil
}

package jobs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"nuon.dev/nuon/schemas"
)

// Recover waits until no process of the job in dir holds its lock, then
// reports how the job ended: its result (with an error wrapping
// ErrJobFailed if the job failed, as Run would), or ErrNotFinished when
// it left no result, which includes a job that was never started. It
// gives up with ctx's error if ctx ends first.
func (l *Local) Recover(ctx context.Context, dir string) (*schemas.JobResult, error) {
	lock, err := waitLock(ctx, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("job in %s: %w: never started", dir, ErrNotFinished)
	}
	if err != nil {
		return nil, fmt.Errorf("job in %s: %w", dir, err)
	}
	defer lock.Close()
	job, err := readManifest(filepath.Join(dir, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("job in %s: %w: never started", dir, ErrNotFinished)
	}
	if err != nil {
		return nil, fmt.Errorf("job in %s: %w", dir, err)
	}
	logger := l.logger().With("install", job.Install, "component", job.Component, "job", job.ID, "plugin", job.Plugin)
	res, err := readResult(filepath.Join(dir, ResultFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		logger.Info("recovered job left no result")
		return nil, fmt.Errorf("job %s: %w", job.ID, ErrNotFinished)
	case err != nil:
		return nil, fmt.Errorf("job %s: %w", job.ID, err)
	case res.Job != job.ID:
		return nil, fmt.Errorf("job %s: result is for job %q", job.ID, res.Job)
	}
	logger.Info("recovered job result", "failed", res.Error != "")
	if res.Error != "" {
		return res, fmt.Errorf("job %s: %w: %s", job.ID, ErrJobFailed, res.Error)
	}
	return res, nil
}

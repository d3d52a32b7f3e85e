package jobs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"k8s.io/utils/ptr"

	"nuon.dev/nuon/schemas"
)

// Recover reports how the job whose directory is dir ended, after an agent
// restart: the result the runner collected into dir, if any; otherwise it
// finds the job's Kubernetes Job by its LabelJob label, waits for it to
// finish and collects its result as Run does. It returns ErrNotFinished
// when there is no such Job (never created, or deleted before it
// finished). It gives up with ctx's error if ctx ends first; the Job is
// then left running. Once the run has an outcome, or never ran, its
// staged directory (a vendor's plugin's, StagedDir) is removed.
func (k *Kube) Recover(ctx context.Context, dir string) (*schemas.JobResult, error) {
	job, err := readManifest(filepath.Join(dir, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("job in %s: %w: never started", dir, ErrNotFinished)
	}
	if err != nil {
		return nil, fmt.Errorf("job in %s: %w", dir, err)
	}
	res, err := readResult(filepath.Join(dir, ResultFile))
	if err == nil {
		unstage(dir, k.logger())
	}
	switch {
	case err == nil && res.Job != job.ID:
		return nil, fmt.Errorf("job %s: result is for job %q", job.ID, res.Job)
	case err == nil && res.Error != "":
		return res, fmt.Errorf("job %s: %w: %s", job.ID, ErrJobFailed, res.Error)
	case err == nil:
		return res, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("job %s: %w", job.ID, err)
	}
	r, err := k.newKubeRun(job, dir)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", job.ID, err)
	}
	list, err := k.api().listJobs(ctx, LabelJob+"="+idHash(job.ID))
	if err != nil {
		return nil, fmt.Errorf("job %s: find its kubernetes job: %w", job.ID, err)
	}
	for i := range list.Items {
		if list.Items[i].Annotations[AnnotationJobID] == job.ID && list.Items[i].DeletionTimestamp == nil {
			r.obj = &list.Items[i]
			r.name = r.obj.Name
		}
	}
	if r.obj == nil {
		r.logger.Info("recovered job has no kubernetes job")
		unstage(dir, r.logger)
		return nil, fmt.Errorf("job %s: %w: no kubernetes job", job.ID, ErrNotFinished)
	}
	if ptr.Deref(r.obj.Spec.Suspend, false) {
		// Created suspended (by RunEnv, or for a vendor's plugin) and
		// never started: the run stopped before the job's Secret or
		// NetworkPolicy was made.
		r.logger.Info("recovered job never started; deleting it")
		if err := r.delete(ctx); err != nil {
			return nil, fmt.Errorf("job %s: %w", job.ID, err)
		}
		unstage(dir, r.logger)
		return nil, fmt.Errorf("job %s: %w: never started", job.ID, ErrNotFinished)
	}
	r.logger.Info("recovering job")
	// The agent stopping again is no reason to stop the job.
	r.keepOnCancel = true
	if _, done := finished(r.obj); !done {
		r.wait(ctx)
	}
	if r.cause != nil && !r.timedOut {
		return nil, fmt.Errorf("job %s: %w", job.ID, r.cause)
	}
	defer unstage(dir, r.logger)
	return r.outcome(ctx)
}

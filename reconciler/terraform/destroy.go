package terraform

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// Destroy removes everything the component's state holds, with the same
// module and inputs that created it. Without a local state file there is
// nothing to remove and Destroy does nothing; with the kubernetes or s3
// backend terraform finds out, and destroys nothing from an empty state.
func (p *Plugin) Destroy(ctx context.Context, job *schemas.Job, env reconciler.Env) error {
	if job == nil {
		return errors.New("terraform: no job")
	}
	if job.State == nil && p.backend() == nil {
		dir, err := reconciler.StateDir(job, env)
		if err != nil {
			return fmt.Errorf("terraform %s: %w", job.Component, err)
		}
		if _, err := os.Stat(filepath.Join(dir, stateFile)); errors.Is(err, os.ErrNotExist) {
			return nil
		} else if err != nil {
			return fmt.Errorf("terraform destroy %s: %w", job.Component, err)
		}
	}
	r, err := p.start(job, env)
	if err != nil {
		return err
	}
	defer r.cleanup()
	return r.do(ctx,
		step{"inputs", r.resolveInputs},
		step{"extract", r.extract},
		step{"init", r.init},
		step{"destroy", r.destroy},
	)
}

func (r *run) destroy(ctx context.Context) error {
	return r.locking(ctx, func(ctx context.Context) error { return r.tf.Destroy(ctx) })
}

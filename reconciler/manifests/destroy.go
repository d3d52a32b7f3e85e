package manifests

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// Destroy deletes every object of the component's inventory that still
// carries its labels, then the inventory. Without an inventory nothing was
// ever applied and Destroy does nothing: it needs neither the manifests
// nor the cluster.
func (p *Plugin) Destroy(ctx context.Context, job *schemas.Job, env reconciler.Env) error {
	r, err := p.start(job, env)
	if err != nil {
		return err
	}
	inv, ok, err := readInventory(r.dir)
	if err != nil {
		return fmt.Errorf("manifests destroy %s: %w", job.Component, err)
	}
	if !ok {
		return nil
	}
	r.inv = inv
	if err := r.do(ctx,
		step{"connect", r.connect},
		step{"delete", func(ctx context.Context) error { return r.deleteEntries(ctx, r.inv.Objects) }},
		step{"forget", r.forget},
	); err != nil {
		return err
	}
	fmt.Fprintf(r.log, "manifests %s: %d deleted, %d left (labels changed)\n", job.Component, len(r.changes.deleted), len(r.changes.skipped))
	return nil
}

// forget removes the inventory and the extracted manifests.
func (r *run) forget(context.Context) error {
	if err := os.Remove(filepath.Join(r.dir, InventoryFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.RemoveAll(filepath.Join(r.dir, manifestsDir))
}

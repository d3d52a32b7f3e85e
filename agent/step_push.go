package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/schemas"
)

// push sends the local status to the remote when the remote lacks it. The
// local status always descends from the remote tip it replaces (a forged
// tip is merged, see status), so the push is a fast-forward.
func (p *pass) push(ctx context.Context) error {
	a := p.agent
	if p.localHead.IsZero() || p.localHead == p.remoteHead {
		p.pushed = !p.localHead.IsZero()
		return nil
	}
	if ctx.Err() != nil {
		// Stopping: deliver the status with a short deadline of its own.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
	}
	if err := a.cfg.Remote.Push(ctx, a.store, plumbing.ReferenceName(schemas.StatusRef(a.cfg.Install)), p.remoteHead, p.localHead); err != nil {
		return fmt.Errorf("push status: %w", err)
	}
	p.pushed = true
	p.log.Info("status pushed", "commit", short(p.localHead))
	return nil
}

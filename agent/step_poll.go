package agent

import (
	"context"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/schemas"
)

// poll reads the remote desired and status refs in one request (and
// the liveness ref, which a heartbeat replaces, on a git host).
func (p *pass) poll(ctx context.Context) (outcome, error) {
	a := p.agent
	desired := plumbing.ReferenceName(schemas.InstallRef(a.cfg.Install))
	status := plumbing.ReferenceName(schemas.StatusRef(a.cfg.Install))
	names := []plumbing.ReferenceName{desired, status}
	liveness := plumbing.ReferenceName(schemas.LivenessRef(a.cfg.Install))
	if a.cfg.Heartbeat > 0 && a.cfg.HeartbeatTo == HeartbeatRef {
		// Its tip is what a heartbeat replaces; same request.
		names = append(names, liveness)
	}
	heads, err := a.cfg.Remote.Heads(ctx, names...)
	if err != nil {
		return proceed, fmt.Errorf("poll: %w", err)
	}
	p.desiredHead, p.remoteHead, p.livenessHead = heads[desired], heads[status], heads[liveness]
	return proceed, nil
}

package agent

import (
	"context"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/schemas"
)

// poll reads the remote desired and status refs in one request.
func (p *pass) poll(ctx context.Context) (outcome, error) {
	a := p.agent
	desired := plumbing.ReferenceName(schemas.InstallRef(a.cfg.Install))
	status := plumbing.ReferenceName(schemas.StatusRef(a.cfg.Install))
	heads, err := a.cfg.Remote.Heads(ctx, desired, status)
	if err != nil {
		return proceed, fmt.Errorf("poll: %w", err)
	}
	p.desiredHead, p.remoteHead = heads[desired], heads[status]
	return proceed, nil
}

package agent

import (
	"context"
	"fmt"

	"nuon.dev/nuon/schemas"
)

// expiry turns the status Stale once the accepted desired commit is past
// its signed expiry, even when the ref never moves again (a frozen or
// withheld ref): one status commit when it turns, none on later polls.
func (p *pass) expiry(context.Context) (outcome, error) {
	st := &p.rec.Status
	if st.Expires == nil || st.Stale || p.agent.cfg.Now().Before(*st.Expires) {
		return proceed, nil
	}
	st.Stale = true
	p.log.Warn("desired state expired; keeping the applied state until a fresh one arrives", "commit", short(hashOf(st.Desired)), "expires", st.Expires)
	p.note("Stale: desired state %s expired at %s; keeping the applied state.", short(hashOf(st.Desired)), st.Expires.Format("2006-01-02T15:04:05Z07:00"))
	return proceed, nil
}

// fetch brings the desired commit into the local store, unless the ref did
// not move since the last reconcile and nothing is due.
func (p *pass) fetch(ctx context.Context) (outcome, error) {
	a := p.agent
	st := &p.rec.Status
	switch {
	case p.desiredHead.IsZero():
		p.log.Debug("no desired state rendered for this install yet")
		if p.rec.dirty {
			st.Phase = schemas.InstallReady
		}
		return settled, nil
	case st.Refusal != nil && st.Refusal.Commit == p.desiredHead.String():
		return settled, nil // already refused and recorded
	case st.Desired == p.desiredHead.String() && st.Refusal == nil && !p.due():
		return settled, nil
	}
	if d := st.Deferred; d != nil && d.Commit == p.desiredHead.String() && a.store.HasEncodedObject(p.desiredHead) == nil {
		return proceed, nil // fetched when it was deferred; only the customer's policy is asked again
	}
	if err := a.cfg.Remote.Fetch(ctx, a.store, p.desiredHead); err != nil {
		return proceed, fmt.Errorf("fetch %s: %w", short(p.desiredHead), err)
	}
	return proceed, nil
}

// due reports whether the status calls for work even though the desired
// ref did not move: a component failed or was interrupted (retried on the
// job retry schedule), or a recovery changed the record. Nothing is due
// while the desired state is stale.
func (p *pass) due() bool {
	if p.rec.Status.Stale {
		return false
	}
	if p.rec.dirty {
		return true
	}
	if p.rec.Status.Deferred != nil {
		return true // the customer's policy may allow it now
	}
	for _, cs := range p.rec.Status.Components {
		if cs.Phase == schemas.PhaseFailed || cs.Phase == schemas.PhasePending {
			return p.agent.cfg.Now().After(p.agent.retry.at)
		}
	}
	return false
}

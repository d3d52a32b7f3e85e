package agent

import (
	"context"
	"errors"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/schemas"
)

// verify runs Check on the desired commit against the applied state. A
// refusal or an expired commit is recorded in the status and ends the
// pass's work; nothing is applied.
func (p *pass) verify(context.Context) (outcome, error) {
	a := p.agent
	st := &p.rec.Status
	applied := Applied{Generation: st.Generation, Commit: hashOf(st.Desired)}
	d, err := Check(a.store, p.desiredHead, a.checks(applied))
	var ref *Refusal
	switch {
	case errors.As(err, &ref):
		p.log.Error("refusing desired state; nothing applied", "commit", short(p.desiredHead), "reason", ref.Reason)
		st.Refusal = &schemas.Refusal{Commit: p.desiredHead.String(), Reason: ref.Reason}
		st.Phase = schemas.InstallRefused
		p.note("Refused %s: %s", short(p.desiredHead), ref.Reason)
		return refused, nil
	case errors.Is(err, ErrStale):
		if err := a.keepRoot(d.Root); err != nil {
			return proceed, err
		}
		p.accept(d)
		if !st.Stale {
			st.Stale = true
			p.log.Warn("desired state is past its expiry; not applying it", "commit", short(d.Commit), "expires", d.Expires)
			p.note("Stale: desired state %s expired at %s; keeping the applied state.", short(d.Commit), d.Expires.Format("2006-01-02T15:04:05Z07:00"))
		}
		return stale, nil
	case err != nil:
		return proceed, err
	}
	if err := a.keepRoot(d.Root); err != nil {
		return proceed, err
	}
	p.accept(d)
	if st.Stale {
		st.Stale = false
		p.log.Info("fresh desired state; no longer stale", "commit", short(d.Commit))
		p.note("Fresh: desired state %s, no longer stale.", short(d.Commit))
	}
	p.desired = d
	return proceed, nil
}

// accept makes d the newest desired commit the status reports.
func (p *pass) accept(d *Desired) {
	st := &p.rec.Status
	if st.Desired != d.Commit.String() {
		p.log.Info("new desired state", "commit", short(d.Commit), "generation", d.Generation, "signer", d.Signer.Principal)
		p.rec.dirty = true
		// A forged status replaced earlier is history once new state
		// arrives.
		if p.replace.IsZero() {
			st.Forged = nil
		}
	}
	if st.Refusal != nil {
		p.log.Info("desired state accepted again", "commit", short(d.Commit))
		p.rec.dirty = true
		st.Refusal = nil
	}
	st.Desired = d.Commit.String()
	st.Generation = d.Generation
	var expires *time.Time
	if !d.Expires.IsZero() {
		e := d.Expires
		expires = &e
	}
	if !equalTime(st.Expires, expires) {
		p.rec.dirty = true
	}
	st.Expires = expires
}

func equalTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

func hashOf(s string) plumbing.Hash {
	if s == "" || !plumbing.IsHash(s) {
		return plumbing.ZeroHash
	}
	return plumbing.NewHash(s)
}

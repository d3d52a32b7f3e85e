package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/schemas"
)

// status reads what was applied from the local status ref, and checks the
// remote status ref whenever it holds a commit the local history lacks.
//
// A remote tip signed by this install's key that continues the local
// history (or any, for a fresh workdir) is adopted. Anything else is
// forged: it is logged, kept under ForgedRef, recorded in the status
// (Status.Forged), and the next status commit is a merge whose first
// parent is the agent's own last verified status and whose second parent
// is the forged tip, so the push is a fast-forward even on hosts that
// refuse force pushes and the forged commit stays in the ref's history. A
// fresh workdir continues from the install's own verified status behind
// the forged tip (see VerifyStatus), so the rollback check never trusts a
// generation the install did not sign.
func (p *pass) status(ctx context.Context) (outcome, error) {
	a := p.agent
	ref := plumbing.ReferenceName(schemas.StatusRef(a.cfg.Install))
	local, err := a.store.Reference(ref)
	switch {
	case err == nil:
		p.localHead = local.Hash()
	case errors.Is(err, plumbing.ErrReferenceNotFound):
	default:
		return proceed, fmt.Errorf("read local status: %w", err)
	}
	var forged *schemas.Forged
	if !p.remoteHead.IsZero() && (p.localHead.IsZero() || !isAncestor(a.store, p.remoteHead, p.localHead)) {
		if forged, err = p.checkRemote(ctx); err != nil {
			return proceed, err
		}
	}
	if p.localHead.IsZero() {
		p.rec = newRecord(a.cfg.Install)
		p.rec.dirty = true
	} else if p.rec, err = a.loadRecord(p.localHead); err != nil {
		return proceed, err
	}
	if forged != nil {
		p.rec.Status.Forged = forged
		p.note("Replaced forged status commit %s: %s.", short(p.replace), forged.Reason)
	}
	// Whether this agent verifies artifacts is part of its status; a
	// change is worth a commit of its own.
	if policy := a.artifactPolicy(); p.rec.Status.Artifacts != policy {
		p.rec.Status.Artifacts = policy
		p.rec.dirty = true
	}
	return proceed, nil
}

// checkRemote fetches the remote status tip and either adopts it (it is
// this install's own and continues the local history) or marks it for
// replacement and returns why.
func (p *pass) checkRemote(ctx context.Context) (*schemas.Forged, error) {
	a := p.agent
	ref := plumbing.ReferenceName(schemas.StatusRef(a.cfg.Install))
	if err := a.cfg.Remote.Fetch(ctx, a.store, p.remoteHead); err != nil {
		return nil, fmt.Errorf("fetch status: %w", err)
	}
	v, err := VerifyStatus(a.store, p.remoteHead, a.cfg.Install, a.cfg.Key.PublicKey())
	if err != nil {
		return nil, err
	}
	if v.Forged == nil {
		if p.localHead.IsZero() || isAncestor(a.store, p.localHead, p.remoteHead) {
			if err := a.store.SetReference(plumbing.NewHashReference(ref, p.remoteHead)); err != nil {
				return nil, fmt.Errorf("adopt the remote status: %w", err)
			}
			p.localHead = p.remoteHead
			p.log.Info("adopted the remote status", "commit", short(p.remoteHead), "generation", v.Generation)
			return nil, nil
		}
		v.Forged = &schemas.Forged{Commit: p.remoteHead.String(),
			Reason: "signed by this install's key but not a descendant of this agent's status history (another agent with this key?)"}
	}
	if err := a.store.SetReference(plumbing.NewHashReference(ForgedRef(a.cfg.Install, p.remoteHead), p.remoteHead)); err != nil {
		return nil, fmt.Errorf("keep the forged status: %w", err)
	}
	if p.localHead.IsZero() && !v.Commit.IsZero() {
		if err := a.store.SetReference(plumbing.NewHashReference(ref, v.Commit)); err != nil {
			return nil, fmt.Errorf("adopt the verified status: %w", err)
		}
		p.localHead = v.Commit
	}
	p.replace = p.remoteHead
	p.log.Error("the remote status ref holds a commit this install did not write; replacing it",
		"commit", short(p.remoteHead), "reason", v.Forged.Reason, "continue_from", short(p.localHead), "generation", v.Generation)
	return v.Forged, nil
}

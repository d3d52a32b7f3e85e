package agent

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// maxStatusWalk bounds how many commits of a status ref's history
// VerifyStatus examines when the tip is not the install's own: enough for
// years of status commits of one install, small enough that a crafted
// history cannot stall the agent (~0.5 ms per signature checked).
const maxStatusWalk = 1000

// forgedRefPrefix + install + "/" + commit keeps a replaced status commit
// reachable in the agent's own repository, for audit.
const forgedRefPrefix = "refs/nuon/forged/"

// ForgedRef is the local ref that keeps a replaced status commit.
func ForgedRef(install string, commit plumbing.Hash) plumbing.ReferenceName {
	return plumbing.ReferenceName(forgedRefPrefix + install + "/" + commit.String())
}

// ErrNotOwnStatus marks a status commit that is not signed by the
// install's own key or does not name the install.
var ErrNotOwnStatus = errors.New("not signed by this install's key")

// VerifiedStatus is what a status ref says once checked against the
// install's own key: the rollback baseline comes from it, never from a
// commit the install did not sign.
type VerifiedStatus struct {
	// Commit is the install's own status commit with the highest
	// generation found: the tip when the tip is its own, otherwise the
	// best within maxStatusWalk commits of it. Zero when there is none.
	Commit plumbing.Hash
	// Generation and Desired are what Commit reports (its trailers,
	// covered by its signature).
	Generation int64
	Desired    plumbing.Hash
	// Forged says why the tip is not the install's own; nil when it is.
	Forged *schemas.Forged
}

// Applied is the rollback baseline the verified status gives.
func (v *VerifiedStatus) Applied() Applied {
	return Applied{Commit: v.Desired, Generation: v.Generation}
}

// VerifyStatus checks the status commit tip against key, the install's own
// public key (the agent's --key, or the agentKey on main). When the tip is
// signed by it and names install, it is the verified status. Otherwise the
// tip is reported as forged and the history behind it is walked (every
// parent, at most maxStatusWalk commits) for the install's own commit with
// the highest generation. The objects must be in st; a missing one ends
// the walk along that line.
func VerifyStatus(st storer.EncodedObjectStorer, tip plumbing.Hash, install string, key ssh.PublicKey) (*VerifiedStatus, error) {
	trust := &signature.AllowedSigners{Signers: []signature.AllowedSigner{{Principals: []string{install}, Key: key}}}
	c, err := gitobj.ReadCommit(st, tip)
	if err != nil {
		return nil, fmt.Errorf("read status %s: %w", short(tip), err)
	}
	v := &VerifiedStatus{}
	if err := ownStatus(c, install, trust, v); err == nil {
		v.Commit = tip
		return v, nil
	} else {
		v.Forged = &schemas.Forged{Commit: tip.String(), Reason: err.Error()}
	}
	seen := map[plumbing.Hash]bool{tip: true}
	queue := append([]plumbing.Hash(nil), c.ParentHashes...)
	for n := 0; len(queue) > 0 && n < maxStatusWalk; n++ {
		h := queue[0]
		queue = queue[1:]
		if seen[h] {
			continue
		}
		seen[h] = true
		c, err := gitobj.ReadCommit(st, h)
		if err != nil {
			continue
		}
		var found VerifiedStatus
		if ownStatus(c, install, trust, &found) == nil && (v.Commit.IsZero() || found.Generation > v.Generation) {
			v.Commit, v.Generation, v.Desired = h, found.Generation, found.Desired
		}
		queue = append(queue, c.ParentHashes...)
	}
	return v, nil
}

// ownStatus checks that c is a status commit of install signed by trust
// and reads its generation and desired commit into v.
func ownStatus(c *object.Commit, install string, trust *signature.AllowedSigners, v *VerifiedStatus) error {
	if _, err := trust.VerifyCommit(c); err != nil {
		return fmt.Errorf("%w: %v", ErrNotOwnStatus, err)
	}
	if id, _ := schemas.Trailer(c.Message, schemas.TrailerInstall); id != install {
		return fmt.Errorf("%w: it names install %q", ErrNotOwnStatus, id)
	}
	gen, _ := schemas.Trailer(c.Message, schemas.TrailerGeneration)
	g, err := strconv.ParseInt(gen, 10, 64)
	if err != nil || g < 0 {
		return fmt.Errorf("%w: bad %s trailer %q", ErrNotOwnStatus, schemas.TrailerGeneration, gen)
	}
	v.Generation = g
	v.Desired = plumbing.ZeroHash
	if d, _ := schemas.Trailer(c.Message, schemas.TrailerDesired); d != "none" && plumbing.IsHash(d) {
		v.Desired = plumbing.NewHash(d)
	}
	return nil
}

// isAncestor reports whether anc is from or one of its ancestors, looking
// at most maxStatusWalk commits back.
func isAncestor(st storer.EncodedObjectStorer, anc, from plumbing.Hash) bool {
	if anc == from {
		return true
	}
	if st.HasEncodedObject(anc) != nil {
		return false
	}
	seen := map[plumbing.Hash]bool{}
	queue := []plumbing.Hash{from}
	for n := 0; len(queue) > 0 && n < maxStatusWalk; n++ {
		h := queue[0]
		queue = queue[1:]
		if h == anc {
			return true
		}
		if seen[h] {
			continue
		}
		seen[h] = true
		c, err := gitobj.ReadCommit(st, h)
		if err != nil {
			continue
		}
		queue = append(queue, c.ParentHashes...)
	}
	return false
}

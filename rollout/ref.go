package rollout

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// TrailerRollout names, on a rollout commit, the channel and the decision:
// "<channel> <rollout> <kind> <wave>".
const TrailerRollout = "Nuon-Rollout"

// TrailerRolloutRequest names, on a decision an operator asked for, the
// request commit and the key that signed it: "<commit> <key id>".
const TrailerRolloutRequest = "Nuon-Rollout-Request"

// maxStateSize bounds rollout.json: at 100,000 installs every id is listed
// once, with the pins of a superseded rollout's installs at most.
const maxStateSize = 64 << 20

// ErrUnsigned is the error of a rollout commit not signed by a trusted
// key (the tenant server's): nothing reads such a state.
var ErrUnsigned = errors.New("not signed by the tenant server's key")

// Commit writes s as a signed commit on top of parent (zero: the first)
// into b and returns it. The commit's message says the decision and its
// reason, so that the ref's log reads as the rollout's history.
func Commit(b *gitobj.Batch, parent plumbing.Hash, s *schemas.RolloutState, signer gitobj.Signer, who object.Signature) (plumbing.Hash, error) {
	data, err := EncodeState(s)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	blob := b.Add(plumbing.BlobObject, data)
	tree := b.Tree([]gitobj.Entry{{Name: schemas.RolloutStateFile, Mode: filemode.Regular, Hash: blob}})
	d := s.Decision
	var msg strings.Builder
	fmt.Fprintf(&msg, "nuon: rollout %s: %s", s.Channel, d.Kind)
	if d.Wave > 0 && d.Wave <= len(s.Waves) {
		fmt.Fprintf(&msg, " wave %d (%s)", d.Wave, s.Waves[d.Wave-1].Name)
	}
	fmt.Fprintf(&msg, "\n\n%s\n\nDecided by %s at %s.\n\n%s: %s %d %s %d\n", d.Reason, d.By, d.At.UTC().Format(time.RFC3339), TrailerRollout, s.Channel, s.Rollout, d.Kind, d.Wave)
	if s.Source != "" {
		fmt.Fprintf(&msg, "%s: %s\n", schemas.TrailerSource, s.Source)
	}
	if d.Request != nil {
		fmt.Fprintf(&msg, "%s: %s %s\n", TrailerRolloutRequest, d.Request.Commit, d.Request.Key)
	}
	var parents []plumbing.Hash
	if !parent.IsZero() {
		parents = append(parents, parent)
	}
	return b.Commit(gitobj.Commit{Tree: tree, Parents: parents, Author: who, Message: msg.String()}, signer)
}

// Read reads the rollout state of channel at commit tip of its rollout
// ref, after checking that a key of trust (the tenant server's) signed
// it. The error names the ref and the commit; a state not signed wraps
// ErrUnsigned.
func Read(st storer.EncodedObjectStorer, channel string, tip plumbing.Hash, trust *signature.AllowedSigners) (*schemas.RolloutState, error) {
	ref := schemas.RolloutRef(channel)
	c, err := gitobj.ReadCommit(st, tip)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	if trust == nil {
		return nil, fmt.Errorf("%s: commit %s: %w: no key is trusted", ref, tip, ErrUnsigned)
	}
	if _, err := trust.VerifyCommit(c); err != nil {
		return nil, fmt.Errorf("%s: commit %s: %w: %v", ref, tip, ErrUnsigned, err)
	}
	tree, err := gitobj.ReadTree(st, c.TreeHash)
	if err != nil {
		return nil, fmt.Errorf("%s: commit %s: %w", ref, tip, err)
	}
	e, err := tree.FindEntry(schemas.RolloutStateFile)
	if err != nil {
		return nil, fmt.Errorf("%s: commit %s: no %s", ref, tip, schemas.RolloutStateFile)
	}
	data, err := gitobj.ReadBlob(st, e.Hash, maxStateSize)
	if err != nil {
		return nil, fmt.Errorf("%s: commit %s: %w", ref, tip, err)
	}
	return ParseState(ref+":"+schemas.RolloutStateFile+" ("+tip.String()[:12]+")", channel, data)
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// The trailers of a key hand-over record (the server's handover.go reads
// them): the new key, and the key that signs the record and stops with it.
const (
	TrailerKeyHandover = "Nuon-Key-Handover"
	TrailerKeyRetired  = "Nuon-Key-Retired"
)

// Rotation hands an install's agent key over to a new one.
type Rotation struct {
	Install string
	Workdir string // the agent's workdir: its status history is in repo.git
	// Remote is signed with Old: the hand-over is the last thing Old
	// signs.
	Remote Remote
	Old    *signature.Signer
	New    *signature.Signer
	Now    func() time.Time
}

// ErrHandoverRefused is a hand-over the agent will not write: the remote
// status is not this install's, or the new key is the old one.
var ErrHandoverRefused = errors.New("key hand-over refused")

// RotateKey writes on the install's status ref, on top of the remote tip,
// a hand-over record signed by the old key that names the new key, then a
// first status commit signed by the new key (same tree: nothing else
// changes), and pushes both in one push. Once it returns, the server takes
// only the new key for this install; the caller must from then on run the
// agent with New. It returns the new status tip.
func RotateKey(ctx context.Context, r Rotation) (plumbing.Hash, error) {
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Old == nil || r.New == nil {
		return plumbing.ZeroHash, fmt.Errorf("%w: both the old and the new key are needed", ErrHandoverRefused)
	}
	if r.Old.AuthorizedKey() == r.New.AuthorizedKey() {
		return plumbing.ZeroHash, fmt.Errorf("%w: the new key is the old key", ErrHandoverRefused)
	}
	if r.New.PublicKey().Type() != ssh.KeyAlgoED25519 {
		return plumbing.ZeroHash, fmt.Errorf("%w: the new key is %s, want ed25519", ErrHandoverRefused, r.New.PublicKey().Type())
	}
	repoDir := filepath.Join(r.Workdir, "repo.git")
	repo, err := git.PlainOpen(repoDir)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		repo, err = git.PlainInit(repoDir, true)
	}
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("agent workdir repository: %w", err)
	}
	st := repo.Storer
	ref := plumbing.ReferenceName(schemas.StatusRef(r.Install))
	heads, err := r.Remote.Heads(ctx, ref)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("read the status ref: %w", err)
	}
	tip, ok := heads[ref]
	if !ok {
		return plumbing.ZeroHash, fmt.Errorf("%w: %s has no status yet; run the agent once first", ErrHandoverRefused, r.Install)
	}
	if err := r.Remote.Fetch(ctx, st, tip); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("fetch status: %w", err)
	}
	v, err := VerifyStatus(st, tip, r.Install, r.Old.PublicKey())
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if v.Forged != nil {
		return plumbing.ZeroHash, fmt.Errorf("%w: the status tip %s is not signed by the key being retired (%s); run the agent with its key first", ErrHandoverRefused, short(tip), v.Forged.Reason)
	}
	parent, err := gitobj.ReadCommit(st, tip)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	now := r.Now().UTC().Truncate(time.Second)
	who := object.Signature{Name: "nuon agent " + r.Install, Email: r.Install + "@agent.nuon.invalid", When: now}
	oldKey := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(r.Old.PublicKey())))
	newKey := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(r.New.PublicKey())))
	// Both commits carry the tip's generation, desired commit and phase:
	// the status does not change, only the key that signs it.
	var carried strings.Builder
	for _, name := range []string{schemas.TrailerGeneration, schemas.TrailerDesired, schemas.TrailerPhase} {
		if val, ok := schemas.Trailer(parent.Message, name); ok {
			fmt.Fprintf(&carried, "%s: %s\n", name, val)
		}
	}
	b := gitobj.NewBatch()
	hand, err := b.Commit(gitobj.Commit{Tree: parent.TreeHash, Parents: []plumbing.Hash{tip}, Author: who,
		Message: fmt.Sprintf("nuon: %s hands its agent key over to %s\n\n%s: %s\n%s%s: %s\n%s: %s\n",
			r.Install, ssh.FingerprintSHA256(r.New.PublicKey()),
			schemas.TrailerInstall, r.Install, carried.String(), TrailerKeyHandover, newKey, TrailerKeyRetired, oldKey)}, r.Old)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("hand-over commit: %w", err)
	}
	first, err := b.Commit(gitobj.Commit{Tree: parent.TreeHash, Parents: []plumbing.Hash{hand}, Author: who,
		Message: fmt.Sprintf("nuon: %s signs with %s\n\n%s: %s\n%s", r.Install, ssh.FingerprintSHA256(r.New.PublicKey()),
			schemas.TrailerInstall, r.Install, carried.String())}, r.New)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("first commit of the new key: %w", err)
	}
	if err := b.Flush(st); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("write hand-over: %w", err)
	}
	if err := r.Remote.Push(ctx, st, ref, tip, first); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("push the hand-over: %w", err)
	}
	if err := st.SetReference(plumbing.NewHashReference(ref, first)); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("move local status ref: %w", err)
	}
	return first, nil
}

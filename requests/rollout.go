package requests

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// A rollout request (nuon rollout pause|resume|abort) is signed like an
// install's request — a commit whose tree holds the request file alone,
// its path and SHA-256 pinned by trailers — but it is filed on no ref: the
// tenant server checks it and carries it out as a decision on the
// channel's rollout ref, which keeps the file and the raw commit.

// FileRollout builds the commit of rollout request r, without a parent,
// signed by s, in b, and returns it.
func FileRollout(b *gitobj.Batch, r *schemas.RolloutRequest, s gitobj.Signer) (plumbing.Hash, error) {
	if err := r.Validate(); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("rollout request: %w", err)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return plumbing.ZeroHash, err
	}
	data = append(data, '\n')
	path := schemas.RolloutRequestPath(r.Channel, r.ID)
	tree := rolloutTree(b, r.Channel, r.ID+".json", data)
	sum := sha256.Sum256(data)
	reason := r.Reason
	if reason == "" {
		reason = "no reason given"
	}
	msg := fmt.Sprintf("nuon: request %s: %s the rollout of %s\n\n%s\n\nAsked by %s, carry out by %s.\n\n%s: %s\n%s: sha256:%s\n",
		r.ID, r.Action, r.Channel, reason, r.Requester, r.Deadline.UTC().Format(time.RFC3339),
		TrailerRequest, path, TrailerDigest, hex.EncodeToString(sum[:]))
	who := object.Signature{Name: r.Requester, Email: r.Requester + "@operator.nuon.invalid", When: r.Created.UTC()}
	return b.Commit(gitobj.Commit{Tree: tree, Author: who, Message: msg}, s)
}

func rolloutTree(b *gitobj.Batch, channel, name string, data []byte) plumbing.Hash {
	blob := b.Add(plumbing.BlobObject, data)
	h := b.Tree([]gitobj.Entry{{Name: name, Mode: filemode.Regular, Hash: blob}})
	h = b.Tree([]gitobj.Entry{{Name: channel, Mode: filemode.Dir, Hash: h}})
	return b.Tree([]gitobj.Entry{{Name: schemas.RolloutRequestsDir, Mode: filemode.Dir, Hash: h}})
}

// VerifyRollout checks a signed rollout request: a commit with no parent
// whose tree is the request file alone at the path its trailer names
// (rollouts/<channel>/<id>.json), signed by a key of trust, whose
// trailers pin the file's SHA-256, and whose requester is the signing
// key's principal. It returns the request and the commit's hash. It does
// not judge the deadline or the channel.
func VerifyRollout(s schemas.SignedRequest, trust *signature.AllowedSigners) (*schemas.RolloutRequest, plumbing.Hash, error) {
	if trust == nil {
		return nil, plumbing.ZeroHash, fmt.Errorf("%w: no keys are trusted for requests", ErrUntrusted)
	}
	if len(s.File) > maxFile {
		return nil, plumbing.ZeroHash, fmt.Errorf("%w: the file is %d bytes, more than %d", schemas.ErrInvalidRequest, len(s.File), maxFile)
	}
	var raw plumbing.MemoryObject
	raw.SetType(plumbing.CommitObject)
	if _, err := raw.Write([]byte(s.Commit)); err != nil {
		return nil, plumbing.ZeroHash, err
	}
	var c object.Commit
	if err := c.Decode(&raw); err != nil {
		return nil, plumbing.ZeroHash, fmt.Errorf("%w: commit: %v", schemas.ErrInvalidRequest, err)
	}
	if len(c.ParentHashes) != 0 {
		return nil, plumbing.ZeroHash, fmt.Errorf("%w: a rollout request's commit has no parent, this one has %d", schemas.ErrInvalidRequest, len(c.ParentHashes))
	}
	path, _ := schemas.Trailer(c.Message, TrailerRequest)
	parts := strings.Split(path, "/")
	if len(parts) != 3 || parts[0] != schemas.RolloutRequestsDir || parts[1] == "" || parts[2] == "" {
		return nil, plumbing.ZeroHash, fmt.Errorf("%w: %s %q is not %s/<channel>/<id>.json", schemas.ErrInvalidRequest, TrailerRequest, path, schemas.RolloutRequestsDir)
	}
	if tree := rolloutTree(gitobj.NewBatch(), parts[1], parts[2], []byte(s.File)); tree != c.TreeHash {
		return nil, plumbing.ZeroHash, fmt.Errorf("%w: the commit's tree %s is not the tree of %s alone", schemas.ErrInvalidRequest, c.TreeHash, path)
	}
	v, err := trust.VerifyCommit(&c)
	if err != nil {
		return nil, plumbing.ZeroHash, fmt.Errorf("%w: %w", ErrUntrusted, err)
	}
	digest, _ := schemas.Trailer(c.Message, TrailerDigest)
	sum := sha256.Sum256([]byte(s.File))
	if want := "sha256:" + hex.EncodeToString(sum[:]); digest != want {
		return nil, plumbing.ZeroHash, fmt.Errorf("%w: the file's digest %s is not the signed %s %q", ErrUntrusted, want, TrailerDigest, digest)
	}
	r, err := schemas.DecodeRolloutRequest(path, []byte(s.File))
	if err != nil {
		return nil, plumbing.ZeroHash, err
	}
	if r.Requester != v.Principal {
		return nil, plumbing.ZeroHash, fmt.Errorf("%w: requester %q but signed by %q", ErrUntrusted, r.Requester, v.Principal)
	}
	return r, plumbing.ComputeHash(plumbing.CommitObject, []byte(s.Commit)), nil
}

// RolloutPath is where the tenant server takes rollout requests: POST a
// schemas.SignedRequest as JSON, signed over HTTP by the same key.
const RolloutPath = ServerPath + "/rollouts"

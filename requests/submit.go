package requests

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/schemas"
)

// MaxSubmission bounds a submitted request (its file and raw commit, as
// JSON): a request file is at most 64 KiB and its commit a few KiB.
const MaxSubmission = 256 << 10

// KeyID is the key id an operator's key signs HTTP requests to the tenant
// server under (package internal/signature/request): "op" and 40 hex
// digits of the SHA-256 of the public key. It names the key, not the
// person, so it is a valid key id whatever the principal in TrustFile,
// and the server finds the key by it without a second table.
func KeyID(pub ssh.PublicKey) string {
	sum := sha256.Sum256(pub.Marshal())
	return "op" + hex.EncodeToString(sum[:20])
}

// Objects are the git objects of one submitted request: what the tenant
// server writes before it moves Ref to Commit.
type Objects struct {
	// Batch holds the blob, the three trees and the commit, byte for
	// byte as the operator made them.
	Batch *gitobj.Batch
	// Commit is the filing commit; Parent its only parent, zero for the
	// first request on Ref.
	Commit, Parent plumbing.Hash
	// Path is the request file's path in the commit's tree.
	Path string
}

// Rebuild checks that s is a commit as File makes it — a tree holding
// exactly s.File at the path its Nuon-Request trailer names, and at most
// one parent — and returns its objects. It checks no signature: Verify
// does.
func Rebuild(s schemas.SignedRequest) (*Objects, error) {
	var raw plumbing.MemoryObject
	raw.SetType(plumbing.CommitObject)
	if _, err := raw.Write([]byte(s.Commit)); err != nil {
		return nil, err
	}
	var c object.Commit
	if err := c.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: commit: %v", schemas.ErrInvalidRequest, err)
	}
	if len(c.ParentHashes) > 1 {
		return nil, fmt.Errorf("%w: the commit has %d parents, want at most one", schemas.ErrInvalidRequest, len(c.ParentHashes))
	}
	path, ok := schemas.Trailer(c.Message, TrailerRequest)
	if !ok {
		return nil, fmt.Errorf("%w: no %s trailer", schemas.ErrInvalidRequest, TrailerRequest)
	}
	parts := strings.Split(path, "/")
	if len(parts) != 3 || parts[0] != schemas.RequestsDir || parts[1] == "" || parts[2] == "" {
		return nil, fmt.Errorf("%w: %s %q is not %s/<install>/<id>.json", schemas.ErrInvalidRequest, TrailerRequest, path, schemas.RequestsDir)
	}
	if len(s.File) > maxFile {
		return nil, fmt.Errorf("%w: the file is %d bytes, more than %d", schemas.ErrInvalidRequest, len(s.File), maxFile)
	}
	b := gitobj.NewBatch()
	blob := b.Add(plumbing.BlobObject, []byte(s.File))
	h := b.Tree([]gitobj.Entry{{Name: parts[2], Mode: filemode.Regular, Hash: blob}})
	h = b.Tree([]gitobj.Entry{{Name: parts[1], Mode: filemode.Dir, Hash: h}})
	h = b.Tree([]gitobj.Entry{{Name: parts[0], Mode: filemode.Dir, Hash: h}})
	if h != c.TreeHash {
		return nil, fmt.Errorf("%w: the commit's tree %s is not the tree of %s alone", schemas.ErrInvalidRequest, c.TreeHash, path)
	}
	o := &Objects{Batch: b, Commit: b.Add(plumbing.CommitObject, []byte(s.Commit)), Path: path}
	if len(c.ParentHashes) == 1 {
		o.Parent = c.ParentHashes[0]
	}
	return o, nil
}

// ErrFiled marks a request whose id is already filed for its install: a
// replay, or the same request sent twice.
var ErrFiled = errors.New("request already filed")

// FiledAt reports whether a request file at path (requests/<install>/<id>.json)
// is among the MaxWalk newest commits of Ref's first-parent history from
// head, by the Nuon-Request trailer alone (no signature is checked: the
// question is only whether the id is taken).
func FiledAt(st storer.EncodedObjectStorer, head plumbing.Hash, path string) (bool, error) {
	for h, n := head, 0; !h.IsZero() && n < MaxWalk; n++ {
		c, err := gitobj.ReadCommit(st, h)
		if err != nil {
			return false, fmt.Errorf("read %s %s: %w", Ref, h, err)
		}
		if p, _ := schemas.Trailer(c.Message, TrailerRequest); p == path {
			return true, nil
		}
		h = plumbing.ZeroHash
		if len(c.ParentHashes) > 0 {
			h = c.ParentHashes[0]
		}
	}
	return false, nil
}

// ServerPath is where a tenant server (nuon server) answers operators:
// git smart HTTP of its branches, read-only, under ServerPath, and POST
// ServerPath/requests to file a request (a schemas.SignedRequest as JSON).
// See package server.
const ServerPath = "/operator"

// Submission is the request commit h in st as an operator sends it to the
// tenant server: its file and its raw commit.
func Submission(st storer.EncodedObjectStorer, h plumbing.Hash) (schemas.SignedRequest, error) {
	c, err := gitobj.ReadCommit(st, h)
	if err != nil {
		return schemas.SignedRequest{}, err
	}
	return readOne(st, c)
}

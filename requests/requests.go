package requests

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
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

// Ref is the ref requests are filed on.
const Ref = "refs/heads/nuon/requests"

// TrustFile is the allowed_signers file on main that lists the operator
// keys trusted for requests.
const TrustFile = "trust/requests"

// Trailers of a request commit.
const (
	TrailerRequest = "Nuon-Request"
	TrailerDigest  = "Nuon-Request-Digest"
)

// MaxWalk bounds how many commits of Ref Read looks at.
const MaxWalk = 1000

// maxFile bounds a request file.
const maxFile = 64 << 10

// ErrUntrusted marks a request that is not signed by a key trusted for
// requests, or whose signer is not its requester: dropped, never run.
var ErrUntrusted = errors.New("request not signed by a trusted operator key")

// Verify checks a signed request: the raw commit is signed by a key in
// trust, its trailers pin the file's path and SHA-256, the file is a valid
// request, and its requester is the signing key's principal. It does not
// judge the deadline or the install (see Check).
func Verify(s schemas.SignedRequest, trust *signature.AllowedSigners) (*schemas.Request, error) {
	if trust == nil {
		return nil, fmt.Errorf("%w: no keys are trusted for requests", ErrUntrusted)
	}
	var raw plumbing.MemoryObject
	raw.SetType(plumbing.CommitObject)
	if _, err := raw.Write([]byte(s.Commit)); err != nil {
		return nil, err
	}
	var c object.Commit
	if err := c.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: commit: %v", schemas.ErrInvalidRequest, err)
	}
	v, err := trust.VerifyCommit(&c)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUntrusted, err)
	}
	path, _ := schemas.Trailer(c.Message, TrailerRequest)
	digest, _ := schemas.Trailer(c.Message, TrailerDigest)
	sum := sha256.Sum256([]byte(s.File))
	if want := "sha256:" + hex.EncodeToString(sum[:]); digest != want {
		return nil, fmt.Errorf("%w: the file's digest %s is not the signed %s %q", ErrUntrusted, want, TrailerDigest, digest)
	}
	r, err := schemas.DecodeRequest(path, []byte(s.File))
	if err != nil {
		return nil, err
	}
	if r.Requester != v.Principal {
		return nil, fmt.Errorf("%w: requester %q but signed by %q", ErrUntrusted, r.Requester, v.Principal)
	}
	return r, nil
}

// Filed is one request found on Ref.
type Filed struct {
	Commit  plumbing.Hash
	Signed  schemas.SignedRequest
	Request *schemas.Request
	// Err says why the request is dropped: it does not verify. A dropped
	// request whose file could be read still has Request, for listing.
	Err error
}

// Read walks Ref's first-parent history from head (at most MaxWalk
// commits) and returns every request filed there, newest first, each
// verified against trust. A request id filed twice for the same install
// keeps its newest filing only.
func Read(st storer.EncodedObjectStorer, head plumbing.Hash, trust *signature.AllowedSigners) ([]Filed, error) {
	var out []Filed
	seen := map[string]bool{}
	for h, n := head, 0; !h.IsZero() && n < MaxWalk; n++ {
		c, err := gitobj.ReadCommit(st, h)
		if err != nil {
			return out, fmt.Errorf("read %s %s: %w", Ref, h, err)
		}
		f := Filed{Commit: h}
		f.Signed, f.Err = readOne(st, c)
		if f.Err == nil {
			f.Request, f.Err = Verify(f.Signed, trust)
		}
		if f.Err != nil {
			if r, err := loose(st, c); err == nil {
				f.Request = r
			}
		}
		key := ""
		if f.Request != nil {
			key = f.Request.Install + "/" + f.Request.ID
		}
		if key == "" || !seen[key] {
			seen[key] = key != ""
			out = append(out, f)
		}
		h = plumbing.ZeroHash
		if len(c.ParentHashes) > 0 {
			h = c.ParentHashes[0]
		}
	}
	return out, nil
}

// readOne reads the signed request of commit c.
func readOne(st storer.EncodedObjectStorer, c *object.Commit) (schemas.SignedRequest, error) {
	var s schemas.SignedRequest
	path, ok := schemas.Trailer(c.Message, TrailerRequest)
	if !ok {
		return s, fmt.Errorf("%w: no %s trailer", schemas.ErrInvalidRequest, TrailerRequest)
	}
	data, err := fileAt(st, c, path)
	if err != nil {
		return s, err
	}
	obj, _, err := gitobj.ReadObject(st, plumbing.CommitObject, c.Hash, 0)
	if err != nil {
		return s, err
	}
	rd, err := obj.Reader()
	if err != nil {
		return s, err
	}
	defer rd.Close()
	raw, err := io.ReadAll(rd)
	if err != nil {
		return s, err
	}
	return schemas.SignedRequest{File: string(data), Commit: string(raw)}, nil
}

// loose decodes c's request without checking its signature, to list a
// dropped one.
func loose(st storer.EncodedObjectStorer, c *object.Commit) (*schemas.Request, error) {
	path, _ := schemas.Trailer(c.Message, TrailerRequest)
	data, err := fileAt(st, c, path)
	if err != nil {
		return nil, err
	}
	return schemas.DecodeRequest(path, data)
}

func fileAt(st storer.EncodedObjectStorer, c *object.Commit, path string) ([]byte, error) {
	tree, err := gitobj.ReadTree(st, c.TreeHash)
	if err != nil {
		return nil, err
	}
	e, err := tree.FindEntry(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", schemas.ErrInvalidRequest, path, err)
	}
	return gitobj.ReadBlob(st, e.Hash, maxFile)
}

// Pending groups the verified requests of filed that are not past their
// deadline at now by install, each install's sorted by id: what the
// renderer puts into installs/<id>/requests.json.
func Pending(filed []Filed, now time.Time) map[string][]schemas.SignedRequest {
	type entry struct {
		id string
		s  schemas.SignedRequest
	}
	by := map[string][]entry{}
	for _, f := range filed {
		if f.Err != nil || f.Request.Expired(now) {
			continue
		}
		by[f.Request.Install] = append(by[f.Request.Install], entry{f.Request.ID, f.Signed})
	}
	out := map[string][]schemas.SignedRequest{}
	for id, es := range by {
		slices.SortFunc(es, func(a, b entry) int { return strings.Compare(a.id, b.id) })
		for _, e := range es {
			out[id] = append(out[id], e.s)
		}
	}
	return out
}

// Encode is an install's requests.json.
func Encode(rs []schemas.SignedRequest) ([]byte, error) {
	data, err := json.MarshalIndent(schemas.InstallRequests{APIVersion: schemas.APIVersion, Kind: schemas.KindInstallRequests, Requests: rs}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// File builds the commit that files r on top of parent (zero for the
// first request), signed by s, in b. It returns the commit.
func File(b *gitobj.Batch, r *schemas.Request, parent plumbing.Hash, s gitobj.Signer) (plumbing.Hash, error) {
	if err := r.Validate(); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("file request: %w", err)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return plumbing.ZeroHash, err
	}
	data = append(data, '\n')
	path := schemas.RequestPath(r.Install, r.ID)
	blob := b.Add(plumbing.BlobObject, data)
	parts := strings.Split(path, "/")
	h := b.Tree([]gitobj.Entry{{Name: parts[2], Mode: filemode.Regular, Hash: blob}})
	h = b.Tree([]gitobj.Entry{{Name: parts[1], Mode: filemode.Dir, Hash: h}})
	h = b.Tree([]gitobj.Entry{{Name: parts[0], Mode: filemode.Dir, Hash: h}})
	sum := sha256.Sum256(data)
	what := r.Type
	if r.Type == schemas.RequestDebug {
		what += " " + strings.Join(r.Command, " ")
	} else if r.Component != "" {
		what += " of " + r.Component
	}
	msg := fmt.Sprintf("nuon: request %s to %s: %s\n\nAsked by %s, answer by %s.\n\n%s: %s\n%s: sha256:%s\n",
		r.ID, r.Install, what, r.Requester, r.Deadline.UTC().Format(time.RFC3339),
		TrailerRequest, path, TrailerDigest, hex.EncodeToString(sum[:]))
	var parents []plumbing.Hash
	if !parent.IsZero() {
		parents = append(parents, parent)
	}
	who := object.Signature{Name: r.Requester, Email: r.Requester + "@operator.nuon.invalid", When: r.Created.UTC()}
	return b.Commit(gitobj.Commit{Tree: h, Parents: parents, Author: who, Message: msg}, s)
}

// Check judges a verified request for install at now: nil when it may
// run, otherwise the reason it is refused.
func Check(r *schemas.Request, install string, now time.Time) error {
	switch {
	case r.Install != install:
		return fmt.Errorf("the request is for install %q, not %q", r.Install, install)
	case r.Expired(now):
		return fmt.Errorf("expired: its deadline %s has passed", r.Deadline.UTC().Format(time.RFC3339))
	}
	return nil
}

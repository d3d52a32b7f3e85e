package buildreq

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// Record is one state of a build request as its queue ref
// (schemas.BuildRef) holds it: the signed request exactly as vendor CI
// filed it, and the state the server gave it. The queue ref's history is
// the request's history: filed, taken by an agent with a lease, queued
// again when the lease expired, succeeded or failed.
type Record struct {
	Request schemas.SignedBuildRequest
	Status  schemas.BuildStatus
}

// ErrUnsigned marks a queue ref whose tip the server's key did not sign:
// the server does not act on it.
var ErrUnsigned = errors.New("build queue commit not signed by the tenant server")

// TrailerBuildRequest names, in a queue commit and in the release commit
// on main, the build request it belongs to.
const TrailerBuildRequest = "Nuon-Build-Request"

// maxRecordFile bounds request.json and state.json read from a queue ref.
const maxRecordFile = 2*schemas.MaxBuildRequest + 1<<20

// CommitRecord writes rec as a commit on top of parent (zero: the first)
// signed by signer, with a subject saying what changed.
func CommitRecord(b *gitobj.Batch, parent plumbing.Hash, rec Record, signer gitobj.Signer, who object.Signature, subject string) (plumbing.Hash, error) {
	sub, err := json.Marshal(rec.Request)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	st, err := json.MarshalIndent(rec.Status, "", "  ")
	if err != nil {
		return plumbing.ZeroHash, err
	}
	tree := b.Tree([]gitobj.Entry{
		{Name: schemas.BuildRequestFile, Mode: filemode.Regular, Hash: b.Add(plumbing.BlobObject, append(sub, '\n'))},
		{Name: schemas.BuildStateFile, Mode: filemode.Regular, Hash: b.Add(plumbing.BlobObject, append(st, '\n'))},
	})
	var msg strings.Builder
	fmt.Fprintf(&msg, "nuon: build %s: %s\n\n", rec.Status.ID, subject)
	if rec.Status.Error != "" {
		fmt.Fprintf(&msg, "%s\n\n", rec.Status.Error)
	}
	fmt.Fprintf(&msg, "%s: %s\n", TrailerBuildRequest, rec.Status.ID)
	var parents []plumbing.Hash
	if !parent.IsZero() {
		parents = append(parents, parent)
	}
	return b.Commit(gitobj.Commit{Tree: tree, Parents: parents, Author: who, Message: msg.String()}, signer)
}

// ReadRecord reads the record at tip of build request id's queue ref,
// after checking that a key of trust (the tenant server's) signed it.
func ReadRecord(st storer.EncodedObjectStorer, id string, tip plumbing.Hash, trust *signature.AllowedSigners) (*Record, error) {
	ref := schemas.BuildRef(id)
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
	return readRecord(st, id, tip, c)
}

// ReadMirrored reads the record at tip without checking who signed it:
// for a read replica, whose whole repository is a copy of its writer's,
// fetched over the replica token, and which holds no server key to check
// with. It decides nothing on what it reads; it only shows it.
func ReadMirrored(st storer.EncodedObjectStorer, id string, tip plumbing.Hash) (*Record, error) {
	c, err := gitobj.ReadCommit(st, tip)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", schemas.BuildRef(id), err)
	}
	return readRecord(st, id, tip, c)
}

func readRecord(st storer.EncodedObjectStorer, id string, tip plumbing.Hash, c *object.Commit) (*Record, error) {
	ref := schemas.BuildRef(id)
	tree, err := gitobj.ReadTree(st, c.TreeHash)
	if err != nil {
		return nil, fmt.Errorf("%s: commit %s: %w", ref, tip, err)
	}
	var files [2][]byte
	for i, name := range []string{schemas.BuildRequestFile, schemas.BuildStateFile} {
		e, err := tree.FindEntry(name)
		if err != nil {
			return nil, fmt.Errorf("%s: commit %s: no %s", ref, tip, name)
		}
		if files[i], err = gitobj.ReadBlob(st, e.Hash, maxRecordFile); err != nil {
			return nil, fmt.Errorf("%s: commit %s: %s: %w", ref, tip, name, err)
		}
	}
	rec, err := ParseRecord(id, files[0], files[1])
	if err != nil {
		return nil, fmt.Errorf("%s: commit %s: %w", ref, tip, err)
	}
	return rec, nil
}

// ParseRecord decodes a queue commit's request.json and state.json and
// checks that both are of request id: strict JSON, the request well
// formed, the state one of the known ones.
func ParseRecord(id string, request, state []byte) (*Record, error) {
	var rec Record
	if err := strictJSON(request, &rec.Request); err != nil {
		return nil, fmt.Errorf("%s: %w", schemas.BuildRequestFile, err)
	}
	var r schemas.BuildRequest
	if err := strictJSON(rec.Request.Request, &r); err != nil {
		return nil, fmt.Errorf("%s: request: %w", schemas.BuildRequestFile, err)
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", schemas.BuildRequestFile, err)
	}
	if err := strictJSON(state, &rec.Status); err != nil {
		return nil, fmt.Errorf("%s: %w", schemas.BuildStateFile, err)
	}
	s := rec.Status
	switch {
	case r.ID != id || s.ID != id:
		return nil, fmt.Errorf("the record is of build request %q (state %q), not %q", r.ID, s.ID, id)
	case s.Component != r.Component || s.Commit != r.Commit || s.Version != r.Version || s.Requester != r.Requester:
		return nil, fmt.Errorf("%s does not match %s", schemas.BuildStateFile, schemas.BuildRequestFile)
	case s.Attempt < 0 || s.Attempt > schemas.MaxBuildAttempts:
		return nil, fmt.Errorf("%s: attempt %d out of 0..%d", schemas.BuildStateFile, s.Attempt, schemas.MaxBuildAttempts)
	}
	switch s.State {
	case schemas.BuildQueued, schemas.BuildSucceeded, schemas.BuildFailed:
	case schemas.BuildRunning:
		if s.Agent == "" || s.LeaseUntil == nil || s.LeaseSeconds <= 0 {
			return nil, fmt.Errorf("%s: building without an agent and a lease", schemas.BuildStateFile)
		}
	default:
		return nil, fmt.Errorf("%s: unknown state %q", schemas.BuildStateFile, s.State)
	}
	return &rec, nil
}

func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

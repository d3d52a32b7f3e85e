package server

import (
	"errors"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// maxNewCommits bounds how many new commits one push may bring.
const maxNewCommits = 10000

// ErrRefused is a status push the server refuses: the client is told why,
// and nothing is written.
var ErrRefused = errors.New("push refused")

// checkPush is the check every status push passes before anything is
// written: the command moves the install's status ref, and every new
// commit (from new back to old, one parent each) is signed by the
// install's key, names the install in its Nuon-Install trailer, and has
// every object it names pushed or in the install's closure. q holds the
// pushed objects; what it reads beyond them comes through a
// closureSource.
func checkPush(q *quarantine, key ssh.PublicKey, install string, c pushCommand) error {
	if c.ref != schemas.StatusRef(install) {
		return fmt.Errorf("%w: %s: an install may push only its own status ref", ErrRefused, c.ref)
	}
	if c.new.IsZero() {
		return fmt.Errorf("%w: %s: deleting is not allowed", ErrRefused, c.ref)
	}
	trust := &signature.AllowedSigners{Signers: []signature.AllowedSigner{{Principals: []string{install}, Key: key}}}
	commits, err := checkChain(q, trust, install, c)
	if err != nil {
		return err
	}
	if err := q.connected(commits); err != nil {
		return fmt.Errorf("%w: %v", ErrRefused, err)
	}
	return nil
}

// checkChain walks from c.new back to c.old; every commit on the way must
// be signed by the install and have one parent (the first may have none
// when the ref is new). It returns the pushed commits on the way.
func checkChain(q *quarantine, trust *signature.AllowedSigners, install string, c pushCommand) ([]*object.Commit, error) {
	var pushed []*object.Commit
	h := c.new
	for n := 0; h != c.old; n++ {
		if n == maxNewCommits {
			return nil, fmt.Errorf("%w: more than %d new commits", ErrRefused, maxNewCommits)
		}
		commit, err := q.commit(h)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrRefused, h, err)
		}
		if _, err := trust.VerifyCommit(commit); err != nil {
			return nil, fmt.Errorf("%w: commit %s: %v", ErrRefused, h, err)
		}
		if v, _ := schemas.Trailer(commit.Message, schemas.TrailerInstall); v != install {
			return nil, fmt.Errorf("%w: commit %s: %s trailer is %q, not %q", ErrRefused, h, schemas.TrailerInstall, v, install)
		}
		if q.HasEncodedObject(h) == nil {
			pushed = append(pushed, commit)
		}
		switch len(commit.ParentHashes) {
		case 0:
			if !c.old.IsZero() {
				return nil, fmt.Errorf("%w: %s: not a fast-forward of %s", ErrRefused, c.ref, c.old)
			}
			return pushed, nil
		case 1:
			h = commit.ParentHashes[0]
		default:
			return nil, fmt.Errorf("%w: commit %s: a status commit has one parent", ErrRefused, h)
		}
	}
	return pushed, nil
}

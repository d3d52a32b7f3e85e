package gitobj

import (
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Signer signs a commit's encoding without its signature and returns the
// armored signature for git's gpgsig header. *signature.Signer is one.
type Signer interface {
	Sign(message io.Reader) ([]byte, error)
}

// Commit is what a commit says besides its signature.
type Commit struct {
	Tree    plumbing.Hash
	Parents []plumbing.Hash
	// Author is also the committer.
	Author  object.Signature
	Message string
}

// Commit encodes c, signs it with s (unless s is nil) and adds it to the
// batch. It is the one way nuon writes a commit: the renderer's, the
// agent's status, and release records.
func (b *Batch) Commit(c Commit, s Signer) (plumbing.Hash, error) {
	oc := &object.Commit{Author: c.Author, Committer: c.Author, Message: c.Message, TreeHash: c.Tree, ParentHashes: c.Parents}
	if s != nil {
		if err := Sign(oc, s); err != nil {
			return plumbing.ZeroHash, err
		}
	}
	var enc plumbing.MemoryObject
	if err := oc.Encode(&enc); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("encode commit: %w", err)
	}
	return b.AddEncoded(&enc)
}

// Sign signs c in place: it sets c.PGPSignature (git's gpgsig header) to
// s's signature of c encoded without a signature.
func Sign(c *object.Commit, s Signer) error {
	c.PGPSignature = ""
	var unsigned plumbing.MemoryObject
	if err := c.EncodeWithoutSignature(&unsigned); err != nil {
		return fmt.Errorf("encode commit: %w", err)
	}
	r, err := unsigned.Reader()
	if err != nil {
		return err
	}
	sig, err := s.Sign(r)
	if err != nil {
		return fmt.Errorf("sign commit: %w", err)
	}
	c.PGPSignature = string(sig)
	return nil
}

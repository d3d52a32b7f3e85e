package signature

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/hiddeco/sshsig"
)

// Reasons a verification fails. They are final: retrying will not help.
var (
	// ErrUnsigned means the commit carries no signature.
	ErrUnsigned = errors.New("commit is not signed")
	// ErrUntrusted means the signing key is not in the allowed signers.
	ErrUntrusted = errors.New("signed by a key that is not trusted")
	// ErrInvalid means the signature does not match the content: the
	// commit or the signature was changed after signing.
	ErrInvalid = errors.New("signature does not match the commit")
)

// Verified is the outcome of a good verification.
type Verified struct {
	// Principal is the first principal of the allowed signer.
	Principal string
	// Fingerprint is the SHA256 fingerprint of the signing key.
	Fingerprint string
}

// Verify checks an armored SSH signature over message in the git namespace
// against the allowed signers.
func (as *AllowedSigners) Verify(message []byte, armored []byte) (Verified, error) {
	sig, err := sshsig.Unarmor(armored)
	if err != nil {
		return Verified{}, fmt.Errorf("%w: malformed SSH signature: %v", ErrInvalid, err)
	}
	s, ok := as.match(sig.PublicKey, Namespace)
	if !ok {
		return Verified{}, fmt.Errorf("%w: %s", ErrUntrusted, fingerprint(sig.PublicKey))
	}
	if err := sshsig.Verify(bytes.NewReader(message), sig, s.Key, sig.HashAlgorithm, Namespace); err != nil {
		return Verified{}, fmt.Errorf("%w (key %s): %v", ErrInvalid, fingerprint(sig.PublicKey), err)
	}
	v := Verified{Fingerprint: fingerprint(s.Key)}
	if len(s.Principals) > 0 {
		v.Principal = s.Principals[0]
	}
	return v, nil
}

// VerifyCommit checks the SSH signature of a commit read from a repository,
// over its raw encoding without the signature header, as git does.
func (as *AllowedSigners) VerifyCommit(c *object.Commit) (Verified, error) {
	if c.PGPSignature == "" {
		return Verified{}, ErrUnsigned
	}
	if !bytes.HasPrefix([]byte(c.PGPSignature), []byte("-----BEGIN SSH SIGNATURE-----")) {
		return Verified{}, fmt.Errorf("%w: not an SSH signature", ErrInvalid)
	}
	var o plumbing.MemoryObject
	if err := c.EncodeWithoutSignature(&o); err != nil {
		return Verified{}, fmt.Errorf("encode commit %s: %w", c.Hash, err)
	}
	r, err := o.Reader()
	if err != nil {
		return Verified{}, err
	}
	msg, err := io.ReadAll(r)
	if err != nil {
		return Verified{}, err
	}
	return as.Verify(msg, []byte(c.PGPSignature))
}

package signature

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// Namespace is the SSH signature namespace git uses for commits.
const Namespace = "git"

// Signer signs messages with one SSH key.
type Signer struct {
	key ssh.Signer
}

// LoadSigner reads an unencrypted OpenSSH private key (as `ssh-keygen -t
// ed25519 -N ""` writes it, or `nuon keygen`).
func LoadSigner(path string) (*Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read signing key: %w", err)
	}
	s, err := ParseSigner(b)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	return s, nil
}

// ParseSigner parses an unencrypted OpenSSH private key.
func ParseSigner(pem []byte) (*Signer, error) {
	k, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		return nil, err
	}
	return &Signer{key: k}, nil
}

// PublicKey is the signer's public key.
func (s *Signer) PublicKey() ssh.PublicKey { return s.key.PublicKey() }

// AuthorizedKey is the public key in authorized_keys form, without a newline.
func (s *Signer) AuthorizedKey() string {
	return string(bytes.TrimSpace(ssh.MarshalAuthorizedKey(s.key.PublicKey())))
}

// Sign returns the armored SSH signature of message in the git namespace.
// It has the signature of go-git's Signer interface.
func (s *Signer) Sign(message io.Reader) ([]byte, error) {
	sig, err := sshsig.Sign(message, s.key, sshsig.HashSHA512, Namespace)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	return sshsig.Armor(sig), nil
}

var _ interface {
	Sign(io.Reader) ([]byte, error)
} = (*Signer)(nil)

// fingerprint is a short, stable name for a key in messages.
func fingerprint(k ssh.PublicKey) string { return ssh.FingerprintSHA256(k) }

// SSH is the signer's key as an ssh.Signer, for signatures in namespaces
// other than git's (see package request).
func (s *Signer) SSH() ssh.Signer { return s.key }

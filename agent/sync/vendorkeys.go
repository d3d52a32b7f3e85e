package sync

import (
	"bytes"
	"crypto"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sigstore/sigstore/pkg/signature"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/trust"
)

// VendorKeys is the vendor's artifact key as the trust root names it: the
// keys of the root's vendor-artifacts role valid at the time of the check
// (window, revocations) verify an artifact's cosign signature, so that a
// rotated or revoked vendor key takes effect with the root, without
// touching the install. When the root in force names no vendor-artifacts
// role (or there is no root), Fallback (the agent's --vendor-key,
// deprecated) verifies alone. It is a signature.Verifier, for Config.Key.
type VendorKeys struct {
	// Root returns the trust root in force; nil for none.
	Root func() *trust.Root
	// Fallback verifies when the root names no vendor-artifacts role;
	// nil refuses then.
	Fallback signature.Verifier
	// Now is when the keys are judged: an artifact signature carries no
	// time of its own. Default time.Now.
	Now func() time.Time
}

var _ signature.Verifier = (*VendorKeys)(nil)

// ErrNoVendorKey: neither the root nor the fallback names a vendor key.
var ErrNoVendorKey = errors.New("no vendor artifact key")

// verifiers are the keys that verify now.
func (v *VendorKeys) verifiers() ([]signature.Verifier, error) {
	var root *trust.Root
	if v.Root != nil {
		root = v.Root()
	}
	if root == nil || root.Role(trust.RoleVendorArtifacts) == nil {
		if v.Fallback == nil {
			return nil, fmt.Errorf("%w: the trust root names no vendor-artifacts role and no --vendor-key was given", ErrNoVendorKey)
		}
		return []signature.Verifier{v.Fallback}, nil
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	var out []signature.Verifier
	for _, k := range root.Role(trust.RoleVendorArtifacts).Keys {
		if _, err := root.Authorize(trust.RoleVendorArtifacts, k.Fingerprint, now(), trust.Target{}); err != nil && !errors.Is(err, trust.ErrOutOfScope) {
			continue
		}
		cpk, ok := k.PublicKey.(ssh.CryptoPublicKey)
		if !ok {
			continue
		}
		sv, err := signature.LoadVerifier(cpk.CryptoPublicKey(), crypto.SHA256)
		if err != nil {
			continue
		}
		out = append(out, sv)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no key of %s's vendor-artifacts role is valid now", ErrNoVendorKey, root)
	}
	return out, nil
}

// PublicKey returns the first key that verifies now.
func (v *VendorKeys) PublicKey(opts ...signature.PublicKeyOption) (crypto.PublicKey, error) {
	vs, err := v.verifiers()
	if err != nil {
		return nil, err
	}
	return vs[0].PublicKey(opts...)
}

// VerifySignature accepts sig over message when one key valid now
// verifies it.
func (v *VendorKeys) VerifySignature(sig, message io.Reader, opts ...signature.VerifyOption) error {
	vs, err := v.verifiers()
	if err != nil {
		return err
	}
	s, err := io.ReadAll(sig)
	if err != nil {
		return err
	}
	m, err := io.ReadAll(message)
	if err != nil {
		return err
	}
	var errs []error
	for _, k := range vs {
		err := k.VerifySignature(bytes.NewReader(s), bytes.NewReader(m), opts...)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

package sync

import (
	"bytes"
	"crypto"
	"errors"
	"fmt"
	"io"
	"strings"
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

// vendorKey is one key of the vendor-artifacts role: its verifier, and
// why it does not verify now ("" when it does).
type vendorKey struct {
	name, fingerprint, invalid string
	sv                         signature.Verifier
}

// keys are the role's keys, valid now or not, and the root they are of
// (nil: the fallback alone).
func (v *VendorKeys) keys() ([]vendorKey, *trust.Root, error) {
	var root *trust.Root
	if v.Root != nil {
		root = v.Root()
	}
	if root == nil || root.Role(trust.RoleVendorArtifacts) == nil {
		if v.Fallback == nil {
			return nil, nil, fmt.Errorf("%w: the trust root names no vendor-artifacts role and no --vendor-key was given", ErrNoVendorKey)
		}
		return []vendorKey{{name: "--vendor-key", sv: v.Fallback}}, nil, nil
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	var out []vendorKey
	for _, k := range root.Role(trust.RoleVendorArtifacts).Keys {
		vk := vendorKey{name: k.Name, fingerprint: k.Fingerprint}
		if _, err := root.Authorize(trust.RoleVendorArtifacts, k.Fingerprint, now(), trust.Target{}); err != nil && !errors.Is(err, trust.ErrOutOfScope) {
			vk.invalid = err.Error()
		}
		cpk, ok := k.PublicKey.(ssh.CryptoPublicKey)
		if !ok {
			continue
		}
		sv, err := signature.LoadVerifier(cpk.CryptoPublicKey(), crypto.SHA256)
		if err != nil {
			continue
		}
		vk.sv = sv
		out = append(out, vk)
	}
	return out, root, nil
}

// verifiers are the keys that verify now.
func (v *VendorKeys) verifiers() ([]signature.Verifier, error) {
	ks, root, err := v.keys()
	if err != nil {
		return nil, err
	}
	var out []signature.Verifier
	for _, k := range ks {
		if k.invalid == "" {
			out = append(out, k.sv)
		}
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
	for _, k := range vs {
		if k.VerifySignature(bytes.NewReader(s), bytes.NewReader(m), opts...) == nil {
			return nil
		}
	}
	// Say whose signature it is when a key the root no longer trusts
	// made it: a retired or revoked vendor key, not a broken signature.
	ks, root, _ := v.keys()
	var valid []string
	for _, k := range ks {
		if k.invalid == "" {
			valid = append(valid, k.name)
			continue
		}
		if k.sv.VerifySignature(bytes.NewReader(s), bytes.NewReader(m), opts...) == nil {
			return fmt.Errorf("signed by vendor-artifacts key %q (%s), which %s does not trust now: %s", k.name, k.fingerprint, root.File, k.invalid)
		}
	}
	if root == nil {
		return errors.New("no signature verifies with the vendor key (--vendor-key)")
	}
	return fmt.Errorf("no signature verifies with a vendor-artifacts key of %s valid now (%s)", root.File, strings.Join(valid, ", "))
}

package sync_test

import (
	"context"
	"crypto"
	"strings"
	"testing"
	"time"

	"github.com/sigstore/sigstore/pkg/signature"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/agent/sync"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// sshLine is the authorized_keys line of a cosign key.
func sshLine(t testing.TB, v signature.Verifier) string {
	t.Helper()
	pub, err := v.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	sk, err := ssh.NewPublicKey(pub.(crypto.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sk)))
}

// TestVendorKeysFromTheRoot: with a root that names the vendor-artifacts
// role, the agent verifies artifacts by the role's keys valid now and
// not by its --vendor-key; a vendor key rotated out, revoked, or not yet
// valid copies nothing; a root without the role leaves --vendor-key in
// charge.
func TestVendorKeysFromTheRoot(t *testing.T) {
	vendor, other := key(t, vendorKey), key(t, otherKey)
	vendorLine, otherLine := sshLine(t, vendor), sshLine(t, other)
	vendorFP := ssh.FingerprintSHA256(mustSSH(t, vendorLine))
	now := provT0
	withRole := func(keys []schemas.TrustKey, revoked ...schemas.TrustRevocation) *trust.Root {
		return signedProvRoot(t, nil, func(c *schemas.TrustRoot) {
			c.Roles.VendorArtifacts = &schemas.TrustRole{Threshold: 1, Keys: keys}
			c.Revocations = revoked
		})
	}
	for _, tc := range []struct {
		name     string
		root     *trust.Root
		fallback signature.Verifier
		want     string
	}{
		{"the root's vendor key", withRole([]schemas.TrustKey{{Name: "cosign-2026", Key: vendorLine}}), nil, ""},
		{"rotated: old and new both valid", withRole([]schemas.TrustKey{{Name: "cosign-2027", Key: otherLine}, {Name: "cosign-2026", Key: vendorLine}}), nil, ""},
		{"rotated out: the root names only the new key, --vendor-key the old", withRole([]schemas.TrustKey{{Name: "cosign-2027", Key: otherLine}}), vendor, "signature"},
		{"the old key's window has ended", withRole([]schemas.TrustKey{{Name: "cosign-2026", Key: vendorLine, NotAfter: now.Add(-time.Hour).Format(time.RFC3339)}}), nil, "no key of"},
		{"revoked", withRole([]schemas.TrustKey{{Name: "cosign-2026", Key: vendorLine}, {Name: "cosign-2027", Key: otherLine}},
			schemas.TrustRevocation{Fingerprint: vendorFP, RevokedAt: now.Add(-time.Minute).Format(time.RFC3339), Reason: "leaked"}), nil, "signature"},
		{"no role: --vendor-key", signedProvRoot(t, nil, func(*schemas.TrustRoot) {}), vendor, ""},
		{"no role and no --vendor-key", signedProvRoot(t, nil, func(*schemas.TrustRoot) {}), nil, "no vendor artifact key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			arts := w.artifacts(w.build(t, vendor, "network"))
			keys := &sync.VendorKeys{Root: func() *trust.Root { return tc.root }, Fallback: tc.fallback, Now: func() time.Time { return now }}
			err := w.syncer(t, func(c *sync.Config) { c.Key = keys; c.Attempts = 1 }).Sync(context.Background(), arts)
			if tc.want == "" {
				if err != nil || !w.present(t, arts[0].Local) {
					t.Fatalf("sync: %v; want the artifact copied", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("sync: %v, want a refusal with %q", err, tc.want)
			}
			if w.present(t, arts[0].Local) {
				t.Error("a refused artifact reached the install registry")
			}
		})
	}
}

func mustSSH(t testing.TB, line string) ssh.PublicKey {
	t.Helper()
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

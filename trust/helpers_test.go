package trust

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/schemas"
)

// t0 is the tests' clock: every time in them is relative to it.
var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// testKey is a real SSH ed25519 key made from name, the same in every
// run so that the golden files stay put.
func testKey(t testing.TB, name string) ssh.Signer {
	t.Helper()
	seed := sha256.Sum256([]byte("nuon trust test key " + name))
	s, err := ssh.NewSignerFromKey(ed25519.NewKeyFromSeed(seed[:]))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func authorized(s ssh.Signer) string {
	return string(bytes.TrimSpace(ssh.MarshalAuthorizedKey(s.PublicKey())))
}

func fp(s ssh.Signer) string { return ssh.FingerprintSHA256(s.PublicKey()) }

// content is a version with the named root keys and threshold, a render
// role and an operators role.
func content(t testing.TB, version int64, threshold int, rootKeys ...string) schemas.TrustRoot {
	t.Helper()
	tr := schemas.TrustRoot{
		APIVersion: "nuon.dev/v1",
		Kind:       schemas.KindTrustRoot,
		Version:    version,
		Expires:    t0.AddDate(1, 0, 0).Format(time.RFC3339),
		Root:       schemas.TrustRootRole{Threshold: threshold},
		Roles: schemas.TrustRoles{
			Render: schemas.TrustRole{Threshold: 1, Keys: []schemas.TrustKey{
				{Name: "render-2026", Key: authorized(testKey(t, "render-2026")),
					NotBefore: t0.AddDate(0, -1, 0).Format(time.RFC3339), NotAfter: t0.AddDate(0, 6, 0).Format(time.RFC3339)},
			}},
			Operators: &schemas.TrustRole{
				Threshold: 1,
				Scope:     &schemas.TrustScope{RequestKinds: []string{KindLogs, KindDebug}},
				Keys: []schemas.TrustKey{
					{Name: "ops-eu", Key: authorized(testKey(t, "ops-eu")),
						Scope: &schemas.TrustScope{InstallLabels: map[string]string{"region": "eu"}}},
				},
			},
		},
	}
	for _, k := range rootKeys {
		tr.Root.Keys = append(tr.Root.Keys, schemas.TrustRootKey{Name: k, Key: authorized(testKey(t, k))})
	}
	return tr
}

// signedRoot encodes tr, signs it with the named keys in order and parses
// the result.
func signedRoot(t testing.TB, tr schemas.TrustRoot, signers ...string) *Root {
	t.Helper()
	b, err := Encode(tr)
	if err != nil {
		t.Fatal(err)
	}
	r := mustParse(t, b)
	for _, s := range signers {
		if b, err = Sign(r, testKey(t, s)); err != nil {
			t.Fatal(err)
		}
		r = mustParse(t, b)
	}
	return r
}

func mustParse(t testing.TB, b []byte) *Root {
	t.Helper()
	r, err := Parse("root.json", b)
	if err != nil {
		t.Fatalf("parse:\n%s\n%s", err, b)
	}
	return r
}

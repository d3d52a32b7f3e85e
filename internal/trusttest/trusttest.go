// Package trusttest makes real trust root versions for tests: SSH ed25519
// keys derived from a name (the same in every run), the content of a
// version, and its file signed by the named root keys through package
// trust, as `nuon trust sign` signs it.
package trusttest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// Key is the SSH ed25519 key named name: the same in every run.
func Key(tb testing.TB, name string) *signature.Signer {
	tb.Helper()
	seed := sha256.Sum256([]byte("nuon trusttest key " + name))
	block, err := ssh.MarshalPrivateKey(ed25519.NewKeyFromSeed(seed[:]), name)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := signature.ParseSigner(pem.EncodeToMemory(block))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// WriteKey writes the private key named name under dir (dir/name, mode
// 0600) and its public key (dir/name.pub), and returns the private key's
// path: for the binaries, which read keys from files.
func WriteKey(tb testing.TB, dir, name string) string {
	tb.Helper()
	seed := sha256.Sum256([]byte("nuon trusttest key " + name))
	block, err := ssh.MarshalPrivateKey(ed25519.NewKeyFromSeed(seed[:]), name)
	if err != nil {
		tb.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(block), 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(p+".pub", []byte(Key(tb, name).AuthorizedKey()+"\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	return p
}

// Fingerprint is the SHA256 fingerprint of the key named name.
func Fingerprint(tb testing.TB, name string) string {
	tb.Helper()
	return ssh.FingerprintSHA256(Key(tb, name).PublicKey())
}

// RenderKey is a render key of a version, with its window (zero: open).
type RenderKey struct {
	Name                string
	NotBefore, NotAfter time.Time
}

// Revoked is a revocation of the key named Name.
type Revoked struct {
	Name string
	At   time.Time
}

// Version describes one version of the root.
type Version struct {
	Version   int64
	Expires   time.Time
	RootKeys  []string
	Threshold int
	Render    []RenderKey
	Revoked   []Revoked
	// Builders are the builders role's keys (threshold 1), by name and
	// authorized_keys line (ECDSA keys made by the test, for instance).
	Builders []NamedKey
}

// NamedKey is a key given by its authorized_keys line.
type NamedKey struct {
	Name, Key string
}

// Content is v as the signed content of a file.
func (v Version) Content(tb testing.TB) schemas.TrustRoot {
	tb.Helper()
	c := schemas.TrustRoot{
		APIVersion: "nuon.dev/v1", Kind: schemas.KindTrustRoot, Version: v.Version,
		Expires: stamp(v.Expires),
		Root:    schemas.TrustRootRole{Threshold: v.Threshold},
		Roles:   schemas.TrustRoles{Render: schemas.TrustRole{Threshold: 1}},
	}
	for _, n := range v.RootKeys {
		c.Root.Keys = append(c.Root.Keys, schemas.TrustRootKey{Name: n, Key: Key(tb, n).AuthorizedKey()})
	}
	for _, k := range v.Render {
		c.Roles.Render.Keys = append(c.Roles.Render.Keys, schemas.TrustKey{Name: k.Name, Key: Key(tb, k.Name).AuthorizedKey(),
			NotBefore: stamp(k.NotBefore), NotAfter: stamp(k.NotAfter)})
	}
	if len(v.Builders) > 0 {
		c.Roles.Builders = &schemas.TrustRole{Threshold: 1}
		for _, k := range v.Builders {
			c.Roles.Builders.Keys = append(c.Roles.Builders.Keys, schemas.TrustKey{Name: k.Name, Key: k.Key})
		}
	}
	for _, r := range v.Revoked {
		c.Revocations = append(c.Revocations, schemas.TrustRevocation{Fingerprint: Fingerprint(tb, r.Name), RevokedAt: stamp(r.At), Reason: "leaked"})
	}
	return c
}

// File is v's file signed by the named keys, in order.
func (v Version) File(tb testing.TB, signers ...string) []byte {
	tb.Helper()
	return Sign(tb, v.Content(tb), signers...)
}

// Root is v signed by the named keys, parsed.
func (v Version) Root(tb testing.TB, signers ...string) *trust.Root {
	tb.Helper()
	r, err := trust.Parse(trust.FileName(v.Version), v.File(tb, signers...))
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// Sign encodes c and signs it with the named keys, in order.
func Sign(tb testing.TB, c schemas.TrustRoot, signers ...string) []byte {
	tb.Helper()
	b, err := trust.Encode(c)
	if err != nil {
		tb.Fatal(err)
	}
	for _, s := range signers {
		r, err := trust.Parse(trust.FileName(c.Version), b)
		if err != nil {
			tb.Fatalf("%v\n%s", err, b)
		}
		if b, err = trust.Sign(r, Key(tb, s).SSH()); err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := trust.Parse(trust.FileName(c.Version), b); err != nil {
		tb.Fatalf("%v\n%s", err, b)
	}
	return bytes.Clone(b)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

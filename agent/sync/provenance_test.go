package sync_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/sigstore/sigstore/pkg/signature"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/agent/sync"
	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/trusttest"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

var provT0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

const (
	provDigest = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	provRepo   = "git+https://git.example.com/vendor/shop"
)

// builderKey is a new ECDSA P-256 builder key and its authorized_keys line.
func builderKey(t testing.TB) (signature.SignerVerifier, string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sv, err := signature.LoadECDSASignerVerifier(priv, crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return sv, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
}

// provRoot is a root whose builders role holds the named keys, with the
// given revocations.
func provRoot(t testing.TB, builders []trusttest.NamedKey, revoked ...schemas.TrustRevocation) *trust.Root {
	t.Helper()
	return signedProvRoot(t, builders, func(c *schemas.TrustRoot) { c.Revocations = append(c.Revocations, revoked...) })
}

// signedProvRoot is version 1 with the named builders, changed by edit
// and signed by its root key.
func signedProvRoot(t testing.TB, builders []trusttest.NamedKey, edit func(*schemas.TrustRoot)) *trust.Root {
	t.Helper()
	v := trusttest.Version{Version: 1, Expires: provT0.AddDate(1, 0, 0), RootKeys: []string{"root-1"}, Threshold: 1,
		Render: []trusttest.RenderKey{{Name: "render-a"}}, Builders: builders}
	c := v.Content(t)
	edit(&c)
	r, err := trust.Parse(trust.FileName(1), trusttest.Sign(t, c, "root-1"))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func statement(t testing.TB, digest, repo, ref string) []byte {
	t.Helper()
	st, err := builder.Provenance{BuilderID: "https://builders.example.com/ci-1", Source: builder.Source{Repository: repo, Ref: ref, Commit: strings.Repeat("a", 40)},
		Started: provT0, Finished: provT0.Add(time.Minute)}.Statement(builder.Artifact{Component: "api", Type: "helm", Name: "chart", Repository: "registry.example.com/shop/api", Digest: digest})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func envelope(t testing.TB, st []byte, sv signature.Signer) []byte {
	t.Helper()
	env, err := builder.Envelope(st, sv)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// resign replaces the envelope's payload by st and signs it with every
// signer in order.
func resign(t testing.TB, st []byte, signers ...signature.Signer) []byte {
	t.Helper()
	env := dsse.Envelope{PayloadType: sync.IntotoPayloadType, Payload: base64.StdEncoding.EncodeToString(st)}
	for _, s := range signers {
		sig, err := s.SignMessage(bytes.NewReader(dsse.PAE(env.PayloadType, st)))
		if err != nil {
			t.Fatal(err)
		}
		env.Signatures = append(env.Signatures, dsse.Signature{Sig: base64.StdEncoding.EncodeToString(sig)})
	}
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestVerifyProvenance: the agent's provenance check accepts what nuon
// build writes, and refuses each attack the issue lists.
func TestVerifyProvenance(t *testing.T) {
	ci, ciKey := builderKey(t)
	rogue, _ := builderKey(t)
	root := provRoot(t, []trusttest.NamedKey{{Name: "ci-1", Key: ciKey}})
	ciPub, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(ciKey))
	revokedRoot := provRoot(t, []trusttest.NamedKey{{Name: "ci-1", Key: ciKey}},
		schemas.TrustRevocation{Fingerprint: ssh.FingerprintSHA256(ciPub), RevokedAt: provT0.Add(-time.Hour).Format(time.RFC3339), Reason: "leaked"})
	policy := sync.ProvenancePolicy{Root: root, At: provT0, Sources: []sync.Source{{Repository: provRepo, Ref: "refs/tags/v*"}}}
	good := statement(t, provDigest, provRepo, "refs/tags/v1.2.0")

	v, err := sync.VerifyProvenance(envelope(t, good, ci), provDigest, policy)
	if err != nil {
		t.Fatalf("good provenance refused: %v", err)
	}
	if v.Builder != "https://builders.example.com/ci-1" || v.Source.Ref != "refs/tags/v1.2.0" || v.Commit != strings.Repeat("a", 40) || len(v.Keys) != 1 {
		t.Errorf("verified %+v", v)
	}

	var twoSubjects map[string]any
	if err := json.Unmarshal(good, &twoSubjects); err != nil {
		t.Fatal(err)
	}
	subj := twoSubjects["subject"].([]any)
	twoSubjects["subject"] = append(subj, map[string]any{"name": "other", "digest": map[string]any{"sha256": strings.Repeat("2", 64)}})
	two, _ := json.Marshal(twoSubjects)

	for _, tc := range []struct {
		name     string
		envelope []byte
		digest   string
		policy   sync.ProvenancePolicy
		want     string
	}{
		{"unknown builder", envelope(t, good, rogue), provDigest, policy, "verifies with no builder key"},
		{"another repository", envelope(t, statement(t, provDigest, "git+https://evil.example.com/shop", "refs/tags/v1.2.0"), ci), provDigest, policy, "not an allowed source"},
		{"another ref", envelope(t, statement(t, provDigest, provRepo, "refs/heads/dev"), ci), provDigest, policy, "not an allowed source"},
		{"a digest swapped under a valid provenance", envelope(t, good, ci), "sha256:" + strings.Repeat("3", 64), policy, "not this artifact"},
		{"several subjects", resign(t, two, ci), provDigest, policy, "exactly the one artifact"},
		{"one good signature, one bad", resign(t, good, ci, rogue), provDigest, policy, "signature 2"},
		{"one bad signature, one good", resign(t, good, rogue, ci), provDigest, policy, "signature 1"},
		{"unsigned", resign(t, good), provDigest, policy, "not signed"},
		{"revoked builder", envelope(t, good, ci), provDigest, sync.ProvenancePolicy{Root: revokedRoot, At: provT0, Sources: policy.Sources}, "key revoked"},
		{"no builders role", envelope(t, good, ci), provDigest, sync.ProvenancePolicy{Root: provRoot(t, nil), At: provT0, Sources: policy.Sources}, "names no builders"},
		{"not an envelope", []byte("{"), provDigest, policy, "not a DSSE envelope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sync.VerifyProvenance(tc.envelope, tc.digest, tc.policy)
			if !errors.Is(err, sync.ErrProvenance) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("VerifyProvenance: %v, want a refusal with %q", err, tc.want)
			}
		})
	}
}

// FuzzVerifyProvenance: no envelope makes the check panic, and one it
// accepts is signed by the builder and names the digest.
func FuzzVerifyProvenance(f *testing.F) {
	ci, ciKey := builderKey(f)
	policy := sync.ProvenancePolicy{Root: provRoot(f, []trusttest.NamedKey{{Name: "ci-1", Key: ciKey}}), At: provT0,
		Sources: []sync.Source{{Repository: provRepo, Ref: "*"}}}
	f.Add(envelope(f, statement(f, provDigest, provRepo, "refs/heads/main"), ci))
	f.Add([]byte(`{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[{"sig":"AA=="}]}`))
	f.Fuzz(func(t *testing.T, env []byte) {
		v, err := sync.VerifyProvenance(env, provDigest, policy)
		if err == nil && len(v.Keys) == 0 {
			t.Fatal("accepted without a builder key")
		}
	})
}

// BenchmarkVerifyProvenance is the agent's check per artifact: one ECDSA
// signature, the statement and the predicate decoded and checked.
func BenchmarkVerifyProvenance(b *testing.B) {
	ci, ciKey := builderKey(b)
	policy := sync.ProvenancePolicy{Root: provRoot(b, []trusttest.NamedKey{{Name: "ci-1", Key: ciKey}}), At: provT0,
		Sources: []sync.Source{{Repository: provRepo, Ref: "refs/tags/v*"}}}
	env := envelope(b, statement(b, provDigest, provRepo, "refs/tags/v1.2.0"), ci)
	for b.Loop() {
		if _, err := sync.VerifyProvenance(env, provDigest, policy); err != nil {
			b.Fatal(err)
		}
	}
}

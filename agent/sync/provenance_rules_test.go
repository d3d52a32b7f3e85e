package sync_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sigstore/sigstore/pkg/signature"

	"nuon.dev/nuon/agent/sync"
	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/trusttest"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// rulesRoot is a root with the named builders and provenance rules.
func rulesRoot(t testing.TB, builders []trusttest.NamedKey, prov *schemas.TrustProvenance) *trust.Root {
	t.Helper()
	return signedProvRoot(t, builders, func(c *schemas.TrustRoot) { c.Provenance = prov })
}

// TestProvenanceRules: the root names allowed sources per component and
// distinct builders per channel; the agent's --provenance-source flags
// are only a fallback for a root that names no source. Each attack is
// refused: an unknown builder, another repository or ref for this
// component, a digest swapped under a valid provenance, two attestations
// by one builder counted once, a subject naming several digests.
func TestProvenanceRules(t *testing.T) {
	ci1, ci1Key := builderKey(t)
	ci2, ci2Key := builderKey(t)
	rogue, _ := builderKey(t)
	builders := []trusttest.NamedKey{{Name: "ci-1", Key: ci1Key}, {Name: "ci-2", Key: ci2Key}}
	root := rulesRoot(t, builders, &schemas.TrustProvenance{
		Sources: []schemas.TrustSource{
			{Component: "api", Repository: provRepo, Ref: "refs/tags/v*"},
			{Component: "web-*", Repository: "git+https://git.example.com/vendor/web", Ref: "refs/heads/release"},
		},
		Builders: []schemas.TrustBuilderRule{{Channels: []string{"stable"}, Builders: 2}},
	})
	flagsOnly := rulesRoot(t, builders, nil)
	flags := &sync.ProvenanceConfig{Sources: []sync.Source{{Repository: "git+https://evil.example.com/shop", Ref: "refs/tags/*"}}}
	good := statement(t, provDigest, provRepo, "refs/tags/v1.2.0")
	other := statement(t, "sha256:"+strings.Repeat("4", 64), provRepo, "refs/tags/v1.2.0")
	evil := statement(t, provDigest, "git+https://evil.example.com/shop", "refs/tags/v1.2.0")
	var st map[string]any
	if err := json.Unmarshal(good, &st); err != nil {
		t.Fatal(err)
	}
	st["subject"].([]any)[0].(map[string]any)["digest"].(map[string]any)["sha512"] = strings.Repeat("6", 128)
	severalDigests, _ := json.Marshal(st)

	for _, tc := range []struct {
		name               string
		root               *trust.Root
		channel, component string
		envelopes          [][]byte
		digest             string
		want               string // "" accepts
	}{
		{name: "one builder where one is required", root: root, channel: "beta", component: "api",
			envelopes: [][]byte{envelope(t, good, ci1)}},
		{name: "two distinct builders for stable", root: root, channel: "stable", component: "api",
			envelopes: [][]byte{envelope(t, good, ci1), envelope(t, good, ci2)}},
		{name: "two builders in one envelope count", root: root, channel: "stable", component: "api",
			envelopes: [][]byte{resign(t, good, ci1, ci2)}},
		{name: "one builder for stable", root: root, channel: "stable", component: "api",
			envelopes: [][]byte{envelope(t, good, ci1)}, want: "1 distinct builder keys signed provenance that passes, 2 required"},
		{name: "same builder twice counted once", root: root, channel: "stable", component: "api",
			envelopes: [][]byte{envelope(t, good, ci1), envelope(t, good, ci1)}, want: "1 distinct builder keys"},
		{name: "second attestation by an unknown builder", root: root, channel: "stable", component: "api",
			envelopes: [][]byte{envelope(t, good, ci1), envelope(t, good, rogue)}, want: "verifies with no builder key"},
		{name: "second attestation for another digest", root: root, channel: "stable", component: "api",
			envelopes: [][]byte{envelope(t, good, ci1), envelope(t, other, ci2)}, want: "not this artifact"},
		{name: "second attestation from another repository", root: root, channel: "stable", component: "api",
			envelopes: [][]byte{envelope(t, good, ci1), envelope(t, evil, ci2)}, want: "not an allowed source"},
		{name: "digest swapped under valid provenance", root: root, channel: "beta", component: "api",
			envelopes: [][]byte{envelope(t, good, ci1)}, digest: "sha256:" + strings.Repeat("5", 64), want: "not this artifact"},
		{name: "source allowed for another component only", root: root, channel: "beta", component: "web-shop",
			envelopes: [][]byte{envelope(t, good, ci1)}, want: "not an allowed source"},
		{name: "component the root names no source for", root: root, channel: "beta", component: "worker",
			envelopes: [][]byte{envelope(t, good, ci1)}, want: `allows no source for component "worker"`},
		{name: "the flags do not widen the root's sources", root: root, channel: "beta", component: "api",
			envelopes: [][]byte{envelope(t, evil, ci1)}, want: "not an allowed source"},
		{name: "flags are the fallback without root sources", root: flagsOnly, channel: "stable", component: "api",
			envelopes: [][]byte{envelope(t, evil, ci1)}},
		{name: "fallback flags refuse other sources", root: flagsOnly, channel: "stable", component: "api",
			envelopes: [][]byte{envelope(t, good, ci1)}, want: "not an allowed source"},
		{name: "a subject naming several digests", root: root, channel: "beta", component: "api",
			envelopes: [][]byte{resign(t, severalDigests, ci1)}, want: "exactly the one artifact"},
		{name: "unknown builder", root: root, channel: "beta", component: "api",
			envelopes: [][]byte{envelope(t, good, rogue)}, want: "verifies with no builder key"},
		{name: "no attestation", root: root, channel: "beta", component: "api", want: "no provenance"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			digest := tc.digest
			if digest == "" {
				digest = provDigest
			}
			p, err := flags.Policy(tc.root, tc.channel, tc.component, provT0)
			if err == nil {
				_, err = sync.VerifyProvenances(tc.envelopes, digest, p)
			}
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, sync.ErrProvenance) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want a refusal with %q", err, tc.want)
			}
		})
	}
}

// TestSyncRequiresTwoBuilders: two independent builds of one component
// give one digest and two attestations; an install on a channel that
// requires two builders copies it only then, and with one build nothing
// reaches its registry. The root's source for the component is used with
// no --provenance-source at all.
func TestSyncRequiresTwoBuilders(t *testing.T) {
	src := builder.Source{Repository: provRepo, Ref: "refs/tags/v1.2.0", Commit: strings.Repeat("b", 40)}
	ci1, ci1Key := builderKey(t)
	ci2, ci2Key := builderKey(t)
	root := rulesRoot(t, []trusttest.NamedKey{{Name: "ci-1", Key: ci1Key}, {Name: "ci-2", Key: ci2Key}}, &schemas.TrustProvenance{
		Sources:  []schemas.TrustSource{{Component: "net*", Repository: provRepo, Ref: "refs/tags/v*"}},
		Builders: []schemas.TrustBuilderRule{{Channels: []string{"stable"}, Builders: 2}},
	})
	policy := func(c *sync.Config) {
		c.Provenance = &sync.ProvenanceConfig{Root: func() *trust.Root { return root }}
	}
	for _, tc := range []struct {
		name      string
		builds    []signature.SignerVerifier
		channel   string
		component string
		want      string
	}{
		{"two builders, stable", []signature.SignerVerifier{ci1, ci2}, "stable", "network", ""},
		{"one builder, stable", []signature.SignerVerifier{ci1}, "stable", "network", "2 required"},
		{"one builder built twice, stable", []signature.SignerVerifier{ci1, ci1}, "stable", "network", "1 distinct builder keys"},
		{"one builder, beta", []signature.SignerVerifier{ci1}, "beta", "network", ""},
		{"another component", []signature.SignerVerifier{ci1, ci2}, "stable", "api", `allows no source for component "api"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			var arts []builder.Artifact
			for _, b := range tc.builds {
				arts = w.buildWithProvenance(t, b, src, "network")
			}
			as := w.artifacts(arts)
			err := w.syncer(t, policy).SyncComponent(context.Background(), tc.channel, tc.component, as)
			w.checkSynced(t, err, as[0].Local, tc.want)
		})
	}
}

// BenchmarkVerifyProvenances is the agent's check of one artifact on a
// channel that requires two builders: two envelopes, each one ECDSA
// signature, statement and predicate decoded and checked.
func BenchmarkVerifyProvenances(b *testing.B) {
	ci1, ci1Key := builderKey(b)
	ci2, ci2Key := builderKey(b)
	root := rulesRoot(b, []trusttest.NamedKey{{Name: "ci-1", Key: ci1Key}, {Name: "ci-2", Key: ci2Key}}, &schemas.TrustProvenance{
		Sources:  []schemas.TrustSource{{Component: "api", Repository: provRepo, Ref: "refs/tags/v*"}},
		Builders: []schemas.TrustBuilderRule{{Channels: []string{"stable"}, Builders: 2}},
	})
	st := statement(b, provDigest, provRepo, "refs/tags/v1.2.0")
	envs := [][]byte{envelope(b, st, ci1), envelope(b, st, ci2)}
	p, err := (&sync.ProvenanceConfig{}).Policy(root, "stable", "api", provT0)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := sync.VerifyProvenances(envs, provDigest, p); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzVerifyProvenances: whatever two envelopes hold, the check never
// accepts fewer distinct builder keys than the channel requires, nor an
// envelope set in which none passes alone.
func FuzzVerifyProvenances(f *testing.F) {
	ci1, ci1Key := builderKey(f)
	ci2, ci2Key := builderKey(f)
	root := rulesRoot(f, []trusttest.NamedKey{{Name: "ci-1", Key: ci1Key}, {Name: "ci-2", Key: ci2Key}}, &schemas.TrustProvenance{
		Sources:  []schemas.TrustSource{{Component: "*", Repository: provRepo, Ref: "refs/tags/*"}},
		Builders: []schemas.TrustBuilderRule{{Channels: []string{"stable"}, Builders: 2}},
	})
	p, err := (&sync.ProvenanceConfig{}).Policy(root, "stable", "api", provT0)
	if err != nil {
		f.Fatal(err)
	}
	st := statement(f, provDigest, provRepo, "refs/tags/v1")
	f.Add(envelope(f, st, ci1), envelope(f, st, ci2))
	f.Add(envelope(f, st, ci1), envelope(f, st, ci1))
	f.Add(resign(f, st, ci1, ci2), []byte("{}"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		vs, err := sync.VerifyProvenances([][]byte{a, b}, provDigest, p)
		if err != nil {
			return
		}
		keys := map[string]bool{}
		for _, v := range vs {
			for _, k := range v.Keys {
				keys[k] = true
			}
		}
		if len(keys) < 2 {
			t.Fatalf("accepted with %d distinct builder keys", len(keys))
		}
	})
}

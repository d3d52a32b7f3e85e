package sync_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sigstore/sigstore/pkg/signature"

	"nuon.dev/nuon/agent/sync"
	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/trusttest"
	"nuon.dev/nuon/trust"
)

// buildWithProvenance builds the named components signed by the vendor
// key, with provenance by the builder key sv from src.
func (w *world) buildWithProvenance(t *testing.T, sv signature.SignerVerifier, src builder.Source, names ...string) []builder.Artifact {
	t.Helper()
	targets, err := builder.Targets(w.app, fixtures, nil, names)
	if err != nil {
		t.Fatal(err)
	}
	arts, err := builder.Build(context.Background(), targets, builder.Options{Client: w.client, Signer: key(t, vendorKey),
		Provenance: &builder.Provenance{BuilderID: "https://ci.example.com/b1", Source: src}, BuilderKey: sv})
	if err != nil {
		t.Fatal(err)
	}
	return arts
}

// TestSyncRequiresProvenance: with a provenance policy, the agent copies
// an artifact only when its provenance is signed by a builder of the
// root, names its digest and comes from an allowed source; otherwise the
// refusal is final and nothing reaches the install registry.
func TestSyncRequiresProvenance(t *testing.T) {
	good := builder.Source{Repository: provRepo, Ref: "refs/tags/v1.2.0", Commit: strings.Repeat("b", 40)}
	ci, ciKey := builderKey(t)
	rogue, _ := builderKey(t)
	root := provRoot(t, []trusttest.NamedKey{{Name: "ci-1", Key: ciKey}})
	policy := func(c *sync.Config) {
		c.Provenance = &sync.ProvenanceConfig{Root: func() *trust.Root { return root }, Sources: []sync.Source{{Repository: provRepo, Ref: "refs/tags/v*"}}}
	}
	for _, tc := range []struct {
		name  string
		build func(w *world) []builder.Artifact
		want  string
	}{
		{"trusted builder, allowed source", func(w *world) []builder.Artifact { return w.buildWithProvenance(t, ci, good, "network") }, ""},
		{"no provenance", func(w *world) []builder.Artifact { return w.build(t, key(t, vendorKey), "network") }, "has no provenance"},
		{"unknown builder", func(w *world) []builder.Artifact { return w.buildWithProvenance(t, rogue, good, "network") }, "verifies with no builder key"},
		{"another repository", func(w *world) []builder.Artifact {
			return w.buildWithProvenance(t, ci, builder.Source{Repository: "git+https://evil.example.com/shop", Ref: good.Ref, Commit: good.Commit}, "network")
		}, "not an allowed source"},
		{"a branch, not a tag", func(w *world) []builder.Artifact {
			return w.buildWithProvenance(t, ci, builder.Source{Repository: provRepo, Ref: "refs/heads/main", Commit: good.Commit}, "network")
		}, "not an allowed source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			arts := w.artifacts(tc.build(w))
			err := w.syncer(t, policy).Sync(context.Background(), arts)
			w.checkSynced(t, err, arts[0].Local, tc.want)
		})
	}
}

// checkSynced checks a Sync's outcome: with want "", no error and the
// artifact at local in the install registry; else a final provenance
// refusal that says want, and nothing at local.
func (w *world) checkSynced(t *testing.T, err error, local, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("sync: %v", err)
		}
		if !w.present(t, local) {
			t.Error("the artifact is not in the install registry")
		}
		return
	}
	if !errors.Is(err, sync.ErrProvenance) || !sync.IsRefusal(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("sync: %v, want a final refusal with %q", err, want)
	}
	if w.present(t, local) {
		t.Error("a refused artifact reached the install registry")
	}
}

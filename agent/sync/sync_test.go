package sync_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"

	"nuon.dev/nuon/agent/sync"
	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/schemas"
)

func TestSyncCopiesVerifiedArtifacts(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	arts := w.artifacts(w.build(t, key(t, vendorKey)))
	s := w.syncer(t)
	if err := s.Sync(ctx, arts); err != nil {
		t.Fatal(err)
	}
	pub, _ := vendorKey()
	for _, a := range arts {
		if !w.present(t, a.Local) {
			t.Fatalf("%s is not in the install registry", a.Local)
		}
		// cosign's own verification accepts the copy in the install
		// registry: the signature travelled with the artifact.
		ref, _ := name.NewDigest(a.Local)
		ro, err := w.client.Remote(ctx, ref.Context(), false)
		if err != nil {
			t.Fatal(err)
		}
		sigs, _, err := cosign.VerifyImageSignatures(ctx, ref, &cosign.CheckOpts{
			RegistryClientOpts: []ociremote.Option{ociremote.WithRemoteOptions(ro...)},
			SigVerifier:        pub,
			IgnoreTlog:         true,
			IgnoreSCT:          true,
			ClaimVerifier:      cosign.SimpleClaimVerifier,
		})
		if err != nil || len(sigs) != 1 {
			t.Errorf("cosign on the install copy of %s: %d signatures, %v", a.Name, len(sigs), err)
		}
	}
	// What a plugin reads from the install registry is the module.
	dir := filepath.Join(t.TempDir(), "module")
	if err := (&oci.Source{Client: w.client}).Extract(ctx, arts[0], dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"main.tf", "outputs.tf", "variables.tf"} {
		want, _ := os.ReadFile(filepath.Join(fixtures, "modules", "network", f))
		got, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestPresentArtifactsCostOneRequest counts at the registries what a sync
// of artifacts that are all present costs.
func TestPresentArtifactsCostOneRequest(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	arts := w.artifacts(w.build(t, key(t, vendorKey)))
	s := w.syncer(t)
	if err := s.Sync(ctx, arts); err != nil {
		t.Fatal(err)
	}
	w.install.Requests(t)
	w.vendor.Requests(t)
	if err := s.Sync(ctx, arts); err != nil {
		t.Fatal(err)
	}
	got := w.install.Requests(t)
	if len(got) != len(arts) {
		t.Errorf("%d requests for %d present artifacts: %v", len(got), len(arts), got)
	}
	for _, r := range got {
		if !strings.HasPrefix(r, "HEAD /v2/nuon-acme/") || !strings.Contains(r, "/manifests/sha256:") {
			t.Errorf("unexpected request %s", r)
		}
	}
	if v := w.vendor.Requests(t); len(v) != 0 {
		t.Errorf("the vendor registry was asked %v", v)
	}
	// A restarted agent checks the signature copies once, never the vendor.
	if err := w.syncer(t).Sync(ctx, arts); err != nil {
		t.Fatal(err)
	}
	if got := w.install.Requests(t); len(got) > 3*len(arts) {
		t.Errorf("a new syncer made %d requests for %d present artifacts: %v", len(got), len(arts), got)
	}
	if v := w.vendor.Requests(t); len(v) != 0 {
		t.Errorf("the vendor registry was asked %v", v)
	}
}

func TestRefusals(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	p := newProxy(t, w.vendor.Host)
	w.vendorHost = p.host
	w.setApp(t)

	// unsigned: pushed without a signature.
	comp := w.app.Components[0]
	img, err := oci.Package(oci.Terraform, bigModule(t, 1000))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	repo, _ := name.NewRepository(comp.Repository)
	pusher, err := w.client.NewPusher(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := pusher.Push(ctx, repo.Digest(d.String()), img); err != nil {
		t.Fatal(err)
	}
	unsigned := builder.Artifact{Name: "module", Repository: repo.Name(), Digest: d.String()}
	// wrong key: signed, by a key the install does not trust.
	wrongKey := w.build(t, key(t, otherKey), "database")[0]
	// tampered: the vendor registry serves other bytes for a blob.
	tampered := w.build(t, key(t, vendorKey), "dashboards")[0]
	// borrowed: a valid vendor signature, copied from another artifact.
	good := w.build(t, key(t, vendorKey), "network")[0]

	for _, tc := range []struct {
		name   string
		art    builder.Artifact
		setup  func()
		want   error
		source string
	}{
		{name: "unsigned", art: unsigned, want: sync.ErrUnsigned},
		{name: "wrong key", art: wrongKey, want: sync.ErrBadSignature},
		{name: "digest mismatch", art: tampered, want: sync.ErrDigestMismatch, setup: func() { p.tamper.Store("/blobs/") }},
		{name: "references disagree", art: good, want: sync.ErrDigestMismatch, source: good.Repository + "@" + wrongKey.Digest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
				defer p.tamper.Store("")
			}
			a := w.artifacts([]builder.Artifact{tc.art})[0]
			if tc.source != "" {
				a.Source = tc.source
			}
			err := w.syncer(t).Sync(ctx, []schemas.Artifact{a})
			if !errors.Is(err, tc.want) || !sync.IsRefusal(err) {
				t.Fatalf("got %v, want a refusal with %v", err, tc.want)
			}
			var se *sync.Error
			if !errors.As(err, &se) || se.Temporary || se.Artifact != a.Name {
				t.Errorf("error %#v", se)
			}
			if w.present(t, a.Local) {
				t.Errorf("a refused artifact reached the install registry")
			}
		})
	}
	// The signature check comes before any blob: a tampered blob of a
	// manifest that is signed is caught while copying, and the manifest
	// never lands.
	if got := w.install.Requests(t); strings.Contains(strings.Join(got, "\n"), "PUT /v2/nuon-acme/shop/dashboards/manifests/sha256") {
		t.Errorf("the tampered artifact's manifest was written: %v", got)
	}
}

// TestRegistryDownMidSync takes the vendor registry away while a large
// blob is being copied: the sync retries, gives up with a temporary
// error, leaves no manifest in the install registry, and completes once
// the registry is back.
func TestRegistryDownMidSync(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	p := newProxy(t, w.vendor.Host)
	w.vendorHost = p.host
	w.setApp(t)
	targets, err := builder.Targets(w.app, "", map[string]string{"network": bigModule(t, 3<<20)}, []string{"network"})
	if err != nil {
		t.Fatal(err)
	}
	built, err := builder.Build(ctx, targets, builder.Options{Client: w.client, Signer: key(t, vendorKey)})
	if err != nil {
		t.Fatal(err)
	}
	arts := w.artifacts(built)
	p.failAfter.Store(1 << 20)
	start := time.Now()
	err = w.syncer(t, func(c *sync.Config) { c.Attempts = 2 }).Sync(ctx, arts)
	var se *sync.Error
	if !errors.As(err, &se) || !se.Temporary || se.Refused {
		t.Fatalf("got %v, want a temporary error", err)
	}
	if w.present(t, arts[0].Local) {
		t.Fatal("a half-copied artifact's manifest is in the install registry")
	}
	t.Logf("gave up after %s: %v", time.Since(start).Round(time.Millisecond), err)
	p.failAfter.Store(0)
	p.down.Store(false)
	var logs syncBuffer
	progress := func(c *sync.Config) {
		c.Progress = time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}
	if err := w.syncer(t, progress).Sync(ctx, arts); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `msg="copying artifact"`) || !strings.Contains(logs.String(), `msg="artifact copied"`) {
		t.Errorf("no progress in the log:\n%s", logs.String())
	}
	if !w.present(t, arts[0].Local) {
		t.Fatal("the artifact is missing after the registry came back")
	}
	dir := filepath.Join(t.TempDir(), "module")
	if err := (&oci.Source{Client: w.client}).Extract(ctx, arts[0], dir); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(filepath.Join(targets[0].Source, "blob.bin"))
	got, _ := os.ReadFile(filepath.Join(dir, "blob.bin"))
	if diff := cmp.Diff(len(want), len(got)); diff != "" || string(want) != string(got) {
		t.Error("the copied module differs from the built one")
	}
}

// TestSyncCopiesIndex copies a multi-platform image (an index of two
// images) with its children.
func TestSyncCopiesIndex(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	idx, err := random.Index(1024, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := idx.Digest()
	repo, _ := name.NewRepository(w.vendor.Host + "/shop/api")
	p, err := w.client.NewPusher(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	src := repo.Digest(d.String())
	if err := p.Push(ctx, src, idx); err != nil {
		t.Fatal(err)
	}
	if _, err := builder.Sign(ctx, w.client, src, key(t, vendorKey)); err != nil {
		t.Fatal(err)
	}
	a := w.artifacts([]builder.Artifact{{Name: "image", Repository: repo.Name(), Digest: d.String()}})[0]
	if err := w.syncer(t).Sync(ctx, []schemas.Artifact{a}); err != nil {
		t.Fatal(err)
	}
	im, _ := idx.IndexManifest()
	local, _ := name.NewDigest(a.Local)
	for _, m := range append(im.Manifests, v1.Descriptor{Digest: d}) {
		if !w.present(t, local.Context().Digest(m.Digest.String()).String()) {
			t.Errorf("%s is missing from the install registry", m.Digest)
		}
	}
}

package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/crane"

	"nuon.dev/nuon/internal/trusttest"
	"nuon.dev/nuon/schemas"
)

// TestProvenanceDrillWithTheBinaries is the provenance half of the
// rotation drill's attacks, with nuon build and nuon release as vendor
// CI runs them, nuon server following main, and acme's long-running
// nuon-agent behind it, on real registries: the agent is given version 1
// of the trust root (builder-1 in its builders role), the vendor's cosign
// key and the source the provenance must name. A release built by builder-1 is synced and
// applied; then a release whose provenance comes from an unknown builder,
// one from another repository, and one whose attestation was swapped for
// builder-1's valid provenance of another digest are each refused, with
// nothing copied into the install's registry and the applied digest kept.
func TestProvenanceDrillWithTheBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries on real registries")
	}
	r := newReleaseDrill(t)
	builder1, builder1Pub := r.cosignKey(t, "builder-1")
	builderX, _ := r.cosignKey(t, "builder-x")
	// Version 1 of the root names builder-1.
	r.main(t, trusttest.Version{Version: 1, Expires: time.Now().AddDate(1, 0, 0), RootKeys: []string{"root-1", "root-2"}, Threshold: 2,
		Render: []trusttest.RenderKey{{Name: "render-a"}}, Builders: []trusttest.NamedKey{{Name: "builder-1", Key: builder1Pub}}}.File(t, "root-1", "root-2"))
	root, vendor := r.root, r.vendor

	const repo = "git+https://git.example.com/vendor/shop"
	// build builds the image from fixtures (2.4.0) or fixtures/previous
	// (2.3.0) with a builder's key, from sourceRepo at a release tag,
	// and returns the build report's file and the image's digest.
	build := func(name, from, builderFile, sourceRepo, tag string) (string, string) {
		t.Helper()
		return r.build(t, name, from, "--key", filepath.Join(root, "fixtures", "keys", "cosign.key"),
			"--builder-key", builderFile, "--builder-id", "https://builders.example.com/"+strings.TrimSuffix(filepath.Base(builderFile), ".key"),
			"--source-repo", sourceRepo, "--source-ref", "refs/tags/"+tag, "--source-commit", strings.Repeat("c", 40))
	}
	// The install's agent runs all along behind nuon server, which
	// follows main and renders with render-a; the agent is given the
	// root's version 1, the vendor's key and the source provenance must
	// name.
	r.agentArgs = []string{"--vendor-key", filepath.Join(root, "fixtures", "keys", "cosign.pub"), "--provenance-source", repo + "=refs/tags/v*"}
	release := func(version, report string) (schemas.ComponentStatus, time.Duration) {
		t.Helper()
		return r.release(t, version, report)
	}
	inInstall := func(digest string) bool {
		t.Helper()
		return r.inInstall(t, digest)
	}

	good, goodDigest := build("good", filepath.Join(root, "fixtures", "previous"), builder1, repo, "v2.3.0")
	applied, _ := release("2.3.0", good)
	if applied.Phase != "Applied" || applied.Digests["image"] != goodDigest || !inInstall(goodDigest) {
		t.Fatalf("builder-1's release: %+v, want %s applied", applied, goodDigest)
	}
	refused := func(step, version, report, digest, reason string) {
		t.Helper()
		got, took := release(version, report)
		t.Logf("%s: refused %s after the render: %s", step, took.Round(100*time.Millisecond), got.Error)
		if got.Phase == "Applied" || !strings.Contains(got.Error, "provenance") || !strings.Contains(got.Error, reason) {
			t.Errorf("%s: api-image %s (%s), want a provenance refusal for %q", step, got.Phase, got.Error, reason)
		}
		if got.Digests["image"] == digest {
			t.Errorf("%s: %s applied", step, digest)
		}
		if inInstall(digest) {
			t.Errorf("%s: %s was copied into the install's registry", step, digest)
		}
	}
	unknown, badDigest := build("unknown", filepath.Join(root, "fixtures"), builderX, repo, "v2.4.0")
	if badDigest == goodDigest {
		t.Fatal("the two builds made one digest")
	}
	refused("provenance from an unknown builder", "2.4.0", unknown, badDigest, "builder")
	other, _ := build("other", filepath.Join(root, "fixtures"), builder1, "git+https://git.example.com/someone/else", "v2.4.1")
	refused("provenance from another repository", "2.4.1", other, badDigest, "someone/else")
	// builder-1's valid provenance of the good digest, put where the bad
	// digest's attestations are looked up.
	att := func(d string) string { return vendor.Host + "/shop/api:" + strings.Replace(d, ":", "-", 1) + ".att" }
	if err := crane.Copy(att(goodDigest), att(badDigest), crane.Insecure); err != nil {
		t.Fatal(err)
	}
	refused("a digest swapped under a valid provenance", "2.4.2", other, badDigest, goodDigest)
	if !inInstall(goodDigest) {
		t.Errorf("the applied %s is gone from the install's registry", goodDigest)
	}
}

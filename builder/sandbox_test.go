package builder_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// TestSandboxTargets builds the sandbox nuon.yaml declares from this
// repository's sandboxes/: one terraform module per sandbox, each named
// after its folder, in the sandbox's repository, signed.
func TestSandboxTargets(t *testing.T) {
	v := newVendor(t, "")
	v.app.Sandbox = &schemas.AppSandbox{Repository: v.host + "/shop/sandbox"}
	ts, err := builder.Targets(v.app, fixtures, map[string]string{schemas.SandboxComponent: "../sandboxes"}, []string{schemas.SandboxComponent})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tg := range ts {
		got = append(got, tg.Component.Name+"/"+tg.Artifact+"="+filepath.ToSlash(tg.Source))
	}
	want := []string{"sandbox/aws-eks=../sandboxes/aws-eks", "sandbox/local=../sandboxes/local"}
	if !slices.Equal(got, want) {
		t.Fatalf("targets %v, want %v", got, want)
	}
	arts, err := builder.Build(context.Background(), ts, builder.Options{Client: v.client, Signer: v.key})
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range arts {
		if a.Component != schemas.SandboxComponent || a.Name != ts[i].Artifact || a.Type != schemas.TypeTerraform ||
			a.Repository != v.host+"/shop/sandbox" || !a.Signed || !strings.HasPrefix(a.Digest, "sha256:") {
			t.Errorf("artifact %d: %+v", i, a)
		}
	}
	if arts[0].Digest == arts[1].Digest {
		t.Error("aws-eks and local built to one digest")
	}

	// All components: the sandbox comes last, and without its folders it
	// is missing.
	if _, err := builder.Targets(v.app, fixtures, nil, nil); err == nil || !strings.Contains(err.Error(), "no sandbox folders in ../fixtures/sandboxes") {
		t.Errorf("a declared sandbox without sources: %v", err)
	}
	v.app.Sandbox = nil
	if _, err := builder.Targets(v.app, fixtures, map[string]string{schemas.SandboxComponent: "../sandboxes"}, nil); err == nil {
		t.Error("a sandbox source was accepted for an app that declares none")
	}
}

// TestReleaseSandbox records a sandbox version, one artifact per
// sandbox, in releases/sandbox.yaml.
func TestReleaseSandbox(t *testing.T) {
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS("../fixtures/tenant")); err != nil {
		t.Fatal(err)
	}
	app, _ := os.ReadFile(filepath.Join(src, "nuon.yaml"))
	os.WriteFile(filepath.Join(src, "nuon.yaml"), append(app, "sandbox:\n  repository: registry.vendor.example/shop/sandbox\n"...), 0o644)
	bare := filepath.Join(t.TempDir(), "tenant.git")
	gittest.InitBare(t, bare)
	gittest.CommitDir(t, bare, "main", src, "shop")
	repo, err := gitrepo.Open(bare)
	if err != nil {
		t.Fatal(err)
	}
	r := builder.Record{Component: schemas.SandboxComponent, Version: "0.1.0", Artifacts: map[string]schemas.ReleaseArtifact{
		"local":   {Repository: "registry.vendor.example/shop/sandbox", Digest: digestN(1)},
		"aws-eks": {Repository: "registry.vendor.example/shop/sandbox", Digest: digestN(2)},
	}}
	if _, err := builder.Release(context.Background(), repo, []builder.Record{r}, releaseOpts()); err != nil {
		t.Fatal(err)
	}
	want := `component: sandbox
versions:
  - version: 0.1.0
    artifacts:
      aws-eks:
        digest: ` + digestN(2) + `
      local:
        digest: ` + digestN(1)
	if d := cmp.Diff(want, show(t, bare, "main:releases/sandbox.yaml")); d != "" {
		t.Errorf("releases/sandbox.yaml (-want +got):\n%s", d)
	}
}

package publish_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/publish"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// TestRender renders the sample tenant into a bare repository: every
// install gets its ref, a dry run moves nothing, and a second render of the
// same main changes nothing.
func TestRender(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tenant.git")
	gittest.InitBare(t, dir)
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS("../../fixtures/tenant")); err != nil {
		t.Fatal(err)
	}
	gittest.CommitDir(t, dir, "main", src, "tenant")
	key, err := signature.LoadSigner("../../fixtures/keys/render")
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
	ctx := context.Background()
	render := func(dry bool) int {
		repo, err := gitrepo.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		res, err := publish.Render(ctx, repo, key, publish.Options{DryRun: dry, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return res.ChangedCount()
	}
	if n := render(true); n != 3 {
		t.Fatalf("dry run: %d changed, want 3", n)
	}
	if out, _ := gittest.Run(dir, nil, "for-each-ref", schemas.InstallRefPrefix); out != "" {
		t.Fatalf("dry run moved refs:\n%s", out)
	}
	if n := render(false); n != 3 {
		t.Fatalf("render: %d changed, want 3", n)
	}
	got := gittest.Git(t, dir, "for-each-ref", "--format=%(refname)", "refs/heads/nuon/")
	want := "refs/heads/nuon/installs/acme\nrefs/heads/nuon/installs/globex\nrefs/heads/nuon/installs/initech\nrefs/heads/nuon/rendered"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("refs (-want +got):\n%s", diff)
	}
	if n := render(false); n != 0 {
		t.Fatalf("second render: %d changed, want 0", n)
	}
}

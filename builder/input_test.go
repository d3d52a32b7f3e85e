package builder_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// TestLoadAppTooLarge refuses a 50 MB app file from its size, naming it.
func TestLoadAppTooLarge(t *testing.T) {
	file := filepath.Join(t.TempDir(), "nuon.yaml")
	if err := os.WriteFile(file, []byte("name: shop\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(file, 50<<20); err != nil {
		t.Fatal(err)
	}
	_, err := builder.LoadApp(file)
	var ps schemas.Problems
	if !errors.As(err, &ps) || !strings.Contains(err.Error(), "nuon.yaml: is 50 MiB, more than the 1 MiB a source file may be") {
		t.Fatalf("LoadApp: %v, want the file refused for its size", err)
	}
}

// TestReleaseTooLarge releases into a release record over the cap on a
// source file: the release is refused, naming the file, and main does
// not move.
func TestReleaseTooLarge(t *testing.T) {
	bare := filepath.Join(t.TempDir(), "tenant.git")
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS("../fixtures/tenant")); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(src, "releases", "network.yaml")
	old, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, append([]byte("# "+strings.Repeat("x", 2<<20)+"\n"), old...), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.InitBare(t, bare)
	gittest.CommitDir(t, bare, "main", src, "shop")
	before := gittest.Git(t, bare, "rev-parse", "main")
	repo, err := gitrepo.Open(bare)
	if err != nil {
		t.Fatal(err)
	}
	_, err = builder.Release(context.Background(), repo, []builder.Record{record("network", "9.0.0", "module", 1)}, releaseOpts())
	var ps schemas.Problems
	if !errors.As(err, &ps) || !strings.Contains(err.Error(), "releases/network.yaml: is 2.0 MiB") {
		t.Fatalf("release: %v, want releases/network.yaml refused for its size", err)
	}
	if after := gittest.Git(t, bare, "rev-parse", "main"); after != before {
		t.Errorf("main moved from %s to %s", before, after)
	}
}

package renderer_test

import (
	"github.com/go-git/go-git/v5/plumbing"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestGolden renders the fixture tenant into a bare repository and
// compares what git holds with testdata/: every install's files, and the
// whole signed rendered and per-install commits. Ed25519 signatures are
// deterministic, so with the clock fixed the signed commits are the same
// bytes in every run. Run with -update to rewrite testdata/.
func TestGolden(t *testing.T) {
	tn := newTenant(t)
	res := tn.render(options(t))
	if len(res.Installs) == 0 {
		t.Fatal("no installs rendered")
	}
	for _, in := range res.Installs {
		got := readTree(t, tn.dir, plumbing.ReferenceName(schemas.RenderedRef).String()+":"+schemas.RenderedInstallPath(in.ID))
		goldenDir(t, filepath.Join("testdata", "golden", in.ID), got)
	}
	// The rendered tree's layout: installs/<shard>/<id>/ and
	// issued/<shard>/<id>.
	goldenFile(t, filepath.Join("testdata", "commits", "rendered-tree"), gitRaw(t, tn.dir, "ls-tree", "-r", "-t", "--full-tree", plumbing.ReferenceName(schemas.RenderedRef).String()))
	goldenFile(t, filepath.Join("testdata", "commits", "rendered"), gitRaw(t, tn.dir, "cat-file", "commit", plumbing.ReferenceName(schemas.RenderedRef).String()))
	for _, in := range res.Installs {
		goldenFile(t, filepath.Join("testdata", "commits", "installs", in.ID), gitRaw(t, tn.dir, "cat-file", "commit", plumbing.ReferenceName(schemas.InstallRef(in.ID)).String()))
	}
}

// goldenDir compares files (path to content) with the files under dir.
func goldenDir(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if *update {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			p := filepath.Join(dir, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("read golden files (run with -update to write them): %v", err)
	}
	want := map[string]string{}
	for p, b := range gittest.Files(t, dir) {
		want[p] = string(b)
	}
	if diff := cmp.Diff(want, files); diff != "" {
		t.Errorf("%s differs from the rendered files (-want +got); run with -update if the change is intended:\n%s", dir, diff)
	}
}

// goldenFile compares got with the file at name.
func goldenFile(t *testing.T, name string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(name)
	if err != nil {
		t.Fatalf("read golden file (run with -update to write it): %v", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got); run with -update if the change is intended:\n%s", name, diff)
	}
}

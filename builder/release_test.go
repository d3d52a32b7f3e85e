package builder_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// tenantRepo is a bare repository whose main holds the sample tenant.
func tenantRepo(t *testing.T, dir string) string {
	t.Helper()
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS("../fixtures/tenant")); err != nil {
		t.Fatal(err)
	}
	gittest.InitBare(t, dir)
	gittest.CommitDir(t, dir, "main", src, "shop")
	return dir
}

func digestN(n int) string { return fmt.Sprintf("sha256:%064x", n) }

func releaseOpts() builder.ReleaseOptions {
	return builder.ReleaseOptions{
		Name: "Vendor CI", Email: "ci@vendor.example",
		Now: func() time.Time { return time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC) },
	}
}

func record(comp, version, art string, n int) builder.Record {
	return builder.Record{Component: comp, Version: version, Artifacts: map[string]schemas.ReleaseArtifact{
		art: {Repository: "registry.vendor.example/shop/" + comp, Digest: digestN(n), MediaType: "application/vnd.oci.image.manifest.v1+json"},
	}}
}

func show(t *testing.T, repo, rev string) string {
	t.Helper()
	return gittest.Git(t, repo, "show", rev)
}

func TestRelease(t *testing.T) {
	ctx := context.Background()
	bare := tenantRepo(t, filepath.Join(t.TempDir(), "tenant.git"))
	before := gittest.Git(t, bare, "rev-parse", "main")
	repo, err := gitrepo.Open(bare)
	if err != nil {
		t.Fatal(err)
	}
	key, err := signature.LoadSigner("../fixtures/keys/render")
	if err != nil {
		t.Fatal(err)
	}
	o := releaseOpts()
	o.Signer = key

	// A new version is appended, in one signed commit on main.
	res, err := builder.Release(ctx, repo, []builder.Record{record("network", "1.1.0", "module", 7)}, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Commit == "" || len(res.Added) != 1 {
		t.Fatalf("result %+v", res)
	}
	after := gittest.Git(t, bare, "rev-parse", "main")
	if after != res.Commit || gittest.Git(t, bare, "rev-parse", "main^") != before {
		t.Fatalf("main %s, want %s on top of %s", after, res.Commit, before)
	}
	old, _ := os.ReadFile("../fixtures/tenant/releases/network.yaml")
	want := string(old) + `  - version: 1.1.0
    artifacts:
      module:
        digest: ` + digestN(7) + `
        mediaType: application/vnd.oci.image.manifest.v1+json
`
	if diff := cmp.Diff(want, show(t, bare, "main:releases/network.yaml")+"\n"); diff != "" {
		t.Errorf("releases/network.yaml (-want +got):\n%s", diff)
	}
	if files := gittest.Git(t, bare, "diff", "--name-only", before, after); files != "releases/network.yaml" {
		t.Errorf("the release changed %q", files)
	}
	allowed := filepath.Join(t.TempDir(), "allowed_signers")
	os.WriteFile(allowed, []byte("ci "+key.AuthorizedKey()+"\n"), 0o644)
	if _, err := gittest.Run(bare, nil, "-c", "gpg.ssh.allowedSignersFile="+allowed, "verify-commit", "main"); err != nil {
		t.Errorf("stock git does not verify the release commit: %v", err)
	}
	// The source on main still loads, and the new version is released.
	src := loadMain(t, bare)
	if n := len(src.Releases["network"].Versions); n != 2 {
		t.Errorf("network has %d versions", n)
	}

	// The same digests again: nothing to do.
	res, err = builder.Release(ctx, repo, []builder.Record{record("network", "1.1.0", "module", 7)}, o)
	if err != nil || res.Commit != "" || len(res.Unchanged) != 1 {
		t.Fatalf("a repeated release: %+v, %v", res, err)
	}
	// Other digests for a released version: refused, nothing written.
	_, err = builder.Release(ctx, repo, []builder.Record{record("database", "1.2.0", "module", 9), record("network", "1.1.0", "module", 8)}, o)
	if !errors.Is(err, builder.ErrConflict) {
		t.Fatalf("overwriting a version: %v", err)
	}
	if now := gittest.Git(t, bare, "rev-parse", "main"); now != after {
		t.Fatalf("a refused release moved main to %s", now)
	}
	// A component not in nuon.yaml, a bad version: refused.
	if _, err := builder.Release(ctx, repo, []builder.Record{record("cache", "1.0.0", "module", 1)}, o); err == nil {
		t.Error("released a component the app does not have")
	}
	if _, err := builder.Release(ctx, repo, []builder.Record{record("network", "not a version", "module", 1)}, o); err == nil {
		t.Error("released an invalid version")
	}
}

func loadMain(t *testing.T, bare string) *schemas.Source {
	t.Helper()
	dir := t.TempDir()
	gittest.Git(t, "", "clone", "--quiet", bare, dir)
	src, err := schemas.Load(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func TestReleaseNewFile(t *testing.T) {
	bare := filepath.Join(t.TempDir(), "tenant.git")
	src := t.TempDir()
	os.CopyFS(src, os.DirFS("../fixtures/tenant"))
	// Only nuon.yaml and installs: vendor CI records the first releases.
	os.RemoveAll(filepath.Join(src, "releases"))
	os.RemoveAll(filepath.Join(src, "channels"))
	os.RemoveAll(filepath.Join(src, "installs"))
	gittest.InitBare(t, bare)
	gittest.CommitDir(t, bare, "main", src, "shop")
	repo, err := gitrepo.Open(bare)
	if err != nil {
		t.Fatal(err)
	}
	res, err := builder.Release(context.Background(), repo, []builder.Record{record("network", "1.0.0", "module", 1), record("database", "1.0.0", "module", 2)}, releaseOpts())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Added) != 2 {
		t.Fatalf("%+v", res)
	}
	want := "component: network\nversions:\n  - version: 1.0.0\n    artifacts:\n      module:\n        digest: " + digestN(1) + "\n        mediaType: application/vnd.oci.image.manifest.v1+json"
	if got := show(t, bare, "main:releases/network.yaml"); got != want {
		t.Errorf("releases/network.yaml:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(show(t, bare, "main:releases/database.yaml"), digestN(2)) {
		t.Error("database's release is missing")
	}
}

// TestConcurrentReleases releases four components at once through a
// smart-HTTP server: each push races the others and retries on a moved
// main, and all four land.
func TestConcurrentReleases(t *testing.T) {
	srv := gittest.NewServer(t)
	bare := srv.InitBare(t, "tenant.git")
	tenantRepo(t, bare+".tmp")
	gittest.Git(t, bare+".tmp", "push", "--quiet", bare, "main")
	comps := []string{"network", "database", "api", "dashboards"}
	arts := map[string]string{"network": "module", "database": "module", "api": "chart", "dashboards": "manifests"}
	var wg sync.WaitGroup
	errs := make([]error, len(comps))
	for i, c := range comps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			repo, err := gitrepo.Open(srv.URL("tenant.git"), gitrepo.WithCacheDir(t.TempDir()))
			if err != nil {
				errs[i] = err
				return
			}
			_, errs[i] = builder.Release(context.Background(), repo, []builder.Record{record(c, "9.0.0", arts[c], 100+i)}, releaseOpts())
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("release %s: %v", comps[i], err)
		}
	}
	src := loadMain(t, bare)
	for _, c := range comps {
		vs := src.Releases[c].Versions
		if vs[len(vs)-1].Version != "9.0.0" {
			t.Errorf("%s: last version %s", c, vs[len(vs)-1].Version)
		}
	}
	if n := gittest.Git(t, bare, "rev-list", "--count", "main"); n != "5" {
		t.Errorf("main has %s commits, want 5", n)
	}
}

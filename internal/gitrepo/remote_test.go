package gitrepo_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gitauth"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
)

// TestRemote mirrors a repository over HTTP and over SSH and moves its
// refs: fetch, prune, an atomic push and a push from a stale read.
func TestRemote(t *testing.T) {
	httpSrv := gittest.NewServer(t)
	sshd := gittest.NewSSHServer(t, "")
	auth, err := gitauth.Options{SSHKey: sshd.ClientKey, KnownHosts: sshd.KnownHosts}.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range []struct {
		name string
		root string
		url  func(string) string
	}{
		{"http", httpSrv.Root, httpSrv.URL},
		{"ssh", sshd.Root, sshd.URL},
	} {
		t.Run(tr.name, func(t *testing.T) {
			ctx := context.Background()
			dir := filepath.Join(tr.root, tr.name+".git")
			gittest.InitBare(t, dir)
			gittest.Git(t, dir, "config", "http.receivepack", "true")
			src := t.TempDir()
			var commits []plumbing.Hash
			for _, content := range []string{"one", "two"} {
				if err := os.WriteFile(filepath.Join(src, "f"), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
				commits = append(commits, plumbing.NewHash(gittest.CommitDir(t, dir, "main", src, content)))
			}
			gittest.Git(t, dir, "update-ref", "refs/heads/gone", commits[0].String())

			r, err := gitrepo.Open(tr.url(tr.name+".git"), gitrepo.WithCacheDir(t.TempDir()), gitrepo.WithCredentials(auth))
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Fetch(ctx, "refs/heads/"); err != nil {
				t.Fatal(err)
			}
			if h, err := r.Resolve("main"); err != nil || h != commits[1] {
				t.Fatalf("main = %s, %v; want %s", h, err, commits[1])
			}
			gittest.Git(t, dir, "update-ref", "-d", "refs/heads/gone")
			if err := r.Fetch(ctx, "refs/heads/"); err != nil {
				t.Fatal(err)
			}
			if h, _ := r.Ref("refs/heads/gone"); !h.IsZero() {
				t.Errorf("refs/heads/gone not pruned from the mirror")
			}

			err = r.Apply(ctx, []gitrepo.Update{
				{Name: "refs/heads/a", New: commits[0]},
				{Name: "refs/heads/b", New: commits[1]},
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := gittest.Git(t, dir, "rev-parse", "refs/heads/b"); got != commits[1].String() {
				t.Errorf("refs/heads/b = %s, want %s", got, commits[1])
			}
			// Someone moved a; an update from the old read is stale and
			// the atomic push moves neither ref.
			gittest.Git(t, dir, "update-ref", "refs/heads/a", commits[1].String())
			err = r.Apply(ctx, []gitrepo.Update{
				{Name: "refs/heads/b", Old: commits[1], New: commits[0]},
				{Name: "refs/heads/a", Old: commits[0], New: commits[1]},
			})
			if !errors.Is(err, gitrepo.ErrStale) {
				t.Fatalf("stale push: %v, want ErrStale", err)
			}
			if got := gittest.Git(t, dir, "rev-parse", "refs/heads/b"); got != commits[1].String() {
				t.Errorf("refs/heads/b moved to %s in a refused atomic push", got)
			}

			// An archive: b copied under refs/nuon/archive/ and deleted in
			// one atomic push; from a stale read, neither happens.
			archive := []gitrepo.Update{
				{Name: "refs/nuon/archive/b", New: commits[1]},
				{Name: "refs/heads/b", Old: commits[0], New: plumbing.ZeroHash},
			}
			if err := r.Apply(ctx, archive); !errors.Is(err, gitrepo.ErrStale) {
				t.Fatalf("stale delete: %v, want ErrStale", err)
			}
			if _, err := gittest.Run(dir, nil, "rev-parse", "--verify", "--quiet", "refs/nuon/archive/b"); err == nil {
				t.Error("refs/nuon/archive/b made by a refused atomic push")
			}
			archive[1].Old = commits[1]
			if err := r.Apply(ctx, archive); err != nil {
				t.Fatal(err)
			}
			if got := gittest.Git(t, dir, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/b", "refs/nuon/"); got != "refs/nuon/archive/b "+commits[1].String() {
				t.Errorf("refs after the archive: %q, want only refs/nuon/archive/b at %s", got, commits[1])
			}
			if h, _ := r.Ref("refs/heads/b"); !h.IsZero() {
				t.Error("refs/heads/b is still in the mirror")
			}
		})
	}
}

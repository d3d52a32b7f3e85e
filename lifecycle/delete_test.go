package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/gitauth"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
)

// tenantWithInstall makes a bare tenant repository at dir whose main has
// installs/acme.yaml and installs/other.yaml, with acme's desired and
// status refs (and other's), and returns acme's two commits.
func tenantWithInstall(t *testing.T, dir string) (desired, status string) {
	t.Helper()
	gittest.InitBare(t, dir)
	gittest.Git(t, dir, "config", "http.receivepack", "true")
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "installs"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(src, "installs", "acme.yaml"), "channel: stable\ndeleted: true\n")
	writeFile(t, filepath.Join(src, "installs", "other.yaml"), "channel: stable\n")
	main := gittest.CommitDir(t, dir, "main", src, "two installs")
	desired = gittest.CommitDir(t, dir, "nuon/installs/acme", t.TempDir(), "acme: rendered with no component")
	status = gittest.CommitDir(t, dir, "nuon/status/acme", t.TempDir(), "acme: every component deleted")
	gittest.Git(t, dir, "update-ref", "refs/heads/nuon/installs/other", main)
	gittest.Git(t, dir, "update-ref", "refs/heads/nuon/status/other", main)
	return desired, status
}

// TestArchiveRemote runs the archive phase against a tenant repository
// over smart HTTP and over SSH (git's own http-backend and receive-pack
// behind Debian's sshd): installs/acme.yaml leaves main, and acme's refs
// move under refs/nuon/archive/acme/ in one atomic push that deletes the
// live ones; other installs are untouched; a re-run has nothing to do.
func TestArchiveRemote(t *testing.T) {
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
			dir := filepath.Join(tr.root, "tenant-"+tr.name+".git")
			desired, status := tenantWithInstall(t, dir)
			cache := t.TempDir()
			o := Options{ID: "acme", Repo: tr.url("tenant-" + tr.name + ".git"), Dir: t.TempDir(),
				OpenRepo: func(location string) (*gitrepo.Repo, error) {
					return gitrepo.Open(location, gitrepo.WithCacheDir(cache), gitrepo.WithCredentials(auth))
				}}
			if err := o.defaults(false); err != nil {
				t.Fatal(err)
			}
			before := gittest.Git(t, dir, "rev-parse", "main")
			res, detail, err := archive(ctx, &o, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res != Done {
				t.Errorf("archive: %s %s, want done", res, detail)
			}
			want := map[string]string{
				"refs/nuon/archive/acme/installs": desired,
				"refs/nuon/archive/acme/status":   status,
				"refs/heads/nuon/installs/other":  before,
				"refs/heads/nuon/status/other":    before,
			}
			got := map[string]string{}
			for _, line := range strings.Split(gittest.Git(t, dir, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/nuon/", "refs/nuon/"), "\n") {
				name, h, _ := strings.Cut(line, " ")
				got[name] = h
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("refs (-want +got):\n%s", d)
			}
			if files := gittest.Git(t, dir, "ls-tree", "--name-only", "main", "installs/"); files != "installs/other.yaml" {
				t.Errorf("main's installs/: %q, want only other.yaml", files)
			}
			if parent := gittest.Git(t, dir, "rev-parse", "main^"); parent != before {
				t.Errorf("main's parent %s, want %s: one commit removes the install", parent, before)
			}

			res, detail, err = archive(ctx, &o, nil)
			if err != nil || res != Unchanged {
				t.Errorf("re-run: %s %s %v, want unchanged", res, detail, err)
			}
		})
	}
}

package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/gitauth"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
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

// TestWaitDeletedOnDeletedRender: the components phase counts the agent's
// status only on the desired state rendered deleted. With a tenant server
// in front, install delete marks main and the server renders it a moment
// later: until then the desired ref holds the state before, and a status
// in sync with it that lists no component (or no status yet) must not end
// the wait. Once the deleted state is rendered and the agent reports on it
// with no component, the phase is done.
func TestWaitDeletedOnDeletedRender(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "tenant.git")
	gittest.InitBare(t, dir)
	pub, err := os.ReadFile("../fixtures/keys/acme.pub")
	if err != nil {
		t.Fatal(err)
	}
	key, err := signature.LoadSigner("../fixtures/keys/acme")
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "installs"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(src, "installs", "acme.yaml"), "channel: stable\nagentKey: "+strings.TrimSpace(string(pub))+"\ndeleted: true\n")
	gittest.CommitDir(t, dir, "main", src, "acme marked deleted")

	// render makes acme's desired state, deleted or not, and its agent's
	// status in sync with it, listing no component.
	var status plumbing.Hash
	render := func(deleted bool) {
		t.Helper()
		state := t.TempDir()
		writeFile(t, filepath.Join(state, "install.json"), fmt.Sprintf(`{"install":"acme","components":[],"deleted":%v}`, deleted))
		desired := gittest.CommitDir(t, dir, "nuon/installs/acme", state, "acme rendered")
		repo, err := gitrepo.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		b := gitobj.NewBatch()
		blob := b.Add(plumbing.BlobObject, fmt.Appendf(nil, `{"install":"acme","desired":%q,"applied":%q,"phase":"Ready","components":{}}`, desired, desired))
		var parents []plumbing.Hash
		if !status.IsZero() {
			parents = []plumbing.Hash{status}
		}
		c, err := b.Commit(gitobj.Commit{Tree: b.Tree([]gitobj.Entry{{Name: schemas.StatusFile, Hash: blob, Mode: filemode.Regular}}), Parents: parents,
			Author:  object.Signature{Name: "nuon agent acme", Email: "acme@nuon.invalid", When: time.Now()},
			Message: "status\n\n" + schemas.TrailerInstall + ": acme\n"}, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Flush(repo.Storer()); err != nil {
			t.Fatal(err)
		}
		gittest.Git(t, dir, "update-ref", schemas.StatusRef("acme"), c.String())
		status = c
	}
	o := Options{ID: "acme", Repo: dir, Dir: t.TempDir(), DeleteTimeout: 1500 * time.Millisecond}
	if err := o.defaults(false); err != nil {
		t.Fatal(err)
	}

	render(false)
	res, detail, err := waitDeleted(ctx, &o, nil)
	if err == nil || !strings.Contains(err.Error(), "not rendered deleted") {
		t.Fatalf("on the state before the deleted render: %s %q %v; want it to wait, then fail saying so", res, detail, err)
	}
	render(true)
	res, detail, err = waitDeleted(ctx, &o, nil)
	if err != nil || res != Done {
		t.Fatalf("on the deleted render: %s %q %v; want done", res, detail, err)
	}
}

// recreate puts installs/acme.yaml back on main of the tenant repository
// at dir (an install created again under the id) and gives acme new live
// refs: a desired state continuing desiredParent ("" for none: the
// renderer continues the commit it last issued for the id, when it still
// has it) and a first status of the new agent. It returns the two tips.
func recreate(t *testing.T, dir, desiredParent, what string) (desired, status string) {
	t.Helper()
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "installs"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(src, "installs", "acme.yaml"), "channel: stable\ndeleted: true\n")
	writeFile(t, filepath.Join(src, "installs", "other.yaml"), "channel: stable\n")
	gittest.CommitDir(t, dir, "main", src, "acme again: "+what)
	commit := func(ref, parent, msg string) string {
		args := []string{"-c", "user.name=nuon test", "-c", "user.email=test@nuon.invalid", "commit-tree", gittest.Git(t, dir, "hash-object", "-t", "tree", "-w", "--stdin"), "-m", msg}
		if parent != "" {
			args = append(args, "-p", parent)
		}
		h := gittest.Git(t, dir, args...)
		gittest.Git(t, dir, "update-ref", ref, h)
		return h
	}
	desired = commit(schemas.InstallRef("acme"), desiredParent, "acme: rendered deleted, "+what)
	status = commit(schemas.StatusRef("acme"), "", "acme: every component deleted, "+what)
	return desired, status
}

// archiveRefs lists the refs under refs/nuon/archive/ and acme's live
// refs in the repository at dir.
func archiveRefs(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	out := gittest.Git(t, dir, "for-each-ref", "--format=%(refname) %(objectname)", "refs/nuon/archive/", schemas.InstallRef("acme"), schemas.StatusRef("acme"))
	for _, line := range strings.Split(out, "\n") {
		if name, h, ok := strings.Cut(line, " "); ok {
			got[name] = h
		}
	}
	return got
}

// TestArchiveAgain: acme is deleted, created again under the same id and
// deleted again, three times, on a local path and over smart HTTP. Each
// deletion archives its refs as a new generation and leaves every earlier
// one as it was; a re-run after the move has nothing to do, one after a
// crash between removing the install from main and moving the refs moves
// them, and one after a move that copied the refs but did not delete them
// (a copy made by hand, or by a tool that is not atomic) deletes them
// without making another generation.
func TestArchiveAgain(t *testing.T) {
	httpSrv := gittest.NewServer(t)
	for _, tr := range []struct {
		name string
		url  func(dir string) string
	}{
		{"local", func(dir string) string { return dir }},
		{"http", func(dir string) string { return httpSrv.URL(filepath.Base(dir)) }},
	} {
		t.Run(tr.name, func(t *testing.T) {
			ctx := context.Background()
			dir := filepath.Join(httpSrv.Root, "again-"+tr.name+".git")
			desired1, status1 := tenantWithInstall(t, dir)
			cache := t.TempDir()
			o := Options{ID: "acme", Repo: tr.url(dir), Dir: t.TempDir(),
				OpenRepo: func(location string) (*gitrepo.Repo, error) {
					return gitrepo.Open(location, gitrepo.WithCacheDir(cache))
				}}
			if err := o.defaults(false); err != nil {
				t.Fatal(err)
			}
			run := func(step, want string) {
				t.Helper()
				res, detail, err := archive(ctx, &o, nil)
				if err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				if res != want {
					t.Errorf("%s: %s %s, want %s", step, res, detail, want)
				}
			}
			check := func(step string, want map[string]string) {
				t.Helper()
				if d := cmp.Diff(want, archiveRefs(t, dir)); d != "" {
					t.Errorf("%s: refs (-want +got):\n%s", step, d)
				}
			}
			gen1 := map[string]string{
				"refs/nuon/archive/acme/installs": desired1,
				"refs/nuon/archive/acme/status":   status1,
			}
			run("first delete", Done)
			check("first delete", gen1)

			// Created again; the renderer continues the desired state it
			// last issued for the id.
			desired2, status2 := recreate(t, dir, desired1, "second install")
			run("second delete", Done)
			want := map[string]string{
				"refs/nuon/archive/acme/2/installs": desired2,
				"refs/nuon/archive/acme/2/status":   status2,
			}
			for k, v := range gen1 {
				want[k] = v
			}
			check("second delete", want)
			run("re-run of the second delete", Unchanged)
			check("re-run of the second delete", want)

			// Created again, and deleted by a run that stopped after
			// removing it from main: the re-run moves the refs.
			desired3, status3 := recreate(t, dir, "", "third install")
			src := t.TempDir()
			if err := os.MkdirAll(filepath.Join(src, "installs"), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(src, "installs", "other.yaml"), "channel: stable\n")
			gittest.CommitDir(t, dir, "main", src, "acme: remove the deleted install")
			run("re-run after removing from main", Done)
			want["refs/nuon/archive/acme/3/installs"] = desired3
			want["refs/nuon/archive/acme/3/status"] = status3
			check("re-run after removing from main", want)

			// Created again, and the refs copied as generation 4 but not
			// deleted: the re-run deletes them, into generation 4.
			desired4, status4 := recreate(t, dir, desired3, "fourth install")
			gittest.Git(t, dir, "update-ref", "refs/nuon/archive/acme/4/installs", desired4)
			gittest.Git(t, dir, "update-ref", "refs/nuon/archive/acme/4/status", status4)
			run("re-run after copying the refs", Done)
			want["refs/nuon/archive/acme/4/installs"] = desired4
			want["refs/nuon/archive/acme/4/status"] = status4
			check("re-run after copying the refs", want)
			run("last re-run", Unchanged)
			check("last re-run", want)
			if got := gittest.Git(t, dir, "ls-tree", "--name-only", "main", "installs/"); got != "installs/other.yaml" {
				t.Errorf("main's installs/: %q, want only other.yaml", got)
			}
		})
	}
}

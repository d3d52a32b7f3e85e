package gitproto

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/internal/gittest"
)

// destination is a storer to fetch into and, for one on disk, the bare
// repository that holds it, so the git CLI can check it.
type destination struct {
	name string
	new  func(t *testing.T) (storer.Storer, string)
}

var destinations = []destination{
	{"memory", func(t *testing.T) (storer.Storer, string) { return memory.NewStorage(), "" }},
	{"disk", func(t *testing.T) (storer.Storer, string) {
		dir := filepath.Join(t.TempDir(), "agent.git")
		gittest.InitBare(t, dir)
		return filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault()), dir
	}},
}

func TestFetch(t *testing.T) {
	f := newFixture(t, 10)
	c := &Client{URL: f.url}
	want := f.commits[1]
	for _, d := range destinations {
		t.Run(d.name, func(t *testing.T) {
			st, dir := d.new(t)
			f.srv.Reset()
			n, err := c.Fetch(context.Background(), st, []plumbing.Hash{want}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if n <= 0 || n >= f.srv.Bytes() {
				t.Errorf("Fetch = %d pack bytes, want between 0 and the %d response bytes", n, f.srv.Bytes())
			}
			if got := f.srv.Requests(); got != 1 {
				t.Errorf("Fetch made %d requests, want 1", got)
			}
			checkTree(t, st, want, map[string]string{
				"README.md":              "tenant\n",
				"installs/a/values.yaml": strings.Repeat("replicas: 3\n", 200),
				"installs/b/values.yaml": strings.Repeat("replicas: 2\n", 200),
			})
			checkTree(t, st, f.commits[0], map[string]string{
				"installs/a/values.yaml": strings.Repeat("replicas: 1\n", 200),
			})
			if dir != "" {
				gitCheck(t, dir, want, "installs/a/values.yaml", strings.Repeat("replicas: 3\n", 200))
			}
		})
	}
}

func TestFetchIncremental(t *testing.T) {
	f := newFixture(t, 10)
	c := &Client{URL: f.url}
	ctx := context.Background()
	old, cur := f.commits[0], f.commits[1]
	for _, d := range destinations {
		t.Run(d.name, func(t *testing.T) {
			full, _ := d.new(t)
			fullBytes, err := c.Fetch(ctx, full, []plumbing.Hash{cur}, nil)
			if err != nil {
				t.Fatal(err)
			}

			st, dir := d.new(t)
			if _, err := c.Fetch(ctx, st, []plumbing.Hash{old}, nil); err != nil {
				t.Fatal(err)
			}
			f.srv.Reset()
			n, err := c.Fetch(ctx, st, []plumbing.Hash{cur}, []plumbing.Hash{old})
			if err != nil {
				t.Fatal(err)
			}
			if n <= 0 || n >= fullBytes {
				t.Errorf("incremental fetch got %d pack bytes, want fewer than a full fetch's %d", n, fullBytes)
			}
			t.Logf("full fetch %d pack bytes, incremental %d (%d response bytes)", fullBytes, n, f.srv.Bytes())
			checkTree(t, st, cur, map[string]string{"installs/a/values.yaml": strings.Repeat("replicas: 3\n", 200)})
			if dir != "" {
				gitCheck(t, dir, cur, "installs/a/values.yaml", strings.Repeat("replicas: 3\n", 200))
			}

			f.srv.Reset()
			if n, err := c.Fetch(ctx, st, []plumbing.Hash{cur, old}, []plumbing.Hash{cur}); err != nil || n != 0 {
				t.Errorf("fetch of held commits = %d, %v; want 0, nil", n, err)
			}
			if got := f.srv.Requests(); got != 0 {
				t.Errorf("fetch of held commits made %d requests, want 0", got)
			}
		})
	}
}

// TestFetchUnheldHave checks that a have the storer lacks is not sent: the
// server would leave out objects the storer then misses.
func TestFetchUnheldHave(t *testing.T) {
	f := newFixture(t, 1)
	st := memory.NewStorage()
	if _, err := (&Client{URL: f.url}).Fetch(context.Background(), st, []plumbing.Hash{f.commits[1]}, []plumbing.Hash{f.commits[0]}); err != nil {
		t.Fatal(err)
	}
	checkTree(t, st, f.commits[0], map[string]string{"installs/b/values.yaml": strings.Repeat("replicas: 2\n", 200)})
}

func TestFetchUnknownWant(t *testing.T) {
	f := newFixture(t, 1)
	_, err := (&Client{URL: f.url}).Fetch(context.Background(), memory.NewStorage(), []plumbing.Hash{plumbing.NewHash(strings.Repeat("1", 40))}, nil)
	re, ok := errors.AsType[*RemoteError](err)
	if !ok || !strings.Contains(re.Message, "not our ref") {
		t.Fatalf("Fetch of an unknown object: %v, want a RemoteError saying not our ref", err)
	}
	if Temporary(err) {
		t.Errorf("Temporary(%v) = true", err)
	}
}

// checkTree reads commit's tree from st with go-git and compares files.
func checkTree(t *testing.T, st storer.EncodedObjectStorer, commit plumbing.Hash, files map[string]string) {
	t.Helper()
	c, err := object.GetCommit(st, commit)
	if err != nil {
		t.Fatalf("commit %s: %v", commit, err)
	}
	tree, err := c.Tree()
	if err != nil {
		t.Fatalf("tree of %s: %v", commit, err)
	}
	for name, want := range files {
		file, err := tree.File(name)
		if err != nil {
			t.Fatalf("%s:%s: %v", commit, name, err)
		}
		got, err := file.Contents()
		if err != nil {
			t.Fatalf("%s:%s: %v", commit, name, err)
		}
		if got != want {
			t.Errorf("%s:%s = %q, want %q", commit, name, truncate(got), truncate(want))
		}
	}
}

// gitCheck has the git CLI verify the bare repository dir after a fetch of
// commit: fsck finds every object complete and cat-file reads a file.
func gitCheck(t *testing.T, dir string, commit plumbing.Hash, path, want string) {
	t.Helper()
	gittest.Git(t, dir, "update-ref", "refs/heads/main", commit.String())
	gittest.Git(t, dir, "fsck", "--full", "--strict", "--no-dangling")
	if got := gittest.Git(t, dir, "cat-file", "blob", commit.String()+":"+path); got != strings.TrimSpace(want) {
		t.Errorf("git cat-file %s:%s = %q, want %q", commit, path, truncate(got), truncate(want))
	}
}

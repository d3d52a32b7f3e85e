package renderer_test

import (
	"context"
	"flag"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/renderer"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

const (
	fixtureTenant = "../fixtures/tenant"
	fixtureKeys   = "../fixtures/keys"
)

// renderTime is the clock of every test render: commits made at the same
// time from the same source are the same bytes.
var renderTime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func fixedClock() time.Time { return renderTime }

// loadSigner reads one of the fixture keys.
func loadSigner(tb testing.TB, name string) *signature.Signer {
	tb.Helper()
	s, err := signature.LoadSigner(filepath.Join(fixtureKeys, name))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// options are the render options of the tests: the fixture render key and
// the fixed clock.
func options(tb testing.TB) renderer.Options {
	return renderer.Options{Signer: loadSigner(tb, "render"), Now: fixedClock}
}

// tenant is a tenant repository for one test: a bare repository on disk
// whose main is committed, by the git CLI, from a working copy of the
// source files.
type tenant struct {
	tb  testing.TB
	dir string // the bare repository
	src string // the source files committed to main
}

// newTenant makes a bare repository whose main holds the fixture tenant.
// Its commits are dated, so the same files give the same main commit in
// every run.
func newTenant(tb testing.TB) *tenant {
	tb.Helper()
	tb.Setenv("GIT_AUTHOR_DATE", "2026-03-01T11:00:00Z")
	tb.Setenv("GIT_COMMITTER_DATE", "2026-03-01T11:00:00Z")
	t := &tenant{tb: tb, dir: filepath.Join(tb.TempDir(), "tenant.git"), src: filepath.Join(tb.TempDir(), "src")}
	gittest.InitBare(tb, t.dir)
	if err := os.CopyFS(t.src, os.DirFS(fixtureTenant)); err != nil {
		tb.Fatal(err)
	}
	t.commit("import the fixture tenant")
	return t
}

// commit commits the source files as main and returns the commit.
func (t *tenant) commit(msg string) string {
	t.tb.Helper()
	return gittest.CommitDir(t.tb, t.dir, "main", t.src, msg)
}

// write replaces one source file.
func (t *tenant) write(name, content string) {
	t.tb.Helper()
	p := filepath.Join(t.src, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.tb.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.tb.Fatal(err)
	}
}

// edit replaces the one occurrence of old in a source file by new.
func (t *tenant) edit(name, old, new string) {
	t.tb.Helper()
	b, err := os.ReadFile(filepath.Join(t.src, filepath.FromSlash(name)))
	if err != nil {
		t.tb.Fatal(err)
	}
	if n := strings.Count(string(b), old); n != 1 {
		t.tb.Fatalf("%s holds %q %d times, want once", name, old, n)
	}
	t.write(name, strings.Replace(string(b), old, new, 1))
}

// remove deletes one source file.
func (t *tenant) remove(name string) {
	t.tb.Helper()
	if err := os.Remove(filepath.Join(t.src, filepath.FromSlash(name))); err != nil {
		t.tb.Fatal(err)
	}
}

// open opens the repository afresh, as each run of nuon render does.
func (t *tenant) open() *gitrepo.Repo {
	t.tb.Helper()
	r, err := gitrepo.Open(t.dir)
	if err != nil {
		t.tb.Fatal(err)
	}
	return r
}

// plan renders main on top of what the repository holds and writes
// nothing.
func (t *tenant) plan(opts renderer.Options) (*gitrepo.Repo, *renderer.Result) {
	t.tb.Helper()
	r := t.open()
	res, err := renderRepo(context.Background(), r, "main", opts)
	if err != nil {
		t.tb.Fatalf("render: %v", err)
	}
	return r, res
}

// render renders main and applies the result, as nuon render does.
func (t *tenant) render(opts renderer.Options) *renderer.Result {
	t.tb.Helper()
	r, res := t.plan(opts)
	if err := apply(context.Background(), r, res, res.Updates); err != nil {
		t.tb.Fatal(err)
	}
	return res
}

// renderRepo reads the previous state from the repository and renders the
// source revision on top of it.
func renderRepo(ctx context.Context, r *gitrepo.Repo, source string, opts renderer.Options) (*renderer.Result, error) {
	if err := r.Fetch(ctx, "refs/heads/"); err != nil {
		return nil, err
	}
	src, err := r.Resolve(source)
	if err != nil {
		return nil, err
	}
	prev := renderer.Previous{Installs: map[string]plumbing.Hash{}}
	if prev.Rendered, err = r.Ref(renderer.RenderedRef); err != nil {
		return nil, err
	}
	refs, err := r.Refs(renderer.InstallRefPrefix)
	if err != nil {
		return nil, err
	}
	for name, h := range refs {
		prev.Installs[strings.TrimPrefix(name.String(), renderer.InstallRefPrefix)] = h
	}
	return renderer.Render(ctx, r.Storer(), src, prev, opts)
}

// apply writes the render's objects and moves the refs of updates (all of
// res.Updates, or only some to stop half way).
func apply(ctx context.Context, r *gitrepo.Repo, res *renderer.Result, updates []renderer.Update) error {
	if err := res.Objects.Flush(r.Storer()); err != nil {
		return err
	}
	us := make([]gitrepo.Update, len(updates))
	for i, u := range updates {
		us[i] = gitrepo.Update{Name: u.Name, Old: u.Old, New: u.New}
	}
	return r.Apply(ctx, us)
}

// refs lists the repository's refs, name to object.
func refs(tb testing.TB, dir string) map[string]string {
	tb.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(gittest.Git(tb, dir, "for-each-ref", "--format=%(refname) %(objectname)"), "\n") {
		if name, h, ok := strings.Cut(line, " "); ok {
			out[name] = h
		}
	}
	return out
}

// readTree returns every file of a tree-ish of the repository at dir, read
// back by the git CLI, path to content.
func readTree(tb testing.TB, dir, treeish string) map[string]string {
	tb.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(gittest.Git(tb, dir, "ls-tree", "-r", "--full-tree", treeish), "\n") {
		meta, name, ok := strings.Cut(line, "\t")
		if !ok {
			tb.Fatalf("ls-tree %s: %q", treeish, line)
		}
		f := strings.Fields(meta)
		out[name] = gittest.Git(tb, dir, "cat-file", "blob", f[2]) + "\n"
	}
	return out
}

// installsByID indexes a render's installs.
func installsByID(res *renderer.Result) map[string]renderer.InstallResult {
	m := map[string]renderer.InstallResult{}
	for _, in := range res.Installs {
		m[in.ID] = in
	}
	return m
}

// commitFiles writes files (path to content) as the whole tree of a new
// commit on top of parent (zero: none) into the repository at dir, moves
// branch to it and returns it. It writes one pack, as fast as the
// renderer: for sources too large to commit with the CLI in a benchmark.
func commitFiles(tb testing.TB, r *gitrepo.Repo, branch plumbing.ReferenceName, parent plumbing.Hash, files map[string][]byte) plumbing.Hash {
	tb.Helper()
	b := gitobj.NewBatch()
	var build func(dir string) plumbing.Hash
	children := map[string]map[string]bool{}
	for name := range files {
		for p := name; p != "."; p = path.Dir(p) {
			d := path.Dir(p)
			if children[d] == nil {
				children[d] = map[string]bool{}
			}
			children[d][p] = true
		}
	}
	build = func(dir string) plumbing.Hash {
		names := make([]string, 0, len(children[dir]))
		for p := range children[dir] {
			names = append(names, p)
		}
		sort.Strings(names)
		var entries []gitobj.Entry
		for _, p := range names {
			if data, ok := files[p]; ok {
				entries = append(entries, gitobj.Entry{Name: path.Base(p), Mode: filemode.Regular, Hash: b.Add(plumbing.BlobObject, data)})
				continue
			}
			entries = append(entries, gitobj.Entry{Name: path.Base(p), Mode: filemode.Dir, Hash: build(p)})
		}
		return b.Tree(entries)
	}
	who := object.Signature{Name: "nuon test", Email: "test@nuon.invalid", When: renderTime.Add(-time.Hour)}
	c := &object.Commit{Author: who, Committer: who, Message: "source\n", TreeHash: build(".")}
	if !parent.IsZero() {
		c.ParentHashes = []plumbing.Hash{parent}
	}
	var o plumbing.MemoryObject
	if err := c.Encode(&o); err != nil {
		tb.Fatal(err)
	}
	h, err := b.AddEncoded(&o)
	if err != nil {
		tb.Fatal(err)
	}
	if err := b.Flush(r.Storer()); err != nil {
		tb.Fatal(err)
	}
	if err := r.Storer().SetReference(plumbing.NewHashReference(branch, h)); err != nil {
		tb.Fatal(err)
	}
	return h
}

// fixtureFiles reads the fixture tenant, path to content.
func fixtureFiles(tb testing.TB) map[string][]byte {
	tb.Helper()
	files := map[string][]byte{}
	err := fs.WalkDir(os.DirFS(fixtureTenant), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files[p], err = os.ReadFile(filepath.Join(fixtureTenant, p))
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return files
}

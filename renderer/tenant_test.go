package renderer_test

import (
	"bytes"
	"context"
	"flag"
	"nuon.dev/nuon/schemas"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"

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
// source files. The renderer reaches it by path, or by URL when it is
// served.
type tenant struct {
	tb       testing.TB
	dir      string // the bare repository
	src      string // the source files committed to main
	location string // what the renderer opens: dir or a URL
	cache    string // where gitrepo keeps the mirror of a URL
}

// newTenant makes a bare repository whose main holds the fixture tenant.
func newTenant(tb testing.TB) *tenant {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "tenant.git")
	gittest.InitBare(tb, dir)
	return newTenantIn(tb, dir, dir)
}

// newServedTenant makes the tenant repository on a smart-HTTP git server
// and has the renderer reach it by URL.
func newServedTenant(tb testing.TB) (*tenant, *gittest.Server) {
	tb.Helper()
	s := gittest.NewServer(tb)
	dir := s.InitBare(tb, "tenant.git")
	return newTenantIn(tb, dir, s.URL("tenant.git")), s
}

// newTenantIn commits the fixture tenant as main of the bare repository
// dir. Its commits are dated, so the same files give the same main commit
// in every run.
func newTenantIn(tb testing.TB, dir, location string) *tenant {
	tb.Helper()
	tb.Setenv("GIT_AUTHOR_DATE", "2026-03-01T11:00:00Z")
	tb.Setenv("GIT_COMMITTER_DATE", "2026-03-01T11:00:00Z")
	t := &tenant{tb: tb, dir: dir, src: filepath.Join(tb.TempDir(), "src"), location: location, cache: tb.TempDir()}
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
	r, err := gitrepo.Open(t.location, gitrepo.WithCacheDir(t.cache))
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
	return renderStore(ctx, r, r.Storer(), source, opts)
}

// renderStore is renderRepo reading the objects from st, a view of r's.
func renderStore(ctx context.Context, r *gitrepo.Repo, st storer.EncodedObjectStorer, source string, opts renderer.Options) (*renderer.Result, error) {
	if err := r.Fetch(ctx, "refs/heads/"); err != nil {
		return nil, err
	}
	src, err := r.Resolve(source)
	if err != nil {
		return nil, err
	}
	var prev renderer.Previous
	if prev.Rendered, err = r.Ref(plumbing.ReferenceName(schemas.RenderedRef)); err != nil {
		return nil, err
	}
	refs, err := r.RefList(schemas.InstallRefPrefix)
	if err != nil {
		return nil, err
	}
	prev.Refs = make([]renderer.InstallRef, len(refs))
	for i, ref := range refs {
		prev.Refs[i] = renderer.InstallRef{ID: strings.TrimPrefix(ref.Name, schemas.InstallRefPrefix), Commit: ref.Hash}
	}
	// As publish renders: the objects spooled to a pack file as they come.
	if opts.Objects == nil {
		if opts.Objects, err = gitobj.NewSpooledBatch(r.Storer()); err != nil {
			return nil, err
		}
	}
	return renderer.Render(ctx, st, src, prev, opts)
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
		out[name] = string(gitRaw(tb, dir, "cat-file", "blob", f[2]))
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

// commitFiles commits files (path to content) on branch of the
// repository, on top of parent (zero: none), with git fast-import, and
// returns the commit: for sources too large to commit from a working copy
// in a benchmark. On top of a parent it writes only the files whose
// content the repository lacks, as a push of one change would; files are
// never removed.
func commitFiles(tb testing.TB, r *gitrepo.Repo, branch plumbing.ReferenceName, parent plumbing.Hash, files map[string][]byte) plumbing.Hash {
	tb.Helper()
	changed := make(map[string][]byte, len(files))
	for name, data := range files {
		if !parent.IsZero() && r.Storer().HasEncodedObject(gitobj.Hash(plumbing.BlobObject, data)) == nil {
			continue
		}
		changed[name] = data
	}
	from := ""
	if !parent.IsZero() {
		from = parent.String()
	}
	commit := gittest.FastImport(tb, r.Location, branch.String(), from, renderTime.Add(-time.Hour), changed)
	if st, ok := r.Storer().(interface{ Reindex() }); ok {
		st.Reindex()
	}
	return plumbing.NewHash(commit)
}

// fixtureFiles reads the fixture tenant, path to content.
func fixtureFiles(tb testing.TB) map[string][]byte {
	tb.Helper()
	return gittest.Files(tb, fixtureTenant)
}

// gitRaw runs the git CLI in dir and returns its standard output as is.
func gitRaw(tb testing.TB, dir string, args ...string) []byte {
	tb.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+os.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// trailer reads one trailer of a commit with the git CLI.
func trailer(tb testing.TB, dir, rev, key string) string {
	tb.Helper()
	return gittest.Git(tb, dir, "log", "-1", "--format=%(trailers:key="+key+",valueonly,separator=%x2C)", rev)
}

// checkConsistent checks what an agent relies on after a render: every
// install in the rendered tree has its own ref, whose tree is the very
// tree object of its folder in the rendered commit.
func checkConsistent(tb testing.TB, dir string) {
	tb.Helper()
	rendered := plumbing.ReferenceName(schemas.RenderedRef).String()
	shards := gittest.Git(tb, dir, "ls-tree", "--name-only", rendered, schemas.InstallsDir+"/")
	if shards == "" {
		return
	}
	var lines []string
	for _, shard := range strings.Split(shards, "\n") {
		for _, line := range strings.Split(gittest.Git(tb, dir, "ls-tree", rendered, shard+"/"), "\n") {
			if _, name, _ := strings.Cut(line, "\t"); schemas.RenderedInstallPath(path.Base(name)) != name {
				tb.Errorf("rendered tree entry %s is not at %s", name, schemas.RenderedInstallPath(path.Base(name)))
			}
			lines = append(lines, line)
		}
	}
	listing := strings.Join(lines, "\n")
	trees := map[string]string{}
	for _, line := range strings.Split(gittest.Git(tb, dir, "for-each-ref", "--format=%(refname) %(tree)", schemas.InstallRefPrefix), "\n") {
		name, tree, _ := strings.Cut(line, " ")
		trees[strings.TrimPrefix(name, schemas.InstallRefPrefix)] = tree
	}
	for _, line := range strings.Split(listing, "\n") {
		meta, name, _ := strings.Cut(line, "\t")
		id := path.Base(name)
		if f := strings.Fields(meta); trees[id] != f[2] {
			tb.Errorf("%s is at tree %q, but %s holds %s for it", plumbing.ReferenceName(schemas.InstallRef(id)), trees[id], name, f[2])
		}
	}
}

package renderer_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/schemas"
)

// TestIncrementalRenderWritesOneShard changes one install of 1,000: the
// render lists that install alone, counts all 1,000, and writes its own
// objects, one shard of installs/ and one of issued/, the two top folders
// and the root: not two folders with an entry per install (66 KB of trees
// at 1,000 installs, 6.6 MB at 100,000).
func TestIncrementalRenderWritesOneShard(t *testing.T) {
	const n = 1000
	files := fleet(t, n)
	dir := t.TempDir() + "/tenant.git"
	gittest.InitBare(t, dir)
	repo, err := gitrepo.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	source := commitFiles(t, repo, "refs/heads/main", plumbing.ZeroHash, files)
	ctx := context.Background()
	res, err := renderRepo(ctx, repo, "refs/heads/main", options(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := apply(ctx, repo, res, res.Updates); err != nil {
		t.Fatal(err)
	}
	if res.Total != n || len(res.Installs) != n {
		t.Fatalf("cold render: total %d, %d installs listed; want %d", res.Total, len(res.Installs), n)
	}

	const id = "i00500"
	file := "installs/" + id + ".yaml"
	commitFiles(t, repo, "refs/heads/main", source, map[string][]byte{file: bytes.Replace(files[file], []byte("cidr: 10."), []byte("cidr: 172."), 1)})
	repo, err = gitrepo.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err = renderRepo(ctx, repo, "refs/heads/main", options(t))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Incremental || res.Total != n || len(res.Installs) != 1 || res.Installs[0].ID != id || res.Installs[0].Change != renderer.Changed {
		t.Fatalf("re-render: incremental %v, total %d, installs %+v; want %s changed alone of %d", res.Incremental, res.Total, res.Installs, id, n)
	}
	var pack bytes.Buffer
	if err := res.Objects.WritePack(&pack); err != nil {
		t.Fatal(err)
	}
	if pack.Len() > 32<<10 {
		t.Errorf("the re-render wrote a pack of %d bytes, want under 32 KiB", pack.Len())
	}
	if err := apply(ctx, repo, res, res.Updates); err != nil {
		t.Fatal(err)
	}
	checkConsistent(t, dir)
	rendered := plumbing.ReferenceName(schemas.RenderedRef).String()
	if got := strings.Count(gittest.Git(t, dir, "ls-tree", "-r", "-d", "--name-only", rendered, schemas.InstallsDir+"/"), "\n") + 1; got < n {
		t.Errorf("the rendered tree holds %d folders under installs/, want at least %d", got, n)
	}
	if got := trailer(t, dir, rendered, renderer.TrailerRendered); got != fmt.Sprint(n) {
		t.Errorf("%s: %s, want %d", renderer.TrailerRendered, got, n)
	}
}

// TestIncrementalRenderRetriesUnrendered: an install added with a bad file
// has no folder; a later render that changes another install renders it
// again (it fails again, alone) and stays incremental.
func TestIncrementalRenderRetriesUnrendered(t *testing.T) {
	tn := newTenant(t)
	tn.render(options(t))
	tn.write("installs/hooli.yaml", "channel: nightly\n")
	tn.commit("hooli on a channel that does not exist")
	res := tn.render(options(t))
	if f := res.Failed(); len(f) != 1 || f[0].ID != "hooli" {
		t.Fatalf("failed %+v, want hooli", f)
	}
	tn.edit("installs/acme.yaml", "cidr: 10.10.0.0/16", "cidr: 10.13.0.0/16")
	tn.commit("move acme")
	res = tn.render(options(t))
	if !res.Incremental {
		t.Error("a full render")
	}
	got := installsByID(res)
	if got["acme"].Change != renderer.Changed || got["hooli"].Change != renderer.Failed || len(got) != 2 {
		t.Errorf("installs %+v, want acme changed and hooli failed", res.Installs)
	}
	if res.Total != 3 {
		t.Errorf("total %d, want 3", res.Total)
	}
	checkConsistent(t, tn.dir)
}

// TestRenderReadsFlatLayout: a rendered commit of Format 2 holds
// installs/<id> and issued/<id> without shards. The next render reads its
// issued records (a deleted install ref comes back above the generation
// recorded there) and writes the sharded layout.
func TestRenderReadsFlatLayout(t *testing.T) {
	tn := newTenant(t)
	tn.render(options(t))
	rendered := plumbing.ReferenceName(schemas.RenderedRef).String()

	// The same render as Format 2 wrote it, signed by the render key.
	flat := map[string][]gitobj.Entry{}
	for _, line := range strings.Split(gittest.Git(t, tn.dir, "ls-tree", "-r", "-t", rendered), "\n") {
		meta, p, _ := strings.Cut(line, "\t")
		f := strings.Fields(meta)
		parts := strings.Split(p, "/")
		if len(parts) != 3 {
			continue
		}
		mode := filemode.Regular
		if f[1] == "tree" {
			mode = filemode.Dir
		}
		flat[parts[0]] = append(flat[parts[0]], gitobj.Entry{Name: parts[2], Mode: mode, Hash: plumbing.NewHash(f[2])})
	}
	b := gitobj.NewBatch()
	root := b.Tree([]gitobj.Entry{
		{Name: schemas.InstallsDir, Mode: filemode.Dir, Hash: b.Tree(flat[schemas.InstallsDir])},
		{Name: schemas.IssuedDir, Mode: filemode.Dir, Hash: b.Tree(flat[schemas.IssuedDir])},
	})
	msg := gittest.Git(t, tn.dir, "log", "-1", "--format=%B", rendered)
	msg = strings.Replace(msg, renderer.TrailerFormat+": 3", renderer.TrailerFormat+": 2", 1)
	msg = strings.Replace(msg, "\n"+renderer.TrailerRendered+": 3", "", 1) + "\n"
	who := object.Signature{Name: "nuon renderer", Email: "renderer@nuon.invalid", When: renderTime}
	old, err := b.Commit(gitobj.Commit{Tree: root, Author: who, Message: msg}, loadSigner(t, "render"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(tn.open().Storer()); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, tn.dir, "update-ref", rendered, old.String())
	ref := plumbing.ReferenceName(schemas.InstallRef("initech")).String()
	issued := gittest.Git(t, tn.dir, "rev-parse", ref)
	gittest.Git(t, tn.dir, "update-ref", "-d", ref)

	res := tn.render(options(t))
	if res.Incremental {
		t.Error("an incremental render on top of another format")
	}
	in := installsByID(res)["initech"]
	if in.Change != renderer.Replaced || in.Generation != 2 {
		t.Fatalf("initech: %+v, want replaced at generation 2", in)
	}
	if first := gittest.Git(t, tn.dir, "rev-parse", ref+"^1"); first != issued {
		t.Errorf("first parent %s, want the commit the flat issued record names, %s", first, issued)
	}
	if got := trailer(t, tn.dir, rendered, renderer.TrailerFormat); got != fmt.Sprint(renderer.Format) {
		t.Errorf("format %s, want %d", got, renderer.Format)
	}
	checkConsistent(t, tn.dir)
	if res := tn.render(options(t)); len(res.Updates) != 0 {
		t.Errorf("the next render moved %d refs", len(res.Updates))
	}
}

// renderedWithCache renders the tenant, then acme's change with a new
// Cache, and returns the cache and that render's result.
func renderedWithCache(t *testing.T) (*tenant, *renderer.Cache, *renderer.Result) {
	t.Helper()
	tn := newTenant(t)
	tn.render(options(t))
	tn.edit("installs/acme.yaml", "cidr: 10.10.0.0/16", "cidr: 10.13.0.0/16")
	tn.commit("move acme")
	cache := renderer.NewCache()
	opts := options(t)
	opts.Cache = cache
	return tn, cache, tn.render(opts)
}

// TestCacheKeepsSourceTree: a render with a Cache keeps main's installs/
// tree, and the next render with it compares its source with that tree
// without reading it from the repository again: with the object gone from
// the repository, it is still incremental; without the cache it is not.
func TestCacheKeepsSourceTree(t *testing.T) {
	tn, cache, _ := renderedWithCache(t)
	tree := gittest.Git(t, tn.dir, "rev-parse", "main:"+schemas.InstallsDir)
	if err := os.Remove(filepath.Join(tn.dir, "objects", tree[:2], tree[2:])); err != nil {
		t.Fatalf("the installs/ tree of main is not a loose object: %v", err)
	}
	tn.edit("installs/globex.yaml", "channel: beta", "channel: stable")
	tn.commit("globex on stable")
	if _, res := tn.plan(options(t)); res.Incremental {
		t.Fatal("without the previous source's tree, an incremental render")
	}
	opts := options(t)
	opts.Cache = cache
	res := tn.render(opts)
	if !res.Incremental || len(res.Installs) != 1 || res.Installs[0].ID != "globex" {
		t.Errorf("with the cache: incremental %v, installs %+v; want globex alone", res.Incremental, res.Installs)
	}
}

// TestCacheKeepsUnchangedSourceTree: a render with a Cache whose source's
// installs/ tree is the previous render's (a server's first render after
// a start) keeps that tree all the same, so that the next change is
// compared with it: with the object gone from the repository, the render
// of the next change is still incremental; without the cache it is not.
func TestCacheKeepsUnchangedSourceTree(t *testing.T) {
	tn := newTenant(t)
	tn.render(options(t))
	cache := renderer.NewCache()
	opts := options(t)
	opts.Cache = cache
	if res := tn.render(opts); !res.Incremental || len(res.Updates) != 0 {
		t.Fatalf("the start render: incremental %v, %d updates; want incremental, none", res.Incremental, len(res.Updates))
	}
	tree := gittest.Git(t, tn.dir, "rev-parse", "main:"+schemas.InstallsDir)
	if err := os.Remove(filepath.Join(tn.dir, "objects", tree[:2], tree[2:])); err != nil {
		t.Fatalf("the installs/ tree of main is not a loose object: %v", err)
	}
	tn.edit("installs/globex.yaml", "channel: beta", "channel: stable")
	tn.commit("globex on stable")
	if _, res := tn.plan(options(t)); res.Incremental {
		t.Fatal("without the previous source's tree, an incremental render")
	}
	opts = options(t)
	opts.Cache = cache
	res := tn.render(opts)
	if !res.Incremental || len(res.Installs) != 1 || res.Installs[0].ID != "globex" {
		t.Errorf("with the cache: incremental %v, installs %+v; want globex alone", res.Incremental, res.Installs)
	}
}

// FuzzIncrementalSourceTree renders the crafted tenant, then a main whose
// installs/ tree object is any bytes: the render that compares the two
// trees as bytes never panics, fails only with problems, and when it is
// incremental and fails no install, renders the same installs/ folder as a
// full render of that main.
func FuzzIncrementalSourceTree(f *testing.F) {
	st := memory.NewStorage()
	c := newCraftedTenant(f, st)
	ctx := context.Background()
	render := func(tb testing.TB, source plumbing.Hash, prev renderer.Previous) *renderer.Result {
		res, err := renderer.Render(ctx, st, source, prev, options(tb))
		if err != nil {
			checkProblems(tb.(*testing.T), err)
			return nil
		}
		if err := res.Objects.Flush(st); err != nil {
			tb.Fatal(err)
		}
		return res
	}
	first, err := renderer.Render(ctx, st, c.commit(f, st, nil), renderer.Previous{}, options(f))
	if err != nil {
		f.Fatal(err)
	}
	if err := first.Objects.Flush(st); err != nil {
		f.Fatal(err)
	}
	prev := renderer.Previous{Rendered: first.Rendered, Installs: map[string]plumbing.Hash{}}
	for _, u := range first.Updates {
		if id, ok := strings.CutPrefix(u.Name.String(), schemas.InstallRefPrefix); ok {
			prev.Installs[id] = u.New
		}
	}
	var b bytes.Buffer
	for _, e := range c["installs"] {
		fmt.Fprintf(&b, "%o %s\x00", uint32(e.Mode), e.Name)
		b.Write(e.Hash[:])
	}
	orig := b.Bytes()
	f.Add(orig)
	f.Add(orig[:len(orig)/2])
	f.Add(append(slices.Clone(orig), orig...))
	f.Add(bytes.Replace(orig, []byte("acme"), []byte("acmf"), 1))
	f.Add(bytes.Replace(orig, []byte("100644"), []byte("40000"), 1))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		source := c.commit(t, st, map[string][]byte{"installs": raw})
		res := render(t, source, prev)
		// A failed install keeps its previous state, which a full render
		// from nothing does not have: only renders without failures
		// compare.
		if res == nil || !res.Incremental || res.Rendered.IsZero() || len(res.Failed()) > 0 {
			return
		}
		full := render(t, source, renderer.Previous{})
		if full == nil {
			t.Fatal("an incremental render succeeded where a full one fails")
		}
		a, err := gitobj.ReadCommit(st, res.Rendered)
		if err != nil {
			t.Fatal(err)
		}
		b, err := gitobj.ReadCommit(st, full.Rendered)
		if err != nil {
			t.Fatal(err)
		}
		ta, _ := gitobj.ReadTree(st, a.TreeHash)
		tb, _ := gitobj.ReadTree(st, b.TreeHash)
		ea, _ := ta.FindEntry(schemas.InstallsDir)
		eb, _ := tb.FindEntry(schemas.InstallsDir)
		if (ea == nil) != (eb == nil) || ea != nil && ea.Hash != eb.Hash {
			t.Fatalf("installs/ of the incremental render %v, of a full one %v", ea, eb)
		}
	})
}

// TestCacheKeepsSourceObjects: a render with a Cache keeps the source's
// objects outside installs/ (nuon.yaml and the channels/ tree here), and
// the next render of an install's change reads them from the cache: with
// them gone from the repository, it still renders the change; without
// the cache it cannot.
func TestCacheKeepsSourceObjects(t *testing.T) {
	for _, name := range []string{schemas.AppFile, schemas.ChannelsDir} {
		t.Run(name, func(t *testing.T) {
			tn, cache, res := renderedWithCache(t)
			if !res.Incremental {
				t.Fatal("the render of acme's change is not incremental")
			}
			tn.edit("installs/globex.yaml", "channel: beta", "channel: stable")
			tn.commit("globex on stable")
			obj := gittest.Git(t, tn.dir, "rev-parse", "main:"+name)
			if err := os.Remove(filepath.Join(tn.dir, "objects", obj[:2], obj[2:])); err != nil {
				t.Fatalf("main's %s is not a loose object: %v", name, err)
			}
			if _, err := renderRepo(context.Background(), tn.open(), "main", options(t)); err == nil {
				t.Fatalf("without the cache, rendered with main's %s gone", name)
			}
			opts := options(t)
			opts.Cache = cache
			res = tn.render(opts)
			if !res.Incremental || len(res.Installs) != 1 || res.Installs[0].ID != "globex" || res.Installs[0].Change != renderer.Changed {
				t.Errorf("with the cache: incremental %v, installs %+v; want globex changed alone", res.Incremental, res.Installs)
			}
		})
	}
}

package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/publish"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
)

// renderTenant is a bare tenant repository with the fixture tenant on
// main, the folder main was committed from, and the render key.
func renderTenant(t *testing.T) (dir, src string, key *signature.Signer) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "tenant.git")
	gittest.InitBare(t, dir)
	src = t.TempDir()
	if err := os.CopyFS(src, os.DirFS("../fixtures/tenant")); err != nil {
		t.Fatal(err)
	}
	gittest.CommitDir(t, dir, "main", src, "tenant")
	key, err := signature.LoadSigner("../fixtures/keys/render")
	if err != nil {
		t.Fatal(err)
	}
	return dir, src, key
}

// TestRenderRefsFromTable renders with the install refs of the ref table
// (renderRefs) and, of the same repository, reading them from git: across
// a changed install, status refs pushed, an install deleted and one added,
// both give the same updates, and the table's list equals git's refs
// after each real render.
func TestRenderRefsFromTable(t *testing.T) {
	ctx := context.Background()
	dir, src, key := renderTenant(t)
	now := func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
	// The real renders with the table keep a Cache, as the server's do.
	cache := renderer.NewCache()
	render := func(dry bool, refs publish.RefSource) (*renderer.Result, error) {
		repo, err := gitrepo.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		opts := publish.Options{DryRun: dry, Now: now, Refs: refs}
		if !dry && refs != nil {
			opts.Cache = cache
		}
		return publish.Render(ctx, repo, key, opts)
	}
	// The first render reads git; the table is loaded after it, as the
	// server loads it at start.
	if _, err := render(false, nil); err != nil {
		t.Fatal(err)
	}
	table, err := loadRefs(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	gitList := func() []renderer.InstallRef {
		repo, err := gitrepo.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		refs, err := publish.RepoRefs{Repo: repo}.InstallRefs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return refs.Refs()
	}
	steps := []struct {
		name string
		do   func()
	}{
		{"unchanged", func() {}},
		{"install changed", func() {
			b, _ := os.ReadFile(filepath.Join(src, "installs", "acme.yaml"))
			os.WriteFile(filepath.Join(src, "installs", "acme.yaml"), []byte(strings.Replace(string(b), "10.10.0.0/16", "10.11.0.0/16", 1)), 0o644)
			gittest.CommitDir(t, dir, "main", src, "acme")
		}},
		{"status refs pushed", func() {
			for _, id := range []string{"acme", "globex"} {
				tip := strings.TrimSpace(gittest.Git(t, dir, "rev-parse", "main"))
				gittest.Git(t, dir, "update-ref", schemas.StatusRef(id), tip)
				table.set(schemas.StatusRef(id), plumbing.NewHash(tip))
			}
		}},
		{"install file removed", func() {
			os.Remove(filepath.Join(src, "installs", "globex.yaml"))
			gittest.CommitDir(t, dir, "main", src, "no globex")
		}},
		{"install deleted", func() {
			// As an archive retires it (archive.go): its refs go.
			for _, name := range []string{schemas.InstallRef("globex"), schemas.StatusRef("globex")} {
				gittest.Git(t, dir, "update-ref", "-d", name)
				table.set(name, plumbing.ZeroHash)
			}
		}},
		{"install added", func() {
			b, _ := os.ReadFile(filepath.Join(src, "installs", "initech.yaml"))
			os.WriteFile(filepath.Join(src, "installs", "hooli.yaml"), []byte(strings.ReplaceAll(string(b), "initech", "hooli")), 0o644)
			gittest.CommitDir(t, dir, "main", src, "hooli")
		}},
	}
	for _, step := range steps {
		step.do()
		if diff := cmp.Diff(gitList(), table.installRefs().Refs()); diff != "" {
			t.Fatalf("%s: table's list (-git +table):\n%s", step.name, diff)
		}
		fromGit, err := render(true, nil)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		// One renderRefs a render, as the server makes them.
		fromTable, err := render(true, &renderRefs{refs: table, dir: dir})
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if diff := cmp.Diff(fromGit.Updates, fromTable.Updates); diff != "" {
			t.Fatalf("%s: updates (-git +table):\n%s", step.name, diff)
		}
		src2 := &renderRefs{refs: table, dir: dir}
		res, err := render(false, src2)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if diff := cmp.Diff(fromGit.Updates, res.Updates); diff != "" {
			t.Fatalf("%s: written updates (-dry run +real):\n%s", step.name, diff)
		}
		var ids []string
		for _, u := range res.Updates {
			if id, ok := strings.CutPrefix(u.Name.String(), schemas.InstallRefPrefix); ok {
				table.set(u.Name.String(), u.New)
				ids = append(ids, id)
			}
		}
		// As the server does: the table takes the list the render left,
		// and hands it to the next render, which knows it.
		if !table.adoptList(src2.handed, res.List, ids) {
			t.Fatalf("%s: the render's list of refs not taken", step.name)
		}
		if got := table.installRefs(); got != res.List {
			t.Fatalf("%s: the table hands out a list of its own", step.name)
		}
		if diff := cmp.Diff(gitList(), table.installRefs().Refs()); diff != "" {
			t.Fatalf("%s: after the render, table's list (-git +table):\n%s", step.name, diff)
		}
	}
	if ids := idsOf(table.installRefs().Refs()); ids != "acme hooli initech" {
		t.Fatalf("installs at the end: %s", ids)
	}
}

// TestRenderRefsTableLags is a ref table that lags git (another writer
// moved an install's ref behind the server's back): the render moves
// nothing, fails with gitrepo.ErrStale, and the newer ref stays.
func TestRenderRefsTableLags(t *testing.T) {
	ctx := context.Background()
	dir, src, key := renderTenant(t)
	render := func(refs publish.RefSource) error {
		repo, err := gitrepo.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		_, err = publish.Render(ctx, repo, key, publish.Options{Refs: refs})
		return err
	}
	if err := render(nil); err != nil {
		t.Fatal(err)
	}
	table, err := loadRefs(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, packed := range []bool{false, true} {
		// The newer ref: a commit of its own on acme's desired ref.
		newer := strings.TrimSpace(gittest.Git(t, dir, "commit-tree", "-m", "newer", strings.TrimSpace(gittest.Git(t, dir, "rev-parse", "main^{tree}"))))
		gittest.Git(t, dir, "update-ref", schemas.InstallRef("acme"), newer)
		if packed {
			gittest.Git(t, dir, "pack-refs", "--all")
		}
		b, _ := os.ReadFile(filepath.Join(src, "installs", "acme.yaml"))
		cidr := map[bool]string{false: "10.20.0.0/16", true: "10.30.0.0/16"}[packed]
		os.WriteFile(filepath.Join(src, "installs", "acme.yaml"), regexp.MustCompile(`cidr: .*`).ReplaceAll(b, []byte("cidr: "+cidr)), 0o644)
		gittest.CommitDir(t, dir, "main", src, "acme again")
		before := gittest.Git(t, dir, "for-each-ref")
		err := render(&renderRefs{refs: table, dir: dir})
		if !errors.Is(err, gitrepo.ErrStale) {
			t.Fatalf("packed %v: render over a lagging table: %v, want ErrStale", packed, err)
		}
		if after := gittest.Git(t, dir, "for-each-ref"); after != before {
			t.Fatalf("packed %v: refs moved:\n%s\nwere\n%s", packed, after, before)
		}
	}
}

func idsOf(refs []renderer.InstallRef) string {
	ids := make([]string, len(refs))
	for i, r := range refs {
		ids[i] = r.ID
	}
	return strings.Join(ids, " ")
}

// TestRefTableInstallRefs moves a table's refs and checks its sorted list
// against one built from its map after each move: patched (few moved),
// listed again (more than maxListPatch, or a replica's replace), status
// refs alone (the same list), and a list handed out is never changed.
func TestRefTableInstallRefs(t *testing.T) {
	h := func(i int) plumbing.Hash {
		var h plumbing.Hash
		h[0], h[1], h[19] = byte(i>>8), byte(i), 1
		return h
	}
	table := newRefTable()
	for i := range 100 {
		table.set(schemas.InstallRef(fmt.Sprintf("i%03d", i)), h(i))
	}
	want := func() []renderer.InstallRef {
		var out []renderer.InstallRef
		for id, tips := range table.installs {
			if !tips.desired.IsZero() {
				out = append(out, renderer.InstallRef{ID: id, Commit: tips.desired})
			}
		}
		slices.SortFunc(out, func(a, b renderer.InstallRef) int { return strings.Compare(a.ID, b.ID) })
		return out
	}
	steps := []struct {
		name string
		do   func()
	}{
		{"one moved", func() { table.set(schemas.InstallRef("i050"), h(1000)) }},
		{"first and last gone, one new between", func() {
			table.set(schemas.InstallRef("i000"), plumbing.ZeroHash)
			table.set(schemas.InstallRef("i099"), plumbing.ZeroHash)
			table.set(schemas.InstallRef("i0505"), h(1001))
		}},
		{"new first and last", func() {
			table.set(schemas.InstallRef("a"), h(1002))
			table.set(schemas.InstallRef("z"), h(1003))
		}},
		{"one moved twice, one added and gone", func() {
			table.set(schemas.InstallRef("i010"), h(1004))
			table.set(schemas.InstallRef("i010"), h(1005))
			table.set(schemas.InstallRef("i0101"), h(1006))
			table.set(schemas.InstallRef("i0101"), plumbing.ZeroHash)
		}},
		{"status refs alone", func() {
			table.set(schemas.StatusRef("i020"), h(1007))
			table.set(schemas.StatusRef("nodesired"), h(1008))
		}},
		{"more than maxListPatch", func() {
			for i := range maxListPatch + 1 {
				table.set(schemas.InstallRef(fmt.Sprintf("m%05d", i)), h(i))
			}
		}},
		{"replaced", func() {
			u := newRefTable()
			u.put(schemas.InstallRef("r1"), h(1))
			u.put(schemas.InstallRef("r2"), h(2))
			table.replace(u)
		}},
	}
	prev := table.installRefs()
	for _, step := range steps {
		kept := prev.Refs()
		step.do()
		got := table.installRefs()
		if diff := cmp.Diff(want(), got.Refs()); diff != "" {
			t.Fatalf("%s: list (-want +got):\n%s", step.name, diff)
		}
		if diff := cmp.Diff(kept, prev.Refs()); diff != "" {
			t.Fatalf("%s: the list handed out before changed (-was +now):\n%s", step.name, diff)
		}
		if step.name == "status refs alone" && got != prev {
			t.Fatalf("%s: listed again", step.name)
		}
		prev = got
	}
}

// TestRefTableAdoptList: the table takes a render's list only when it is
// the list patching would give, the render handed the table's own list
// and the desired refs moved since being the render's alone; a list that
// lags or leads the table, of another base, or after another writer's
// move, is not taken, and the table's list stays what git would say.
func TestRefTableAdoptList(t *testing.T) {
	h := func(i int) plumbing.Hash {
		var h plumbing.Hash
		h[0], h[1], h[19] = byte(i>>8), byte(i), 2
		return h
	}
	newTable := func() (*refTable, *renderer.RefList) {
		table := newRefTable()
		for i := range 10 {
			table.set(schemas.InstallRef(fmt.Sprintf("i%02d", i)), h(i))
		}
		return table, table.installRefs()
	}
	// patched is base with id at commit c (zero: gone).
	patched := func(base *renderer.RefList, id string, c plumbing.Hash) *renderer.RefList {
		out := slices.DeleteFunc(base.Refs(), func(r renderer.InstallRef) bool { return r.ID == id })
		if !c.IsZero() {
			out = append(out, renderer.InstallRef{ID: id, Commit: c})
			slices.SortFunc(out, func(a, b renderer.InstallRef) int { return strings.Compare(a.ID, b.ID) })
		}
		return renderer.NewRefList(out)
	}
	tests := []struct {
		name string
		// do moves the table's refs after the render was handed base,
		// and returns the render's list, its ids and the list handed.
		do   func(table *refTable, base *renderer.RefList) (handed, list *renderer.RefList, ids []string)
		take bool
	}{
		{"one moved", func(table *refTable, base *renderer.RefList) (*renderer.RefList, *renderer.RefList, []string) {
			table.set(schemas.InstallRef("i05"), h(100))
			return base, patched(base, "i05", h(100)), []string{"i05"}
		}, true},
		{"one added, status refs moved too", func(table *refTable, base *renderer.RefList) (*renderer.RefList, *renderer.RefList, []string) {
			table.set(schemas.StatusRef("i01"), h(101))
			table.set(schemas.InstallRef("i055"), h(102))
			table.set(schemas.StatusRef("i02"), h(103))
			return base, patched(base, "i055", h(102)), []string{"i055"}
		}, true},
		{"nothing moved", func(table *refTable, base *renderer.RefList) (*renderer.RefList, *renderer.RefList, []string) {
			return base, renderer.NewRefList(base.Refs()), nil
		}, true},
		{"no list", func(table *refTable, base *renderer.RefList) (*renderer.RefList, *renderer.RefList, []string) {
			table.set(schemas.InstallRef("i05"), h(100))
			return base, nil, []string{"i05"}
		}, false},
		{"another list handed", func(table *refTable, base *renderer.RefList) (*renderer.RefList, *renderer.RefList, []string) {
			table.set(schemas.InstallRef("i05"), h(100))
			return renderer.NewRefList(base.Refs()), patched(base, "i05", h(100)), []string{"i05"}
		}, false},
		{"another writer moved one more", func(table *refTable, base *renderer.RefList) (*renderer.RefList, *renderer.RefList, []string) {
			table.set(schemas.InstallRef("i05"), h(100))
			table.set(schemas.InstallRef("i07"), plumbing.ZeroHash)
			return base, patched(base, "i05", h(100)), []string{"i05"}
		}, false},
		{"the render's commit not the table's", func(table *refTable, base *renderer.RefList) (*renderer.RefList, *renderer.RefList, []string) {
			table.set(schemas.InstallRef("i05"), h(100))
			return base, patched(base, "i05", h(104)), []string{"i05"}
		}, false},
		{"a move the table lacks", func(table *refTable, base *renderer.RefList) (*renderer.RefList, *renderer.RefList, []string) {
			return base, patched(base, "i05", h(100)), []string{"i05"}
		}, false},
		{"an entry more than the table's", func(table *refTable, base *renderer.RefList) (*renderer.RefList, *renderer.RefList, []string) {
			table.set(schemas.InstallRef("i05"), h(100))
			return base, patched(patched(base, "i05", h(100)), "i99", h(105)), []string{"i05"}
		}, false},
		{"an entry less than the table's", func(table *refTable, base *renderer.RefList) (*renderer.RefList, *renderer.RefList, []string) {
			table.set(schemas.InstallRef("i05"), h(100))
			return base, patched(patched(base, "i05", h(100)), "i00", plumbing.ZeroHash), []string{"i05"}
		}, false},
		{"listed again meanwhile", func(table *refTable, base *renderer.RefList) (*renderer.RefList, *renderer.RefList, []string) {
			table.set(schemas.InstallRef("i03"), h(106))
			table.installRefs()
			table.set(schemas.InstallRef("i05"), h(100))
			return base, patched(base, "i05", h(100)), []string{"i05"}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, base := newTable()
			handed, list, ids := tt.do(table, base)
			if got := table.adoptList(handed, list, ids); got != tt.take {
				t.Fatalf("taken %v, want %v", got, tt.take)
			}
			got := table.installRefs()
			if tt.take && got != list {
				t.Error("taken, but the table hands out another list")
			}
			var want []renderer.InstallRef
			for id, tips := range table.installs {
				if !tips.desired.IsZero() {
					want = append(want, renderer.InstallRef{ID: id, Commit: tips.desired})
				}
			}
			slices.SortFunc(want, func(a, b renderer.InstallRef) int { return strings.Compare(a.ID, b.ID) })
			if diff := cmp.Diff(want, got.Refs()); diff != "" {
				t.Errorf("table's list (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRenderRefsFew: the refs outside the table a render reads, read
// together once, are git's: named ones, absent ones, a prefix's list, and
// neither names that only start like them nor a ref under a named one
// are taken; a ref fewRefs does not cover is read alone.
func TestRenderRefsFew(t *testing.T) {
	ctx := context.Background()
	dir, _, _ := renderTenant(t)
	tip := strings.TrimSpace(gittest.Git(t, dir, "rev-parse", "main"))
	for _, name := range []string{schemas.RenderedRef, schemas.ApprovalsRef, schemas.RolloutRef("stable"), schemas.RolloutRef("beta"),
		"refs/heads/nuon/renderedx", "refs/heads/nuon/rollouts-old", "refs/heads/other"} {
		gittest.Git(t, dir, "update-ref", name, tip)
	}
	repo, err := gitrepo.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	git := publish.RepoRefs{Repo: repo}
	few := &renderRefs{refs: newRefTable(), dir: dir}
	for _, name := range []string{schemas.RenderedRef, requests.Ref, schemas.ApprovalsRef, "refs/heads/other", "refs/heads/nuon/renderedx"} {
		want, err := git.Ref(ctx, plumbing.ReferenceName(name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := few.Ref(ctx, plumbing.ReferenceName(name))
		if err != nil || got != want {
			t.Errorf("%s: %s, %v; git says %s", name, got, err, want)
		}
	}
	for _, prefix := range []string{schemas.RolloutRefPrefix, "refs/heads/nuon/"} {
		want, err := git.RefList(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		got, err := few.RefList(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-git +few):\n%s", prefix, diff)
		}
	}
	if _, ok := few.few["refs/heads/nuon/renderedx"]; ok || len(few.few) != 4 {
		t.Errorf("read together: %v, want the rendered ref, approvals and two rollouts", few.few)
	}
}

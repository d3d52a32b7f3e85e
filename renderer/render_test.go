package renderer_test

import (
	"bytes"
	"context"
	"errors"
	"github.com/go-git/go-git/v5/plumbing"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/schemas"
)

// TestRenderIsDeterministic renders the same source into two fresh
// repositories, one install at a time and eight at once: the files, trees
// and even the signed commits are the same bytes. Within one repository,
// the objects of a render do not depend on the number of workers either.
func TestRenderIsDeterministic(t *testing.T) {
	var results []*renderer.Result
	var tenants []*tenant
	for _, workers := range []int{1, 8} {
		tn := newTenant(t)
		opts := options(t)
		opts.Workers = workers
		results = append(results, tn.render(opts))
		tenants = append(tenants, tn)
	}
	if diff := cmp.Diff(results[0].Installs, results[1].Installs); diff != "" {
		t.Errorf("installs differ between two renders (-1 worker +8 workers):\n%s", diff)
	}
	if results[0].Rendered != results[1].Rendered {
		t.Errorf("rendered commits differ: %s, %s", results[0].Rendered, results[1].Rendered)
	}
	a, b := tenants[0].dir, tenants[1].dir
	if diff := cmp.Diff(refs(t, a), refs(t, b)); diff != "" {
		t.Errorf("refs differ between two renders (-first +second):\n%s", diff)
	}
	tree := plumbing.ReferenceName(schemas.RenderedRef).String() + "^{tree}"
	if ta, tb := gittest.Git(t, a, "rev-parse", tree), gittest.Git(t, b, "rev-parse", tree); ta != tb {
		t.Errorf("rendered trees differ: %s, %s", ta, tb)
	}
	if diff := cmp.Diff(readTree(t, a, plumbing.ReferenceName(schemas.RenderedRef).String()), readTree(t, b, plumbing.ReferenceName(schemas.RenderedRef).String())); diff != "" {
		t.Errorf("rendered files differ (-first +second):\n%s", diff)
	}

	tn := newTenant(t)
	var first []byte
	for _, workers := range []int{1, 8, 2, 8, 1, 3} {
		opts := options(t)
		opts.Workers = workers
		// In memory, written in a stable order: a spooled batch writes
		// objects as the workers finish them.
		opts.Objects = gitobj.NewBatch()
		_, res := tn.plan(opts)
		var pack bytes.Buffer
		if err := res.Objects.WritePack(&pack); err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = pack.Bytes()
			continue
		}
		if !bytes.Equal(first, pack.Bytes()) {
			t.Fatalf("with %d workers the render wrote other objects", workers)
		}
	}
}

func TestInstallIsPure(t *testing.T) {
	for range 2 {
		a, err := schemas.Load(os.DirFS(fixtureTenant))
		if err != nil {
			t.Fatal(err)
		}
		b, err := schemas.Load(os.DirFS(fixtureTenant))
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range a.InstallIDs() {
			fa, err := renderer.Install(a, id)
			if err != nil {
				t.Fatal(err)
			}
			fb, err := renderer.Install(b, id)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(fa, fb); diff != "" {
				t.Errorf("%s rendered twice differs:\n%s", id, diff)
			}
		}
	}
}

// TestSecondRenderMovesNothing renders twice from the same main.
func TestSecondRenderMovesNothing(t *testing.T) {
	tn := newTenant(t)
	tn.render(options(t))
	before := refs(t, tn.dir)
	objects := countObjects(t, tn.dir)
	res := tn.render(options(t))
	if len(res.Updates) != 0 || !res.Rendered.IsZero() {
		t.Errorf("second render: %d updates, rendered %s", len(res.Updates), res.Rendered)
	}
	for _, in := range res.Installs {
		if in.Change != renderer.Unchanged {
			t.Errorf("%s: %s on a second render", in.ID, in.Change)
		}
	}
	if diff := cmp.Diff(before, refs(t, tn.dir)); diff != "" {
		t.Errorf("refs moved (-before +after):\n%s", diff)
	}
	if got := countObjects(t, tn.dir); got != objects {
		t.Errorf("the second render wrote objects: %d before, %d after", objects, got)
	}
}

// TestPromotion edits one channel pin on main: exactly the installs on
// that channel that do not pin the component themselves get a new commit,
// one generation up, on top of their previous one.
func TestPromotion(t *testing.T) {
	tn := newTenant(t)
	tn.render(options(t))
	before := refs(t, tn.dir)

	tn.edit("channels/stable.yaml", "\n  api: 2.3.0\n", "\n  api: 2.4.0\n")
	source := tn.commit("promote api 2.4.0 to stable")
	src, err := schemas.Load(os.DirFS(tn.src))
	if err != nil {
		t.Fatal(err)
	}
	var want, overriding []string
	for _, id := range src.InstallIDs() {
		in := src.Installs[id]
		_, pinned := in.Versions["api"]
		switch {
		case in.Channel == "stable" && !pinned:
			want = append(want, id)
		case in.Channel == "stable":
			overriding = append(overriding, id)
		}
	}
	if len(want) == 0 || len(overriding) == 0 || len(want)+len(overriding) == len(src.Installs) {
		t.Fatalf("the fixtures no longer make this test meaningful: on stable %v, overriding api %v, of %d installs", want, overriding, len(src.Installs))
	}

	opts := options(t)
	opts.Diff = true
	res := tn.render(opts)
	after := refs(t, tn.dir)
	var changed []string
	for _, in := range res.Installs {
		if in.Change != renderer.Unchanged {
			changed = append(changed, in.ID)
		}
	}
	if diff := cmp.Diff(want, changed); diff != "" {
		t.Fatalf("changed installs (-want +got):\n%s", diff)
	}
	for _, in := range res.Installs {
		ref := plumbing.ReferenceName(schemas.InstallRef(in.ID)).String()
		if in.Change == renderer.Unchanged {
			if after[ref] != before[ref] {
				t.Errorf("%s moved from %s to %s", ref, before[ref], after[ref])
			}
			continue
		}
		if in.Change != renderer.Changed || in.Generation != 2 {
			t.Errorf("%s: %s generation %d, want changed generation 2", in.ID, in.Change, in.Generation)
		}
		if got := gittest.Git(t, tn.dir, "rev-parse", ref+"^"); got != before[ref] {
			t.Errorf("%s: parent %s, want the previous commit %s", ref, got, before[ref])
		}
		if got := trailer(t, tn.dir, ref, schemas.TrailerGeneration); got != "2" {
			t.Errorf("%s: generation trailer %q, want 2", ref, got)
		}
		if got := trailer(t, tn.dir, ref, schemas.TrailerSource); got != source {
			t.Errorf("%s: source trailer %q, want %s", ref, got, source)
		}
		goldenFile(t, filepath.Join("testdata", "diff", "promote-stable-api-"+in.ID+".diff"), []byte(in.Diff))
	}
	rendered := plumbing.ReferenceName(schemas.RenderedRef).String()
	if got := gittest.Git(t, tn.dir, "rev-parse", rendered+"^"); got != before[rendered] {
		t.Errorf("rendered parent %s, want %s", got, before[rendered])
	}
	if got := trailer(t, tn.dir, rendered, schemas.TrailerInstall); got != strings.Join(want, ",") {
		t.Errorf("rendered commit names installs %q, want %q", got, strings.Join(want, ","))
	}
	checkConsistent(t, tn.dir)
}

// TestRemovedInstall deletes an install on main: it leaves the rendered
// tree, and its own ref stays where it was. Put back unchanged, it returns
// without a new commit.
func TestRemovedInstall(t *testing.T) {
	tn := newTenant(t)
	tn.render(options(t))
	before := refs(t, tn.dir)
	ref := plumbing.ReferenceName(schemas.InstallRef("globex")).String()
	content, err := os.ReadFile(filepath.Join(tn.src, "installs", "globex.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	tn.remove("installs/globex.yaml")
	tn.commit("retire globex")
	res := tn.render(options(t))
	if got := installsByID(res)["globex"].Change; got != renderer.Removed {
		t.Errorf("globex: %s, want removed", got)
	}
	if got := gittest.Git(t, tn.dir, "ls-tree", "--name-only", plumbing.ReferenceName(schemas.RenderedRef).String()+":"+schemas.InstallsDir); strings.Contains(got, "globex") {
		t.Errorf("the rendered tree still holds globex:\n%s", got)
	}
	after := refs(t, tn.dir)
	for name, h := range before {
		if name != plumbing.ReferenceName(schemas.RenderedRef).String() && name != "refs/heads/main" && after[name] != h {
			t.Errorf("%s moved from %s to %s", name, h, after[name])
		}
	}
	if after[ref] != before[ref] {
		t.Errorf("%s was %s, is %q", ref, before[ref], after[ref])
	}
	if after[plumbing.ReferenceName(schemas.RenderedRef).String()] == before[plumbing.ReferenceName(schemas.RenderedRef).String()] {
		t.Error("the rendered ref did not move")
	}
	checkConsistent(t, tn.dir)

	tn.write("installs/globex.yaml", string(content))
	tn.commit("globex is back")
	res = tn.render(options(t))
	if got := installsByID(res)["globex"]; got.Change != renderer.Unchanged {
		t.Errorf("globex back with the same state: %s, want unchanged", got.Change)
	}
	if got := refs(t, tn.dir)[ref]; got != before[ref] {
		t.Errorf("%s moved to %s", ref, got)
	}
	checkConsistent(t, tn.dir)
}

// TestConvergesAfterPartialApply stops a render half way, as a crash
// would: some install refs moved, the rendered ref did not. The next
// render finishes the job without a second generation bump.
func TestConvergesAfterPartialApply(t *testing.T) {
	tn := newTenant(t)
	tn.render(options(t))
	tn.edit("nuon.yaml", "timeout: 5m", "timeout: 6m")
	tn.commit("give the api rollout more time")

	r, crashed := tn.plan(options(t))
	if len(crashed.Updates) < 3 {
		t.Fatalf("want at least two installs changed, got updates %v", crashed.Updates)
	}
	moved := crashed.Updates[:len(crashed.Updates)-2]
	if err := apply(context.Background(), r, crashed, moved); err != nil {
		t.Fatal(err)
	}
	half := refs(t, tn.dir)

	res := tn.render(options(t))
	crashedByID := installsByID(crashed)
	for _, in := range res.Installs {
		c := crashedByID[in.ID]
		if in.Generation != 2 {
			t.Errorf("%s: generation %d, want 2", in.ID, in.Generation)
		}
		if in.Commit != c.Commit {
			t.Errorf("%s: commit %s, the interrupted render made %s", in.ID, in.Commit, c.Commit)
		}
		wasMoved := half[plumbing.ReferenceName(schemas.InstallRef(in.ID)).String()] == c.Commit.String()
		if wasMoved && in.Change != renderer.Unchanged || !wasMoved && in.Change != renderer.Changed {
			t.Errorf("%s: %s (its ref moved before the crash: %t)", in.ID, in.Change, wasMoved)
		}
	}
	if got, want := gittest.Git(t, tn.dir, "rev-parse", plumbing.ReferenceName(schemas.RenderedRef).String()+"^{tree}"), gittest.Git(t, tn.dir, "rev-parse", crashed.Rendered.String()+"^{tree}"); got != want {
		t.Errorf("rendered tree %s, the interrupted render's %s", got, want)
	}
	checkConsistent(t, tn.dir)

	before := refs(t, tn.dir)
	res = tn.render(options(t))
	if len(res.Updates) != 0 {
		t.Errorf("a third render moves %v", res.Updates)
	}
	if diff := cmp.Diff(before, refs(t, tn.dir)); diff != "" {
		t.Errorf("refs moved (-before +after):\n%s", diff)
	}
}

// TestConvergesAfterPartialApplyAndRevert interrupts a render, then
// reverts main to what the rendered ref was made from: the install refs
// that moved must come back, although the rendered tree never changed.
func TestConvergesAfterPartialApplyAndRevert(t *testing.T) {
	tn := newTenant(t)
	tn.render(options(t))
	tn.edit("nuon.yaml", "timeout: 5m", "timeout: 6m")
	tn.commit("give the api rollout more time")
	r, crashed := tn.plan(options(t))
	if err := apply(context.Background(), r, crashed, crashed.Updates[:len(crashed.Updates)-1]); err != nil {
		t.Fatal(err)
	}
	tn.edit("nuon.yaml", "timeout: 6m", "timeout: 5m")
	tn.commit("revert: give the api rollout more time")

	res := tn.render(options(t))
	checkConsistent(t, tn.dir)
	for _, in := range res.Installs {
		if in.Change != renderer.Changed || in.Generation != 3 {
			t.Errorf("%s: %s generation %d, want changed generation 3", in.ID, in.Change, in.Generation)
		}
	}
}

// TestInvalidSource breaks nuon.yaml: the render fails with every problem
// located by file and line, and writes nothing.
func TestInvalidSource(t *testing.T) {
	tn := newTenant(t)
	tn.render(options(t))
	tn.edit("nuon.yaml", "dependsOn: [network]", "dependsOn: [netwrok]")
	tn.commit("a typo")
	before := refs(t, tn.dir)
	_, err := renderRepo(context.Background(), tn.open(), "main", options(t))
	var ps schemas.Problems
	if !errors.As(err, &ps) {
		t.Fatalf("render: %v, want schema problems", err)
	}
	for _, p := range ps {
		if p.File != schemas.AppFile || p.Line == 0 {
			t.Errorf("problem not located in %s by line: %s", schemas.AppFile, p)
		}
	}
	if !strings.Contains(err.Error(), "netwrok") {
		t.Errorf("problems do not name the bad dependency:\n%v", err)
	}
	if diff := cmp.Diff(before, refs(t, tn.dir)); diff != "" {
		t.Errorf("refs moved (-before +after):\n%s", diff)
	}
}

func TestCanceled(t *testing.T) {
	tn := newTenant(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := renderRepo(ctx, tn.open(), "main", options(t)); !errors.Is(err, context.Canceled) {
		t.Fatalf("render with a canceled context: %v", err)
	}
}

func TestOptionsRequired(t *testing.T) {
	tn := newTenant(t)
	for name, opts := range map[string]renderer.Options{
		"no signer": {Now: fixedClock},
		"no clock":  {Signer: loadSigner(t, "render")},
	} {
		if _, err := renderRepo(context.Background(), tn.open(), "main", opts); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// readRecorder is a store that records which objects are read from it.
type readRecorder struct {
	storer.EncodedObjectStorer
	mu   sync.Mutex
	read map[plumbing.Hash]bool
}

func (s *readRecorder) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	s.mu.Lock()
	s.read[h] = true
	s.mu.Unlock()
	return s.EncodedObjectStorer.EncodedObject(t, h)
}

// installBlobs are the install files on main of the repository at dir,
// name to blob.
func installBlobs(tb testing.TB, dir string) map[string]plumbing.Hash {
	tb.Helper()
	out := map[string]plumbing.Hash{}
	for _, line := range strings.Split(gittest.Git(tb, dir, "ls-tree", "main:"+schemas.InstallsDir), "\n") {
		meta, name, ok := strings.Cut(line, "\t")
		if f := strings.Fields(meta); ok && len(f) == 3 && strings.HasSuffix(name, ".yaml") {
			out[name] = plumbing.NewHash(f[2])
		}
	}
	return out
}

// countObjects is the number of objects in the repository.
func countObjects(tb testing.TB, dir string) int {
	tb.Helper()
	return len(strings.Split(gittest.Git(tb, dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"), "\n"))
}

// TestIncrementalRender changes, adds and removes install files only:
// the render reads and renders just those installs, and its tree is the
// tree a full render of the same main makes.
func TestIncrementalRender(t *testing.T) {
	tn := newTenant(t)
	if res := tn.render(options(t)); res.Incremental {
		t.Fatal("the first render is incremental")
	}
	acme, err := os.ReadFile(filepath.Join(tn.src, "installs", "acme.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		edit    func()
		changed map[string]renderer.Change
	}{
		{"one input", func() { tn.edit("installs/globex.yaml", "cidr: 10.20.0.0/16", "cidr: 10.21.0.0/16") },
			map[string]renderer.Change{"globex": renderer.Changed}},
		{"a new install", func() {
			tn.write("installs/hooli.yaml", strings.ReplaceAll(string(acme), "acme", "hooli"))
		}, map[string]renderer.Change{"hooli": renderer.Added}},
		{"a removed install", func() { tn.remove("installs/initech.yaml") },
			map[string]renderer.Change{"initech": renderer.Removed}},
		{"a comment only", func() { tn.write("installs/acme.yaml", "# the first customer\n"+string(acme)) },
			map[string]renderer.Change{}},
		{"a readme beside the installs", func() { tn.write("installs/README.md", "one file per install\n") },
			map[string]renderer.Change{}},
		{"a file that is not source", func() { tn.write("README.md", "the shop's tenant\n") },
			map[string]renderer.Change{}},
		{"another input after all that", func() { tn.edit("installs/globex.yaml", "cidr: 10.21.0.0/16", "cidr: 10.22.0.0/16") },
			map[string]renderer.Change{"globex": renderer.Changed}},
	}
	for _, step := range steps {
		before := installBlobs(t, tn.dir)
		step.edit()
		tn.commit(step.name)
		r := tn.open()
		st := &readRecorder{EncodedObjectStorer: r.Storer(), read: map[plumbing.Hash]bool{}}
		res, err := renderStore(context.Background(), r, st, "main", options(t))
		if err != nil {
			t.Fatalf("%s: render: %v", step.name, err)
		}
		if err := apply(context.Background(), r, res, res.Updates); err != nil {
			t.Fatal(err)
		}
		if !res.Incremental {
			t.Errorf("%s: a full render", step.name)
		}
		// Only the install files that changed are read.
		for name, h := range installBlobs(t, tn.dir) {
			if st.read[h] && before[name] == h {
				t.Errorf("%s: read %s, which did not change", step.name, name)
			}
		}
		for _, in := range res.Installs {
			if want, ok := step.changed[in.ID]; ok && in.Change != want || !ok && in.Change != renderer.Unchanged {
				t.Errorf("%s: %s %s", step.name, in.ID, in.Change)
			}
		}
		checkConsistent(t, tn.dir)

		full := newTenant(t)
		if err := os.RemoveAll(full.src); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(full.src, os.DirFS(tn.src)); err != nil {
			t.Fatal(err)
		}
		full.commit(step.name)
		if res := full.render(options(t)); res.Incremental {
			t.Fatalf("%s: the first render of a repository is incremental", step.name)
		}
		// The installs' folders are the same; the issued records name
		// each repository's own commits.
		tree := plumbing.ReferenceName(schemas.RenderedRef).String() + ":" + schemas.InstallsDir
		if got, want := gittest.Git(t, tn.dir, "rev-parse", tree), gittest.Git(t, full.dir, "rev-parse", tree); got != want {
			t.Errorf("%s: rendered tree %s, a full render makes %s", step.name, got, want)
		}
	}
}

// TestRenderRecordsSourceRenderedSame changes nuon.yaml in a way that
// renders the same: that render reads every install and moves no install
// ref, but records its source, so that the next change to one install
// file is rendered alone rather than every install again.
func TestRenderRecordsSourceRenderedSame(t *testing.T) {
	tn := newTenant(t)
	tn.render(options(t))
	app, err := os.ReadFile(filepath.Join(tn.src, schemas.AppFile))
	if err != nil {
		t.Fatal(err)
	}
	tn.write(schemas.AppFile, "# the shop\n"+string(app))
	main := tn.commit("a comment on the app")
	res := tn.render(options(t))
	if res.Incremental || res.ChangedCount() != 0 {
		t.Fatalf("a comment on nuon.yaml: incremental %v, %d installs changed; want a full render that changes none", res.Incremental, res.ChangedCount())
	}
	msg := gittest.Git(t, tn.dir, "log", "-1", "--format=%B", schemas.RenderedRef)
	if src, _ := schemas.Trailer(msg, schemas.TrailerSource); src != main {
		t.Errorf("the rendered commit records source %q, want %s", src, main)
	}
	tn.edit("installs/globex.yaml", "cidr: 10.20.0.0/16", "cidr: 10.21.0.0/16")
	tn.commit("one input")
	res = tn.render(options(t))
	if !res.Incremental || len(res.Installs) != 1 || res.Installs[0].ID != "globex" {
		t.Errorf("the next change to globex: incremental %v, installs %+v; want globex alone", res.Incremental, res.Installs)
	}
	checkConsistent(t, tn.dir)
}

// TestIncrementalRenderReportsProblems breaks one install file: the render
// that reads only that file reports its problems as a full one does, and
// that install alone fails: it keeps its state and ref.
func TestIncrementalRenderReportsProblems(t *testing.T) {
	tn := newTenant(t)
	tn.render(options(t))
	before := refs(t, tn.dir)
	tn.edit("installs/globex.yaml", "channel: beta", "channel: nightly")
	tn.commit("globex on a channel that does not exist")
	res, err := renderRepo(context.Background(), tn.open(), "main", options(t))
	if err != nil {
		t.Fatalf("render: %v, want the other installs rendered", err)
	}
	ps := res.Problems
	if len(ps) == 0 {
		t.Fatal("no problems reported")
	}
	if p := ps[0]; p.File != "installs/globex.yaml" || p.Line != 1 || !strings.Contains(p.Message, "nightly") {
		t.Errorf("problem %s, want installs/globex.yaml:1 about channel nightly", p)
	}
	failed := res.Failed()
	if len(failed) != 1 || failed[0].ID != "globex" || !strings.Contains(failed[0].Error, "nightly") {
		t.Errorf("failed installs %+v, want globex", failed)
	}
	globex := plumbing.ReferenceName(schemas.InstallRef("globex")).String()
	if got := refs(t, tn.dir)[globex]; got != before[globex] {
		t.Errorf("%s moved to %s", globex, got)
	}
}

// TestChangeToAppRendersEverything edits nuon.yaml: every install is
// rendered again, not only those whose file changed.
func TestChangeToAppRendersEverything(t *testing.T) {
	tn := newTenant(t)
	tn.render(options(t))
	tn.edit("nuon.yaml", "timeout: 5m", "timeout: 6m")
	tn.commit("slower api rollout")
	res := tn.render(options(t))
	if res.Incremental {
		t.Error("a change to nuon.yaml rendered incrementally")
	}
	if got := res.ChangedCount(); got != len(res.Installs) {
		t.Errorf("%d of %d installs changed", got, len(res.Installs))
	}
	checkConsistent(t, tn.dir)
}

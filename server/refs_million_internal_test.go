package server

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/schemas"
)

// BenchmarkRefTableMillion loads the ref table of NUON_BENCH_REFS installs
// (default 100,000; make bench-fleet asks 1,000,000), each with a desired
// and a status ref in packed-refs, as the server does at start, and
// reports the time it takes, the live heap the table holds after a
// collection (table-MB, and bytes per install), the bytes allocated while
// loading (alloc-MB: what the process grows to before the collector
// gives it back) and the cost of a poll's lookup of one install's refs.
func BenchmarkRefTableMillion(b *testing.B) {
	n := 100000
	if v, err := strconv.Atoi(os.Getenv("NUON_BENCH_REFS")); err == nil && v > 0 {
		n = v
	}
	dir := filepath.Join(b.TempDir(), "refs.git")
	git := func(stdin string, args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("git %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("git", "init", "--quiet", "--bare", dir).CombinedOutput(); err != nil {
		b.Fatalf("git init: %v: %s", err, out)
	}
	commit := git("", "commit-tree", git("", "mktree"), "-m", "refs")
	lines := make([]string, 0, 2*n)
	for i := range n {
		id := fmt.Sprintf("i%07d", i)
		lines = append(lines, commit+" "+schemas.InstallRef(id), commit+" "+schemas.StatusRef(id))
	}
	slices.SortFunc(lines, func(a, c string) int { return strings.Compare(a[41:], c[41:]) })
	if err := os.WriteFile(filepath.Join(dir, "packed-refs"), []byte("# pack-refs with: peeled fully-peeled sorted \n"+strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	lines = nil
	ctx := context.Background()
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		t0 := time.Now()
		t, err := loadRefs(ctx, dir)
		if err != nil {
			b.Fatal(err)
		}
		took := time.Since(t0)
		runtime.GC()
		runtime.ReadMemStats(&after)
		if got := t.len(); got != 2*n {
			b.Fatalf("%d refs, want %d", got, 2*n)
		}
		id := fmt.Sprintf("i%07d", n/2)
		const lookups = 100000
		var out []ownRef
		t1 := time.Now()
		for range lookups {
			out = t.appendOwn(out[:0], id)
		}
		lookup := time.Since(t1)
		if len(out) != 2 || out[0].hash != plumbing.NewHash(commit) {
			b.Fatalf("own(%s) = %v", id, out)
		}
		live := float64(after.HeapAlloc) - float64(before.HeapAlloc)
		b.ReportMetric(took.Seconds(), "load-s")
		b.ReportMetric(live/(1<<20), "table-MB")
		b.ReportMetric(live/float64(n), "table-B/install")
		b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), "alloc-MB")
		b.ReportMetric(float64(lookup.Nanoseconds())/lookups, "own-ns")
		runtime.KeepAlive(t)
	}
}

// TestRefTable: the table keyed by install answers for full ref names as
// a map of them did: tips set, moved and removed, an install's refs
// desired first, the count, and a name outside the two prefixes kept
// apart.
func TestRefTable(t *testing.T) {
	h1 := plumbing.NewHash("1111111111111111111111111111111111111111")
	h2 := plumbing.NewHash("2222222222222222222222222222222222222222")
	tab := newRefTable()
	steps := []struct {
		name string
		h    plumbing.Hash
		n    int
	}{
		{schemas.StatusRef("acme"), h1, 1},
		{schemas.InstallRef("acme"), h2, 2},
		{schemas.InstallRef("acme"), h1, 2},
		{schemas.InstallRef("globex"), h2, 3},
		{"refs/heads/nuon/rollouts/stable", h2, 4},
		{schemas.InstallRefPrefix, h1, 5}, // no install named: kept apart
		{schemas.InstallRef("globex"), plumbing.ZeroHash, 4},
		{schemas.InstallRef("nobody"), plumbing.ZeroHash, 4},
	}
	for _, s := range steps {
		tab.set(s.name, s.h)
		if got, ok := tab.get(s.name); got != s.h || ok == s.h.IsZero() {
			t.Errorf("after set(%s, %s): get = %s, %v", s.name, s.h, got, ok)
		}
		if got := tab.len(); got != s.n {
			t.Errorf("after set(%s, %s): len = %d, want %d", s.name, s.h, got, s.n)
		}
	}
	if got := tab.own("acme"); len(got) != 2 || got[0] != (ownRef{schemas.InstallRef("acme"), h1}) || got[1] != (ownRef{schemas.StatusRef("acme"), h1}) {
		t.Errorf("own(acme) = %v", got)
	}
	if got := tab.own("globex"); len(got) != 0 {
		t.Errorf("own(globex) after its removal = %v", got)
	}
	if _, ok := tab.installs["globex"]; ok {
		t.Error("an install without refs keeps an entry")
	}
	if got, _ := tab.get(schemas.StatusRef("acme/x")); !got.IsZero() {
		t.Errorf("a deeper name reads %s", got)
	}
	snap, _ := tab.snapshot()
	if len(snap) != 1 || snap["acme"] != (installTips{desired: h1, status: h1}) {
		t.Errorf("snapshot = %v", snap)
	}
	repo := tableRepo{refs: snap}
	if got, _ := repo.Refs(schemas.StatusRefPrefix); len(got) != 1 || got[plumbing.ReferenceName(schemas.StatusRef("acme"))] != h1 {
		t.Errorf("tableRepo.Refs(status) = %v", got)
	}
	if got, _ := repo.Ref(plumbing.ReferenceName(schemas.InstallRef("acme"))); got != h1 {
		t.Errorf("tableRepo.Ref(desired of acme) = %s", got)
	}
}

// TestLoadRefs: the table loaded from a repository holds its desired and
// status refs, loose and packed, and nothing else; a ref of an install
// named like a prefix of another's stays its own.
func TestLoadRefs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "refs.git")
	if out, err := exec.Command("git", "init", "--quiet", "--bare", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	tree := git("mktree")
	a, b := git("commit-tree", tree, "-m", "a"), git("commit-tree", tree, "-m", "b")
	git("update-ref", schemas.InstallRef("acme"), a)
	git("update-ref", schemas.StatusRef("acme"), b)
	git("update-ref", schemas.InstallRef("acme2"), b)
	git("pack-refs", "--all")
	git("update-ref", schemas.StatusRef("globex"), a) // loose
	git("update-ref", "refs/heads/main", a)
	git("update-ref", "refs/heads/nuon/rollouts/stable", a)

	tab, err := loadRefs(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	ha, hb := plumbing.NewHash(a), plumbing.NewHash(b)
	want := map[string]installTips{"acme": {ha, hb}, "acme2": {desired: hb}, "globex": {status: ha}}
	if got, _ := tab.snapshot(); !maps.Equal(got, want) {
		t.Errorf("loaded %v, want %v", got, want)
	}
	if tab.len() != 4 || len(tab.other) != 0 {
		t.Errorf("len %d, other %v; want 4 refs, no other", tab.len(), tab.other)
	}
	if _, err := loadRefs(context.Background(), filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("loadRefs of a missing repository: no error")
	}
}

package gitrepo_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
)

// bare makes a bare repository with three commits on main and returns its
// path and the commits.
func bare(t testing.TB) (string, []plumbing.Hash) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo.git")
	gittest.InitBare(t, dir)
	src := t.TempDir()
	var commits []plumbing.Hash
	for _, content := range []string{"one", "two", "three"} {
		if err := os.WriteFile(filepath.Join(src, "f"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		commits = append(commits, plumbing.NewHash(gittest.CommitDir(t, dir, "main", src, content)))
	}
	return dir, commits
}

func open(t testing.TB, dir string) *gitrepo.Repo {
	t.Helper()
	r, err := gitrepo.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// refs lists the refs git sees.
func refs(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(gittest.Git(t, dir, "for-each-ref", "--format=%(refname) %(objectname)"), "\n") {
		if name, h, ok := strings.Cut(line, " "); ok {
			out[name] = h
		}
	}
	return out
}

func TestApplyLocalPacksNewRefs(t *testing.T) {
	dir, c := bare(t)
	ctx := context.Background()
	var updates []gitrepo.Update
	want := refs(t, dir)
	// More updates than are written as ref files of their own.
	ids := []string{"b", "a", "c"}
	for i := range 70 {
		ids = append(ids, fmt.Sprintf("x%02d", i))
	}
	for _, id := range ids {
		name := plumbing.ReferenceName("refs/heads/nuon/installs/" + id)
		updates = append(updates, gitrepo.Update{Name: name, New: c[0]})
		want[name.String()] = c[0].String()
	}
	updates = append(updates, gitrepo.Update{Name: "refs/heads/nuon/rendered", New: c[1]})
	want["refs/heads/nuon/rendered"] = c[1].String()
	if err := open(t, dir).Apply(ctx, updates); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, refs(t, dir)); diff != "" {
		t.Errorf("refs (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(dir, "refs", "heads", "nuon")); err == nil {
		t.Error("new refs were written as files of their own")
	}
	if _, err := os.Stat(filepath.Join(dir, "packed-refs.lock")); err == nil {
		t.Error("packed-refs.lock is left behind")
	}
	if out := gittest.Git(t, dir, "fsck", "--strict", "--no-dangling"); out != "" {
		t.Errorf("git fsck: %s", out)
	}

	// Updates of packed refs are compare-and-swapped as a whole.
	stale := []gitrepo.Update{
		{Name: "refs/heads/nuon/installs/a", Old: c[0], New: c[2]},
		{Name: "refs/heads/nuon/rendered", Old: c[0], New: c[2]},
	}
	if err := open(t, dir).Apply(ctx, stale); !errors.Is(err, gitrepo.ErrStale) {
		t.Fatalf("apply with a stale old value: %v, want ErrStale", err)
	}
	if diff := cmp.Diff(want, refs(t, dir)); diff != "" {
		t.Errorf("a stale apply moved refs (-want +got):\n%s", diff)
	}
	stale[1].Old = c[1]
	if err := open(t, dir).Apply(ctx, stale); err != nil {
		t.Fatal(err)
	}
	want["refs/heads/nuon/installs/a"], want["refs/heads/nuon/rendered"] = c[2].String(), c[2].String()
	if diff := cmp.Diff(want, refs(t, dir)); diff != "" {
		t.Errorf("refs (-want +got):\n%s", diff)
	}
	// A ref that exists must not be created again.
	if err := open(t, dir).Apply(ctx, []gitrepo.Update{{Name: "refs/heads/nuon/installs/b", New: c[2]}}); !errors.Is(err, gitrepo.ErrStale) {
		t.Errorf("creating an existing ref: %v, want ErrStale", err)
	}
}

// TestApplyLocalWithGit mixes refs git wrote as files, an annotated tag in
// packed-refs and refs this package packs: each is read and updated as
// git expects.
func TestApplyLocalWithGit(t *testing.T) {
	dir, c := bare(t)
	ctx := context.Background()
	gittest.Git(t, dir, "tag", "-a", "-m", "v1", "v1", c[0].String())
	gittest.Git(t, dir, "pack-refs", "--all")
	peeled := gittest.Git(t, dir, "show-ref", "-d", "v1")
	gittest.Git(t, dir, "update-ref", "refs/heads/nuon/installs/loose", c[0].String())

	updates := []gitrepo.Update{
		{Name: "refs/heads/nuon/installs/loose", Old: c[0], New: c[1]},
		{Name: "refs/heads/main", Old: c[2], New: c[1]},
		{Name: "refs/heads/nuon/installs/new", New: c[2]},
	}
	if err := open(t, dir).Apply(ctx, updates); err != nil {
		t.Fatal(err)
	}
	for _, u := range updates {
		if got := gittest.Git(t, dir, "rev-parse", u.Name.String()); got != u.New.String() {
			t.Errorf("%s = %s, want %s", u.Name, got, u.New)
		}
	}
	if got := gittest.Git(t, dir, "show-ref", "-d", "v1"); got != peeled {
		t.Errorf("tag v1 after the update:\n%s\nwant\n%s", got, peeled)
	}
	// git moves a packed ref as a file of its own; Apply then swaps that.
	gittest.Git(t, dir, "update-ref", "refs/heads/nuon/installs/new", c[0].String(), c[2].String())
	if err := open(t, dir).Apply(ctx, []gitrepo.Update{{Name: "refs/heads/nuon/installs/new", Old: c[2], New: c[1]}}); !errors.Is(err, gitrepo.ErrStale) {
		t.Errorf("apply after git moved the ref: %v, want ErrStale", err)
	}
	if err := open(t, dir).Apply(ctx, []gitrepo.Update{{Name: "refs/heads/nuon/installs/new", Old: c[0], New: c[1]}}); err != nil {
		t.Fatal(err)
	}
	if got := gittest.Git(t, dir, "rev-parse", "refs/heads/nuon/installs/new"); got != c[1].String() {
		t.Errorf("refs/heads/nuon/installs/new = %s, want %s", got, c[1])
	}
	if out := gittest.Git(t, dir, "fsck", "--strict", "--no-dangling"); out != "" {
		t.Errorf("git fsck: %s", out)
	}
	gittest.Git(t, dir, "pack-refs", "--all")
	if got := gittest.Git(t, dir, "rev-parse", "refs/heads/nuon/installs/loose"); got != c[1].String() {
		t.Errorf("after git pack-refs: %s", got)
	}
}

func TestApplyLocalRefusals(t *testing.T) {
	dir, c := bare(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		updates []gitrepo.Update
		want    string
	}{
		{"a ref named like an existing ref's folder", []gitrepo.Update{{Name: "refs/heads/main/x", New: c[0]}}, "refs/heads/main exists"},
		{"a bad name", []gitrepo.Update{{Name: "refs/heads/a b", New: c[0]}}, "not a valid ref name"},
		{"neither old nor new", []gitrepo.Update{{Name: "refs/heads/main"}}, "neither an old nor a new value"},
		{"a deletion from a stale read", []gitrepo.Update{{Name: "refs/heads/main", Old: c[1]}}, "moved since it was read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := refs(t, dir)
			err := open(t, dir).Apply(ctx, tc.updates)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("apply: %v, want %q", err, tc.want)
			}
			if diff := cmp.Diff(before, refs(t, dir)); diff != "" {
				t.Errorf("refs moved (-before +after):\n%s", diff)
			}
		})
	}

	// Another writer holding packed-refs.lock makes the update stale.
	if err := os.WriteFile(filepath.Join(dir, "packed-refs.lock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := open(t, dir).Apply(ctx, []gitrepo.Update{{Name: "refs/heads/x", New: c[0]}})
	if !errors.Is(err, gitrepo.ErrStale) {
		t.Errorf("apply while packed-refs is locked: %v, want ErrStale", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "packed-refs.lock")); err != nil {
		t.Errorf("the other writer's lock was removed: %v", err)
	}
}

// TestApplyLocalUnsortedPackedRefs hands Apply a packed-refs file that git
// did not write (unsorted, one name twice, no header) and checks that the
// refs it keeps and adds come out sorted, each once, the last line of a
// name winning, as git reads them.
func TestApplyLocalUnsortedPackedRefs(t *testing.T) {
	dir, c := bare(t)
	ctx := context.Background()
	gittest.Git(t, dir, "pack-refs", "--all")
	packed := c[0].String() + " refs/heads/nuon/installs/b\n" +
		c[2].String() + " refs/heads/main\n" +
		c[1].String() + " refs/heads/nuon/installs/d\n" +
		c[0].String() + " refs/heads/nuon/installs/d\n"
	if err := os.WriteFile(filepath.Join(dir, "packed-refs"), []byte(packed), 0o644); err != nil {
		t.Fatal(err)
	}
	updates := []gitrepo.Update{
		{Name: "refs/heads/nuon/installs/d", Old: c[0], New: c[2]},
		{Name: "refs/heads/nuon/installs/a", New: c[1]},
		{Name: "refs/heads/nuon/installs/c", New: c[1]},
		{Name: "refs/heads/nuon/installs/e", New: c[0]},
	}
	if err := open(t, dir).Apply(ctx, updates); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "packed-refs"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n")[1:] {
		names = append(names, strings.Fields(line)[1])
	}
	want := []string{"refs/heads/main", "refs/heads/nuon/installs/a", "refs/heads/nuon/installs/b",
		"refs/heads/nuon/installs/c", "refs/heads/nuon/installs/d", "refs/heads/nuon/installs/e"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("packed-refs names (-want +got):\n%s", diff)
	}
	wantRefs := map[string]string{
		"refs/heads/main": c[2].String(), "refs/heads/nuon/installs/a": c[1].String(),
		"refs/heads/nuon/installs/b": c[0].String(), "refs/heads/nuon/installs/c": c[1].String(),
		"refs/heads/nuon/installs/d": c[2].String(), "refs/heads/nuon/installs/e": c[0].String(),
	}
	if diff := cmp.Diff(wantRefs, refs(t, dir)); diff != "" {
		t.Errorf("refs git sees (-want +got):\n%s", diff)
	}
}

// BenchmarkApplyLocalFleet moves the refs of a render of 100,000 installs
// on a repository on disk: creates them all (a cold render), then moves two
// (a one-install render) and reports that as move2-ms/op.
func BenchmarkApplyLocalFleet(b *testing.B) {
	const n = 100000
	var move2 time.Duration
	for b.Loop() {
		b.StopTimer()
		dir, c := bare(b)
		updates := make([]gitrepo.Update, n)
		for i := range updates {
			updates[i] = gitrepo.Update{Name: plumbing.ReferenceName(fmt.Sprintf("refs/heads/nuon/installs/i%06d", i)), New: c[0]}
		}
		b.StartTimer()
		if err := open(b, dir).Apply(context.Background(), updates); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		start := time.Now()
		two := []gitrepo.Update{
			{Name: updates[n/2].Name, Old: c[0], New: c[1]},
			{Name: "refs/heads/main", Old: c[2], New: c[1]},
		}
		if err := open(b, dir).Apply(context.Background(), two); err != nil {
			b.Fatal(err)
		}
		move2 += time.Since(start)
		b.StartTimer()
	}
	b.ReportMetric(float64(move2.Microseconds())/1000/float64(b.N), "move2-ms/op")
}

// TestApplyLocalFewUpdatesAreRefFiles: a render that moves two of many
// packed refs writes them as ref files under git's locks and leaves
// packed-refs as it was; RefList and git see the same refs; a later large
// update takes those files into a new packed-refs.
func TestApplyLocalFewUpdatesAreRefFiles(t *testing.T) {
	dir, c := bare(t)
	ctx := context.Background()
	want := refs(t, dir)
	var many []gitrepo.Update
	for i := range 100 {
		name := fmt.Sprintf("refs/heads/nuon/installs/i%03d", i)
		many = append(many, gitrepo.Update{Name: plumbing.ReferenceName(name), New: c[0]})
		want[name] = c[0].String()
	}
	if err := open(t, dir).Apply(ctx, many); err != nil {
		t.Fatal(err)
	}
	packed, err := os.ReadFile(filepath.Join(dir, "packed-refs"))
	if err != nil {
		t.Fatal(err)
	}

	few := []gitrepo.Update{
		{Name: "refs/heads/nuon/installs/i042", Old: c[0], New: c[1]},
		{Name: "refs/heads/nuon/installs/new", New: c[2]},
		{Name: "refs/heads/nuon/rendered", New: c[1]},
	}
	if err := open(t, dir).Apply(ctx, few); err != nil {
		t.Fatal(err)
	}
	for _, u := range few {
		want[u.Name.String()] = u.New.String()
		data, err := os.ReadFile(filepath.Join(dir, u.Name.String()))
		if err != nil || string(data) != u.New.String()+"\n" {
			t.Errorf("%s: file %q (%v), want its own file", u.Name, data, err)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "packed-refs")); string(after) != string(packed) {
		t.Error("a small update rewrote packed-refs")
	}
	if diff := cmp.Diff(want, refs(t, dir)); diff != "" {
		t.Errorf("refs git sees (-want +got):\n%s", diff)
	}
	list, err := open(t, dir).RefList("refs/heads/nuon/installs/")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for i, r := range list {
		if i > 0 && list[i-1].Name >= r.Name {
			t.Errorf("RefList: %s after %s", r.Name, list[i-1].Name)
		}
		got[r.Name] = r.Hash.String()
	}
	wantInstalls := map[string]string{}
	for name, h := range want {
		if strings.HasPrefix(name, "refs/heads/nuon/installs/") {
			wantInstalls[name] = h
		}
	}
	if diff := cmp.Diff(wantInstalls, got); diff != "" {
		t.Errorf("RefList (-want +got):\n%s", diff)
	}

	// Stale: the old value is checked against the file, not packed-refs.
	stale := []gitrepo.Update{{Name: "refs/heads/nuon/installs/i042", Old: c[0], New: c[2]}}
	if err := open(t, dir).Apply(ctx, stale); !errors.Is(err, gitrepo.ErrStale) {
		t.Errorf("apply with a stale old value: %v, want ErrStale", err)
	}
	// A writer holding a ref's lock makes the update stale, and keeps it.
	lock := filepath.Join(dir, "refs/heads/nuon/installs/i007.lock")
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	locked := []gitrepo.Update{{Name: "refs/heads/nuon/installs/i007", Old: c[0], New: c[2]}}
	if err := open(t, dir).Apply(ctx, locked); !errors.Is(err, gitrepo.ErrStale) {
		t.Errorf("apply of a locked ref: %v, want ErrStale", err)
	}
	if _, err := os.Stat(lock); err != nil {
		t.Errorf("the other writer's lock was removed: %v", err)
	}
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, refs(t, dir)); diff != "" {
		t.Errorf("refused updates moved refs (-want +got):\n%s", diff)
	}

	// A large update folds the install ref files it does not move into
	// packed-refs.
	for i := range many {
		many[i].Old, many[i].New = c[0], c[2]
		if many[i].Name == "refs/heads/nuon/installs/i042" {
			many[i].Old = c[1]
		}
		want[many[i].Name.String()] = c[2].String()
	}
	if err := open(t, dir).Apply(ctx, many); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, refs(t, dir)); diff != "" {
		t.Errorf("refs after a large update (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(dir, "refs/heads/nuon/installs/new")); err == nil {
		t.Error("the ref file of installs/new was not folded into packed-refs")
	}
	if out := gittest.Git(t, dir, "fsck", "--strict", "--no-dangling"); out != "" {
		t.Errorf("git fsck: %s", out)
	}
}

// TestApplyLocalDeletes archives refs as an install's delete does: copies
// under another name and deletions in one Apply, for a ref in packed-refs,
// a ref with a file of its own, and one that has both (git pack-refs, then
// update-ref); a deletion from a stale read moves nothing.
func TestApplyLocalDeletes(t *testing.T) {
	ctx := context.Background()
	dir, c := bare(t)
	gittest.Git(t, dir, "update-ref", "refs/heads/nuon/installs/acme", c[0].String())
	gittest.Git(t, dir, "update-ref", "refs/heads/nuon/status/acme", c[1].String())
	gittest.Git(t, dir, "pack-refs", "--all")
	// packed and then moved: a file and a packed-refs line.
	gittest.Git(t, dir, "update-ref", "refs/heads/nuon/status/acme", c[2].String())
	gittest.Git(t, dir, "update-ref", "refs/heads/loose", c[0].String())
	if _, err := os.Stat(filepath.Join(dir, "refs", "heads", "nuon", "status", "acme")); err != nil {
		t.Fatalf("the status ref has no file of its own: %v", err)
	}
	r := open(t, dir)

	stale := []gitrepo.Update{
		{Name: "refs/nuon/archive/acme/status", New: c[1]},
		{Name: "refs/heads/nuon/status/acme", Old: c[1], New: plumbing.ZeroHash},
	}
	before := refs(t, dir)
	if err := r.Apply(ctx, stale); !errors.Is(err, gitrepo.ErrStale) {
		t.Fatalf("delete from a stale read: %v, want ErrStale", err)
	}
	if diff := cmp.Diff(before, refs(t, dir)); diff != "" {
		t.Errorf("a stale delete moved refs (-want +got):\n%s", diff)
	}

	err := r.Apply(ctx, []gitrepo.Update{
		{Name: "refs/nuon/archive/acme/installs", New: c[0]},
		{Name: "refs/nuon/archive/acme/status", New: c[2]},
		{Name: "refs/heads/nuon/installs/acme", Old: c[0], New: plumbing.ZeroHash},
		{Name: "refs/heads/loose", Old: c[0], New: plumbing.ZeroHash},
		{Name: "refs/heads/nuon/status/acme", Old: c[2], New: plumbing.ZeroHash},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"refs/heads/main":                 c[2].String(),
		"refs/nuon/archive/acme/installs": c[0].String(),
		"refs/nuon/archive/acme/status":   c[2].String(),
	}
	if diff := cmp.Diff(want, refs(t, dir)); diff != "" {
		t.Errorf("refs (-want +got):\n%s", diff)
	}
	packed, err := os.ReadFile(filepath.Join(dir, "packed-refs"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(packed), "nuon/status/acme") || strings.Contains(string(packed), "nuon/installs/acme") {
		t.Errorf("packed-refs still names a deleted ref:\n%s", packed)
	}
	gittest.Git(t, dir, "fsck", "--strict")

	// Deleting what is gone is stale.
	err = r.Apply(ctx, []gitrepo.Update{{Name: "refs/heads/nuon/status/acme", Old: c[2], New: plumbing.ZeroHash}})
	if !errors.Is(err, gitrepo.ErrStale) {
		t.Errorf("deleting a deleted ref: %v, want ErrStale", err)
	}
}

// TestRefListSeesPackedRefsChanged: RefList keeps the refs of the
// packed-refs it last parsed, by the file's content. A packed-refs
// rewritten behind the process's back with the same size and time (one
// ref's commit changed in place) is listed as it now is, never as kept;
// as is a listing of another prefix of the same file.
func TestRefListSeesPackedRefsChanged(t *testing.T) {
	dir, c := bare(t)
	ctx := context.Background()
	var many []gitrepo.Update
	for i := range 100 {
		many = append(many, gitrepo.Update{Name: plumbing.ReferenceName(fmt.Sprintf("refs/heads/nuon/installs/i%03d", i)), New: c[0]})
	}
	if err := open(t, dir).Apply(ctx, many); err != nil {
		t.Fatal(err)
	}
	list := func(prefix string) map[string]plumbing.Hash {
		t.Helper()
		refs, err := open(t, dir).RefList(prefix)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]plumbing.Hash{}
		for _, r := range refs {
			out[r.Name] = r.Hash
		}
		return out
	}
	const name = "refs/heads/nuon/installs/i042"
	if got := list("refs/heads/nuon/installs/")[name]; got != c[0] {
		t.Fatalf("%s at %s, want %s", name, got, c[0])
	}
	file := filepath.Join(dir, "packed-refs")
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	line := c[0].String() + " " + name + "\n"
	if !strings.Contains(string(data), line) {
		t.Fatalf("packed-refs has no line %q", line)
	}
	edited := strings.Replace(string(data), line, c[1].String()+" "+name+"\n", 1)
	if err := os.WriteFile(file, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(file, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if got := list("refs/heads/nuon/installs/")[name]; got != c[1] {
		t.Errorf("after packed-refs changed: %s at %s, want %s", name, got, c[1])
	}
	if got := list("refs/heads/nuon/installs/i04"); got[name] != c[1] || len(got) != 10 {
		t.Errorf("refs under another prefix: %d, %s at %s; want 10, %s", len(got), name, got[name], c[1])
	}
}

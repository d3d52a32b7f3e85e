package gitobj_test

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gittest"
)

// sample fills a batch with a small history: blobs, nested trees (a file
// "a.b" beside a folder "a", which git sorts as "a/") and a commit, and
// returns the commit.
func sample(t *testing.T, b *gitobj.Batch) plumbing.Hash {
	t.Helper()
	readme := b.Add(plumbing.BlobObject, []byte("hello\n"))
	empty := b.Add(plumbing.BlobObject, nil)
	big := b.Add(plumbing.BlobObject, bytes.Repeat([]byte("0123456789abcdef"), 4096))
	sub := b.Tree([]gitobj.Entry{
		{Name: "x.json", Mode: filemode.Regular, Hash: readme},
		{Name: "run.sh", Mode: filemode.Executable, Hash: empty},
	})
	root := b.Tree([]gitobj.Entry{
		{Name: "a.b", Mode: filemode.Regular, Hash: readme},
		{Name: "a", Mode: filemode.Dir, Hash: sub},
		{Name: "a-b", Mode: filemode.Regular, Hash: big},
		{Name: "a0", Mode: filemode.Regular, Hash: empty},
	})
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	who := object.Signature{Name: "nuon test", Email: "test@nuon.invalid", When: when}
	c := &object.Commit{Author: who, Committer: who, Message: "sample\n", TreeHash: root}
	var o plumbing.MemoryObject
	if err := c.Encode(&o); err != nil {
		t.Fatal(err)
	}
	h, err := b.AddEncoded(&o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestFlushIntoBareRepository(t *testing.T) {
	dir, repo := bareRepo(t)
	b := gitobj.NewBatch()
	commit := sample(t, b)
	if err := b.Flush(repo.Storer); err != nil {
		t.Fatalf("flush: %v", err)
	}
	gittest.Git(t, dir, "update-ref", "refs/heads/main", commit.String())

	if out := gittest.Git(t, dir, "fsck", "--strict", "--no-dangling"); out != "" {
		t.Errorf("git fsck --strict: %s", out)
	}
	if got := gittest.Git(t, dir, "count-objects", "-v"); !strings.Contains(got, fmt.Sprintf("in-pack: %d", b.Len())) {
		t.Errorf("git count-objects: want %d objects in one pack:\n%s", b.Len(), got)
	}
	// Every object reads back through git as the batch holds it.
	for _, h := range hashes(t, dir) {
		typ, content, ok := b.Get(h)
		if !ok {
			t.Errorf("git holds %s, which is not in the batch", h)
			continue
		}
		if got := gittest.Git(t, dir, "cat-file", "-t", h.String()); got != typ.String() {
			t.Errorf("git cat-file -t %s = %s, want %s", h, got, typ)
		}
		raw, err := gittest.Run(dir, nil, "cat-file", typ.String(), h.String())
		if err != nil {
			t.Fatal(err)
		}
		if typ != plumbing.TreeObject && raw != strings.TrimSpace(string(content)) {
			t.Errorf("git cat-file %s %s = %q, want %q", typ, h, raw, content)
		}
	}
	if got := gittest.Git(t, dir, "ls-tree", "--name-only", "main"); got != "a-b\na.b\na\na0" {
		t.Errorf("git ls-tree main:\n%s", got)
	}
	// The repository that flushed reads its new objects at once.
	if _, err := repo.CommitObject(commit); err != nil {
		t.Errorf("read the flushed commit back through go-git: %v", err)
	}
	idx, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "pack-*.idx"))
	if err != nil || len(idx) != 1 {
		t.Fatalf("pack indexes: %v %v", idx, err)
	}
	gittest.Git(t, dir, "verify-pack", idx[0])
	// Flushing the same batch again writes the same pack over itself.
	if err := b.Flush(repo.Storer); err != nil {
		t.Fatalf("second flush: %v", err)
	}
	if out := gittest.Git(t, dir, "fsck", "--strict", "--no-dangling"); out != "" {
		t.Errorf("git fsck --strict after a second flush: %s", out)
	}
}

// hashes lists every object git finds in the repository.
func hashes(t *testing.T, dir string) []plumbing.Hash {
	t.Helper()
	var out []plumbing.Hash
	for _, line := range strings.Split(gittest.Git(t, dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"), "\n") {
		out = append(out, plumbing.NewHash(line))
	}
	return out
}

func TestFlushWithoutPacks(t *testing.T) {
	st := memory.NewStorage()
	b := gitobj.NewBatch()
	commit := sample(t, b)
	if err := b.Flush(st); err != nil {
		t.Fatal(err)
	}
	c, err := object.GetCommit(st, commit)
	if err != nil {
		t.Fatal(err)
	}
	files, err := c.Files()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	if err := files.ForEach(func(f *object.File) error { names = append(names, f.Name); return nil }); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(names, " "), "a-b a.b a/run.sh a/x.json a0"; got != want {
		t.Errorf("files = %s, want %s", got, want)
	}
}

func TestWritePackIsStable(t *testing.T) {
	var packs [2]bytes.Buffer
	for i := range packs {
		b := gitobj.NewBatch()
		sample(t, b)
		if err := b.WritePack(&packs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(packs[0].Bytes(), packs[1].Bytes()) {
		t.Fatal("the same batch gave two different packs")
	}
	dir := filepath.Join(t.TempDir(), "repo.git")
	gittest.InitBare(t, dir)
	cmd := exec.Command("git", "index-pack", "--stdin", "--strict")
	cmd.Dir = dir
	cmd.Stdin = &packs[0]
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git index-pack: %v: %s", err, out)
	}
}

// TestEncodeTreeSortsLikeGit builds trees with git mktree, which sorts its
// input itself, and checks that EncodeTree gives the same ids.
func TestEncodeTreeSortsLikeGit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo.git")
	gittest.InitBare(t, dir)
	blob := plumbing.NewHash(gittest.Git(t, dir, "hash-object", "-w", "--stdin"))
	emptyTree := plumbing.NewHash(gittest.Git(t, dir, "mktree"))
	file := func(name string) gitobj.Entry { return gitobj.Entry{Name: name, Mode: filemode.Regular, Hash: blob} }
	folder := func(name string) gitobj.Entry { return gitobj.Entry{Name: name, Mode: filemode.Dir, Hash: emptyTree} }
	for _, tc := range []struct {
		name    string
		entries []gitobj.Entry
	}{
		{"file a.b before folder a", []gitobj.Entry{folder("a"), file("a.b")}},
		{"folder a before file a0", []gitobj.Entry{file("a0"), folder("a")}},
		{"folder a after file a-b", []gitobj.Entry{folder("a"), file("a-b")}},
		{"files only", []gitobj.Entry{file("b"), file("a"), file("A"), file("_")}},
		{"folders and files", []gitobj.Entry{folder("components"), file("install.json"), file("components.json"), folder("component")}},
		{"executable and symlink", []gitobj.Entry{{Name: "run", Mode: filemode.Executable, Hash: blob}, {Name: "link", Mode: filemode.Symlink, Hash: blob}}},
		{"folders that prefix others", []gitobj.Entry{folder("i10"), folder("i1-x"), folder("i1"), folder("i1.x"), file("i1_")}},
		{"file and folder of one name apart", []gitobj.Entry{folder("x"), file("x-"), file("x0"), folder("xy")}},
		{"empty", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in strings.Builder
			for _, e := range tc.entries {
				typ := "blob"
				if e.Mode == filemode.Dir {
					typ = "tree"
				}
				fmt.Fprintf(&in, "%o %s %s\t%s\n", uint32(e.Mode), typ, e.Hash, e.Name)
			}
			want, err := gittest.Run(dir, []byte(in.String()), "mktree")
			if err != nil {
				t.Fatal(err)
			}
			b := gitobj.NewBatch()
			if got := b.Tree(tc.entries); got.String() != want {
				t.Errorf("tree = %s, git mktree = %s\n%s", got, want, in.String())
			}
			if got := plumbing.ComputeHash(plumbing.TreeObject, gitobj.EncodeTree(tc.entries)); got.String() != want {
				t.Errorf("EncodeTree hashes to %s, git mktree = %s", got, want)
			}
		})
	}
}

func TestAddKeepsOneCopy(t *testing.T) {
	b := gitobj.NewBatch()
	h1 := b.Add(plumbing.BlobObject, []byte("x"))
	h2 := b.Add(plumbing.BlobObject, []byte("x"))
	if h1 != h2 || b.Len() != 1 {
		t.Fatalf("same blob twice: %s, %s, %d objects", h1, h2, b.Len())
	}
	if want := plumbing.ComputeHash(plumbing.BlobObject, []byte("x")); h1 != want {
		t.Fatalf("blob id %s, want %s", h1, want)
	}
	if h3 := b.Add(plumbing.TreeObject, []byte("x")); h3 == h1 || b.Len() != 2 {
		t.Fatalf("a tree with the blob's bytes got id %s, %d objects", h3, b.Len())
	}
}

// TestFlushLargeTree writes a tree of thousands of entries, which the
// pack stores without compression, and reads it back with git.
func TestFlushLargeTree(t *testing.T) {
	dir, repo := bareRepo(t)
	b := gitobj.NewBatch()
	var entries []gitobj.Entry
	for i := range 4000 {
		entries = append(entries, gitobj.Entry{Name: fmt.Sprintf("install-%05d", i), Mode: filemode.Regular, Hash: b.Add(plumbing.BlobObject, fmt.Appendf(nil, "%d\n", i))})
	}
	tree := b.Tree(entries)
	if _, content, _ := b.Get(tree); len(content) < 64<<10 {
		t.Fatalf("the tree is only %d bytes", len(content))
	}
	if err := b.Flush(repo.Storer); err != nil {
		t.Fatal(err)
	}
	if got := len(strings.Split(gittest.Git(t, dir, "ls-tree", tree.String()), "\n")); got != 4000 {
		t.Errorf("git ls-tree lists %d entries, want 4000", got)
	}
	if got := gittest.Git(t, dir, "cat-file", "blob", tree.String()+":install-01234"); got != "1234" {
		t.Errorf("install-01234 holds %q", got)
	}
	if out := gittest.Git(t, dir, "fsck", "--strict"); strings.Contains(out, "error") {
		t.Errorf("git fsck: %s", out)
	}
	read, err := repo.TreeObject(tree)
	if err != nil || len(read.Entries) != 4000 {
		t.Errorf("go-git reads the tree back: %v", err)
	}
}

// TestMergeKeepsObjects checks that objects merged into a batch, which it
// keeps compressed, read back the same and make the same pack as when
// added, one that git accepts and whose commit git reads whole.
func TestMergeKeepsObjects(t *testing.T) {
	added, part, merged := gitobj.NewBatch(), gitobj.NewBatch(), gitobj.NewBatch()
	commit := sample(t, added)
	sample(t, part)
	merged.Merge(part)
	merged.Merge(part) // twice: still one copy of each
	if merged.Len() != added.Len() {
		t.Fatalf("merged %d objects, want %d", merged.Len(), added.Len())
	}
	typ, content, ok := added.Get(commit)
	gtyp, got, gok := merged.Get(commit)
	if !ok || !gok || typ != gtyp || !bytes.Equal(content, got) {
		t.Fatalf("merged commit reads back %v %q, want %v %q", gtyp, got, typ, content)
	}
	var want, have bytes.Buffer
	if err := added.WritePack(&want); err != nil {
		t.Fatal(err)
	}
	if err := merged.WritePack(&have); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want.Bytes(), have.Bytes()) {
		t.Fatal("a merged batch wrote another pack than the same objects added")
	}
	dir := filepath.Join(t.TempDir(), "repo.git")
	gittest.InitBare(t, dir)
	cmd := exec.Command("git", "index-pack", "--stdin", "--strict")
	cmd.Dir = dir
	cmd.Stdin = &have
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git index-pack: %v: %s", err, out)
	}
	if got := gittest.Git(t, dir, "cat-file", "-t", commit.String()); got != "commit" {
		t.Fatalf("git reads %s as %q", commit, got)
	}
	// A batch written object by object inflates what it keeps compressed.
	st := memory.NewStorage()
	if err := merged.Flush(st); err != nil {
		t.Fatal(err)
	}
	if _, err := gitobj.ReadCommit(st, commit); err != nil {
		t.Fatalf("read the commit flushed from a merged batch: %v", err)
	}
}

// TestSpooledBatch writes merged objects to a temporary pack as they come:
// before the flush the pack file is there and they read back from it;
// Flush finishes it into a pack git verifies, with every object, the ones
// added after the merges included; Close of an unflushed batch leaves no
// file behind.
func TestSpooledBatch(t *testing.T) {
	dir, repo := bareRepo(t)
	b, err := gitobj.NewSpooledBatch(repo.Storer)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	part := gitobj.NewBatch()
	commit := sample(t, part)
	b.Merge(part)
	tmp, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "tmp_pack_*"))
	if len(tmp) != 1 {
		t.Fatalf("temporary packs %v, want one", tmp)
	}
	for _, h := range []plumbing.Hash{commit} {
		typ, content, ok := b.Get(h)
		if !ok || typ != plumbing.CommitObject || !bytes.Contains(content, []byte("sample\n")) {
			t.Errorf("Get(%s) before the flush: %v %q %v", h, typ, content, ok)
		}
	}
	added := b.Add(plumbing.BlobObject, []byte("added after the merge\n"))
	if err := b.Flush(repo.Storer); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, dir, "update-ref", "refs/heads/main", commit.String())
	if out := gittest.Git(t, dir, "fsck", "--strict", "--no-dangling"); out != "" {
		t.Errorf("git fsck --strict: %s", out)
	}
	if got := gittest.Git(t, dir, "cat-file", "blob", added.String()); got != "added after the merge" {
		t.Errorf("the object added after the merges: %q", got)
	}
	if got := gittest.Git(t, dir, "count-objects", "-v"); !strings.Contains(got, fmt.Sprintf("in-pack: %d", b.Len())) {
		t.Errorf("git count-objects: want %d objects in one pack:\n%s", b.Len(), got)
	}
	idx, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "pack-*.idx"))
	if len(idx) != 1 {
		t.Fatalf("pack indexes %v, want one", idx)
	}
	gittest.Git(t, dir, "verify-pack", idx[0])
	if tmp, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "tmp_*")); len(tmp) != 0 {
		t.Errorf("left behind: %v", tmp)
	}

	discarded, err := gitobj.NewSpooledBatch(repo.Storer)
	if err != nil {
		t.Fatal(err)
	}
	discarded.Merge(part)
	if err := discarded.Close(); err != nil {
		t.Fatal(err)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "tmp_*")); len(tmp) != 0 {
		t.Errorf("left behind by Close: %v", tmp)
	}
}

// TestSpooledBatchDedupes merges parts that overlap, from four goroutines
// at once, and objects added before they come in a part, into a spooled
// batch of 10,000 objects (its index doubles several times on the way):
// each object is written once, every one reads back, and git finds
// exactly them in the one pack.
func TestSpooledBatchDedupes(t *testing.T) {
	dir, repo := bareRepo(t)
	b, err := gitobj.NewSpooledBatch(repo.Storer)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const distinct = 10_000
	content := func(j int) []byte { return fmt.Appendf(nil, "object %d\n", j) }
	// Added, not merged: these wait in memory until Flush.
	for j := 0; j < distinct; j += 1000 {
		b.Add(plumbing.BlobObject, content(j))
	}
	// Part i holds objects 5i to 5i+9: each object comes in two parts,
	// and each part is merged by four goroutines at once, as a render's
	// workers merge.
	var parts []*gitobj.Batch
	for i := -1; 5*i < distinct; i++ {
		part := gitobj.NewBatch()
		for j := max(5*i, 0); j < min(5*i+10, distinct); j++ {
			part.Add(plumbing.BlobObject, content(j))
		}
		parts = append(parts, part)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for _, part := range parts {
				b.Merge(part)
			}
		})
	}
	wg.Wait()
	if b.Len() != distinct {
		t.Fatalf("the batch holds %d objects, want %d", b.Len(), distinct)
	}
	for _, j := range []int{0, 1, 4999, distinct - 1} {
		h := gitobj.Hash(plumbing.BlobObject, content(j))
		if typ, got, ok := b.Get(h); !ok || typ != plumbing.BlobObject || !bytes.Equal(got, content(j)) {
			t.Errorf("Get(object %d) = %v %q %v", j, typ, got, ok)
		}
	}
	if err := b.Flush(repo.Storer); err != nil {
		t.Fatal(err)
	}
	if got := gittest.Git(t, dir, "count-objects", "-v"); !strings.Contains(got, fmt.Sprintf("in-pack: %d\n", distinct)) {
		t.Errorf("git count-objects: want %d objects in one pack:\n%s", distinct, got)
	}
	idx, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "pack-*.idx"))
	if len(idx) != 1 {
		t.Fatalf("pack indexes %v, want one", idx)
	}
	gittest.Git(t, dir, "verify-pack", idx[0])
	want := map[plumbing.Hash]bool{}
	for j := range distinct {
		want[gitobj.Hash(plumbing.BlobObject, content(j))] = true
	}
	for _, h := range hashes(t, dir) {
		if !want[h] {
			t.Errorf("git holds %s, which was never merged", h)
		}
		delete(want, h)
	}
	if len(want) != 0 {
		t.Errorf("git lacks %d objects", len(want))
	}
}

// bareRepo makes an empty bare repository and opens it with go-git.
func bareRepo(t *testing.T) (string, *git.Repository) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo.git")
	gittest.InitBare(t, dir)
	repo, err := git.PlainOpen(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, repo
}

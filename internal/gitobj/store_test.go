package gitobj_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gittest"
)

// commitFiles writes n files of similar content (so that git stores them
// as deltas of each other) into the work tree dir and commits them.
func commitFiles(t *testing.T, dir string, round, n int) {
	t.Helper()
	for i := range n {
		var b strings.Builder
		for j := range 200 {
			fmt.Fprintf(&b, "line %d of a file that changes little between rounds\n", j)
		}
		fmt.Fprintf(&b, "file %d round %d\n", i, round)
		sub := filepath.Join(dir, fmt.Sprintf("d%d", i%3))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d.txt", i)), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gittest.Git(t, dir, "add", "-A")
	gittest.Git(t, dir, "commit", "--quiet", "-m", fmt.Sprintf("round %d", round))
}

func newRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	gittest.Git(t, dir, "init", "--quiet", "--initial-branch=main")
	gittest.Git(t, dir, "config", "gc.auto", "0")
	return dir
}

func open(t *testing.T, dir string) *filesystem.Storage {
	t.Helper()
	return filesystem.NewStorage(osfs.New(filepath.Join(dir, ".git")), cache.NewObjectLRUDefault())
}

// objectIDs lists every object of the repository at dir, by git.
func objectIDs(t *testing.T, dir string) []plumbing.Hash {
	t.Helper()
	var ids []plumbing.Hash
	for _, line := range strings.Fields(gittest.Git(t, dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")) {
		ids = append(ids, plumbing.NewHash(line))
	}
	return ids
}

type read struct {
	Type    plumbing.ObjectType
	Size    int64
	Content string
}

func readObject(t *testing.T, o plumbing.EncodedObject) read {
	t.Helper()
	rd, err := o.Reader()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	data, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}
	return read{o.Type(), o.Size(), string(data)}
}

// TestStore reads every object of repositories git wrote, packed with
// deltas, loose, and in several packs, through a Store and through go-git,
// and compares them.
func TestStore(t *testing.T) {
	tests := []struct {
		name  string
		build func(t *testing.T, dir string)
	}{
		{"gc", func(t *testing.T, dir string) {
			for r := range 4 {
				commitFiles(t, dir, r, 30)
			}
			gittest.Git(t, dir, "gc", "--quiet")
		}},
		{"aggressive", func(t *testing.T, dir string) {
			for r := range 4 {
				commitFiles(t, dir, r, 30)
			}
			gittest.Git(t, dir, "gc", "--quiet", "--aggressive")
		}},
		{"loose", func(t *testing.T, dir string) {
			commitFiles(t, dir, 0, 10)
			commitFiles(t, dir, 1, 10)
		}},
		{"loose stored", func(t *testing.T, dir string) {
			// As the tenant server keeps its repository: loose objects
			// of stored blocks, one of them over a block's 64 KB.
			gittest.Git(t, dir, "config", "core.looseCompression", "0")
			commitFiles(t, dir, 0, 10)
			big := bytes.Repeat([]byte("a line of a file over one stored block\n"), 5000)
			if err := os.WriteFile(filepath.Join(dir, "big.txt"), big, 0o644); err != nil {
				t.Fatal(err)
			}
			commitFiles(t, dir, 1, 10)
		}},
		{"several packs and loose", func(t *testing.T, dir string) {
			commitFiles(t, dir, 0, 20)
			gittest.Git(t, dir, "repack", "-d", "--quiet")
			commitFiles(t, dir, 1, 20)
			gittest.Git(t, dir, "repack", "-d", "--quiet")
			commitFiles(t, dir, 2, 20)
			gittest.Git(t, dir, "repack", "-d", "--quiet", "--depth=1")
			commitFiles(t, dir, 3, 5)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := newRepo(t)
			tt.build(t, dir)
			ids := objectIDs(t, dir)
			if len(ids) == 0 {
				t.Fatal("no objects")
			}
			st := gitobj.NewStore(open(t, dir))
			ref := open(t, dir)
			for _, h := range ids {
				want, err := ref.EncodedObject(plumbing.AnyObject, h)
				if err != nil {
					t.Fatalf("go-git %s: %v", h, err)
				}
				got, err := st.EncodedObject(plumbing.AnyObject, h)
				if err != nil {
					t.Fatalf("read %s: %v", h, err)
				}
				if got.Hash() != h {
					t.Errorf("read %s: hash %s", h, got.Hash())
				}
				if diff := cmp.Diff(readObject(t, want), readObject(t, got)); diff != "" {
					t.Errorf("read %s (-go-git +store):\n%s", h, diff)
				}
				if err := st.HasEncodedObject(h); err != nil {
					t.Errorf("has %s: %v", h, err)
				}
				if size, err := st.EncodedObjectSize(h); err != nil || size != want.Size() {
					t.Errorf("size of %s: %d, %v; want %d", h, size, err, want.Size())
				}
				if _, err := st.EncodedObject(otherType(want.Type()), h); !errors.Is(err, plumbing.ErrObjectNotFound) {
					t.Errorf("read %s as %s: %v, want not found", h, otherType(want.Type()), err)
				}
			}
			missing := plumbing.NewHash("00000000000000000000000000000000000000ff")
			if _, err := st.EncodedObject(plumbing.AnyObject, missing); !errors.Is(err, plumbing.ErrObjectNotFound) {
				t.Errorf("read a missing object: %v, want not found", err)
			}
			if err := st.HasEncodedObject(missing); !errors.Is(err, plumbing.ErrObjectNotFound) {
				t.Errorf("has a missing object: %v, want not found", err)
			}
			if _, err := st.EncodedObjectSize(missing); !errors.Is(err, plumbing.ErrObjectNotFound) {
				t.Errorf("size of a missing object: %v, want not found", err)
			}
		})
	}
}

func otherType(t plumbing.ObjectType) plumbing.ObjectType {
	if t == plumbing.BlobObject {
		return plumbing.TreeObject
	}
	return plumbing.BlobObject
}

// TestStoreNewPacks reads objects that git and a Batch add after the store
// first read the repository.
func TestStoreNewPacks(t *testing.T) {
	dir := newRepo(t)
	commitFiles(t, dir, 0, 10)
	gittest.Git(t, dir, "gc", "--quiet")
	st := gitobj.NewStore(open(t, dir))
	head := plumbing.NewHash(gittest.Git(t, dir, "rev-parse", "HEAD"))
	if _, err := st.EncodedObject(plumbing.CommitObject, head); err != nil {
		t.Fatal(err)
	}

	commitFiles(t, dir, 1, 10)
	gittest.Git(t, dir, "repack", "--quiet")
	head = plumbing.NewHash(gittest.Git(t, dir, "rev-parse", "HEAD"))
	if _, err := st.EncodedObject(plumbing.CommitObject, head); err != nil {
		t.Fatalf("read a commit of a new pack: %v", err)
	}

	b := gitobj.NewBatch()
	blobs := map[plumbing.Hash]string{}
	for i := range 50 {
		s := fmt.Sprintf("object %d of a batch\n", i)
		blobs[b.Add(plumbing.BlobObject, []byte(s))] = s
	}
	if err := b.Flush(st); err != nil {
		t.Fatal(err)
	}
	for h, want := range blobs {
		o, err := st.EncodedObject(plumbing.BlobObject, h)
		if err != nil {
			t.Fatalf("read %s of a batch: %v", h, err)
		}
		if got := readObject(t, o).Content; got != want {
			t.Errorf("read %s: %q, want %q", h, got, want)
		}
	}
	if out := gittest.Git(t, dir, "fsck", "--strict"); strings.Contains(out, "error") {
		t.Fatal(out)
	}
}

// TestStoreCorrupt finds a damaged pack entry rather than returning wrong
// content.
func TestStoreCorrupt(t *testing.T) {
	dir := newRepo(t)
	b := gitobj.NewBatch()
	content := bytes.Repeat([]byte("some content to deflate\n"), 100)
	h := b.Add(plumbing.BlobObject, content)
	st := gitobj.NewStore(open(t, dir))
	if err := b.Flush(st); err != nil {
		t.Fatal(err)
	}
	packs, err := filepath.Glob(filepath.Join(dir, ".git", "objects", "pack", "*.pack"))
	if err != nil || len(packs) != 1 {
		t.Fatalf("packs %v: %v", packs, err)
	}
	data, err := os.ReadFile(packs[0])
	if err != nil {
		t.Fatal(err)
	}
	// The pack holds one entry after its 12-byte header: damage the end
	// of its deflated data.
	data[len(data)-20-3] ^= 0xff
	if err := os.Chmod(packs[0], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(packs[0], data, 0o644); err != nil {
		t.Fatal(err)
	}
	st = gitobj.NewStore(open(t, dir))
	if o, err := st.EncodedObject(plumbing.BlobObject, h); err == nil {
		t.Fatalf("read a damaged entry: got %d bytes, no error", o.Size())
	}
}

// TestStoreCorruptStored: a loose object of stored blocks whose content
// is damaged, its lengths intact, is refused by a read that does not
// check the hash (its zlib checksum) and by ReadObject (its hash).
func TestStoreCorruptStored(t *testing.T) {
	dir := newRepo(t)
	gittest.Git(t, dir, "config", "core.looseCompression", "0")
	content := bytes.Repeat([]byte("stored content, a block of it and more\n"), 3000)
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	h := plumbing.NewHash(strings.TrimSpace(gittest.Git(t, dir, "hash-object", "-w", "f.txt")))
	name := filepath.Join(dir, ".git", "objects", h.String()[:2], h.String()[2:])
	st := gitobj.NewStore(open(t, dir))
	if _, got, err := gitobj.ReadObject(st, plumbing.BlobObject, h, 0); err != nil || !bytes.Equal(got, content) {
		t.Fatalf("read the stored object: %v", err)
	}
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x01 // within the content of a block
	if err := os.Chmod(name, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
	st = gitobj.NewStore(open(t, dir))
	if o, err := st.EncodedObject(plumbing.BlobObject, h); err == nil {
		t.Errorf("read a damaged stored object: %d bytes, no error", o.Size())
	}
	if _, _, err := gitobj.ReadObject(st, plumbing.BlobObject, h, 0); err == nil {
		t.Error("ReadObject read a damaged stored object")
	}
}

// countingFS counts the reads of the pack folder.
type countingFS struct {
	billy.Filesystem
	lists *int
}

func (c countingFS) ReadDir(name string) ([]os.FileInfo, error) {
	if filepath.ToSlash(name) == "objects/pack" {
		*c.lists++
	}
	return c.Filesystem.ReadDir(name)
}

// TestStoreLooseNoListing: a loose object is read, sized and found
// without the pack folder listed again (main's new objects arrive loose,
// and each read of one listed it); an object of a pack added since is
// still found, listing it then; and an object that is nowhere is not.
func TestStoreLooseNoListing(t *testing.T) {
	dir := newRepo(t)
	commitFiles(t, dir, 0, 5)
	gittest.Git(t, dir, "gc", "--quiet")
	lists := 0
	st := gitobj.NewStore(filesystem.NewStorage(countingFS{osfs.New(filepath.Join(dir, ".git")), &lists}, cache.NewObjectLRUDefault()))
	head := plumbing.NewHash(gittest.Git(t, dir, "rev-parse", "HEAD"))
	if _, err := st.EncodedObject(plumbing.CommitObject, head); err != nil {
		t.Fatal(err)
	}
	listed := lists
	var loose []plumbing.Hash
	for i := range 3 {
		out, err := gittest.Run(dir, []byte(fmt.Sprintf("loose %d\n", i)), "hash-object", "-w", "--stdin")
		if err != nil {
			t.Fatal(err)
		}
		loose = append(loose, plumbing.NewHash(strings.TrimSpace(out)))
	}
	for i, h := range loose {
		o, err := st.EncodedObject(plumbing.BlobObject, h)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := readObject(t, o).Content, fmt.Sprintf("loose %d\n", i); got != want {
			t.Errorf("loose %s: %q, want %q", h, got, want)
		}
		if size, err := st.EncodedObjectSize(h); err != nil || size != int64(len(fmt.Sprintf("loose %d\n", i))) {
			t.Errorf("size of loose %s: %d, %v", h, size, err)
		}
		if err := st.HasEncodedObject(h); err != nil {
			t.Errorf("loose %s: %v", h, err)
		}
	}
	if lists != listed {
		t.Errorf("the pack folder listed %d times more for loose objects", lists-listed)
	}
	b := gitobj.NewBatch()
	h := b.Add(plumbing.BlobObject, []byte("in a new pack\n"))
	if err := b.Flush(st); err != nil {
		t.Fatal(err)
	}
	// Flush told the store of its pack, or a read lists the folder.
	for _, st := range []*gitobj.Store{st, gitobj.NewStore(open(t, dir))} {
		if o, err := st.EncodedObject(plumbing.BlobObject, h); err != nil || readObject(t, o).Content != "in a new pack\n" {
			t.Fatalf("an object of a new pack: %v", err)
		}
		if size, err := st.EncodedObjectSize(h); err != nil || size != int64(len("in a new pack\n")) {
			t.Errorf("size of an object of a new pack: %d, %v", size, err)
		}
	}
	gittest.Git(t, dir, "repack", "--quiet") // a pack the store did not write
	out, err := gittest.Run(dir, []byte("packed by git\n"), "hash-object", "-w", "--stdin")
	if err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, dir, "repack", "--quiet", "-d")
	byGit := plumbing.NewHash(strings.TrimSpace(out))
	if o, err := st.EncodedObject(plumbing.BlobObject, byGit); err != nil || readObject(t, o).Content != "packed by git\n" {
		t.Fatalf("an object of a pack git added since: %v", err)
	}
	if err := st.HasEncodedObject(byGit); err != nil {
		t.Fatalf("an object of a pack git added since: %v", err)
	}
	var none plumbing.Hash
	none[0] = 1
	if _, err := st.EncodedObject(plumbing.BlobObject, none); !errors.Is(err, plumbing.ErrObjectNotFound) {
		t.Fatalf("an object that is nowhere: %v", err)
	}
	if err := st.HasEncodedObject(none); err == nil {
		t.Fatal("an object that is nowhere found")
	}
}

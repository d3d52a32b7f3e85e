package renderer_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"
	"unicode/utf8"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/schemas"
)

// objectStore is a bare repository on disk, read as the renderer reads
// one (through gitobj.Store) and written with go-git's plumbing, which
// writes tree entries as it is given them: as crafted as a test likes.
func objectStore(tb testing.TB) storer.Storer {
	tb.Helper()
	r, err := git.PlainInit(tb.TempDir(), true)
	if err != nil {
		tb.Fatal(err)
	}
	return gitobj.NewStore(r.Storer.(*filesystem.Storage))
}

func putBlob(tb testing.TB, st storer.EncodedObjectStorer, data []byte) plumbing.Hash {
	tb.Helper()
	o := st.NewEncodedObject()
	o.SetType(plumbing.BlobObject)
	w, err := o.Writer()
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	h, err := st.SetEncodedObject(o)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// putRaw stores an object of type t with exactly the content data.
func putRaw(tb testing.TB, st storer.EncodedObjectStorer, t plumbing.ObjectType, data []byte) plumbing.Hash {
	tb.Helper()
	o := st.NewEncodedObject()
	o.SetType(t)
	w, _ := o.Writer()
	_, _ = w.Write(data)
	_ = w.Close()
	h, err := st.SetEncodedObject(o)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// putTree stores a tree with exactly these entries, in this order and
// however named (go-git's own encoder insists on git's order).
func putTree(tb testing.TB, st storer.EncodedObjectStorer, entries []object.TreeEntry) plumbing.Hash {
	tb.Helper()
	var b bytes.Buffer
	for _, e := range entries {
		fmt.Fprintf(&b, "%o %s\x00", uint32(e.Mode), e.Name)
		b.Write(e.Hash[:])
	}
	return putRaw(tb, st, plumbing.TreeObject, b.Bytes())
}

func putCommit(tb testing.TB, st storer.EncodedObjectStorer, tree plumbing.Hash) plumbing.Hash {
	tb.Helper()
	sig := object.Signature{Name: "nuon test", Email: "test@nuon.invalid", When: time.Unix(1772362800, 0).UTC()}
	c := &object.Commit{Author: sig, Committer: sig, Message: "crafted\n", TreeHash: tree}
	o := st.NewEncodedObject()
	if err := c.Encode(o); err != nil {
		tb.Fatal(err)
	}
	h, err := st.SetEncodedObject(o)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// craftedTenant is the fixture tenant as tree entries, by folder ("." the
// root), for a test to change before it is written.
type craftedTenant map[string][]object.TreeEntry

func newCraftedTenant(tb testing.TB, st storer.EncodedObjectStorer) craftedTenant {
	tb.Helper()
	t := craftedTenant{}
	files := fixtureFiles(tb)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		dir, base := path.Split(name)
		dir = strings.TrimSuffix(dir, "/")
		if dir == "" {
			dir = "."
		}
		t[dir] = append(t[dir], object.TreeEntry{Name: base, Mode: filemode.Regular, Hash: putBlob(tb, st, files[name])})
	}
	return t
}

// commit writes the folders and a commit of them; raw folders replace
// the tree of that name by one whose content is exactly the bytes given.
func (t craftedTenant) commit(tb testing.TB, st storer.EncodedObjectStorer, raw map[string][]byte) plumbing.Hash {
	tb.Helper()
	root := slices.Clone(t["."])
	for _, dir := range slices.Sorted(maps.Keys(t)) {
		if dir == "." {
			continue
		}
		h := putTree(tb, st, t[dir])
		if data, ok := raw[dir]; ok {
			h = putRaw(tb, st, plumbing.TreeObject, data)
		}
		root = append(root, object.TreeEntry{Name: dir, Mode: filemode.Dir, Hash: h})
	}
	if data, ok := raw["."]; ok {
		return putCommit(tb, st, putRaw(tb, st, plumbing.TreeObject, data))
	}
	return putCommit(tb, st, putTree(tb, st, root))
}

// entryIndex finds name in the folder dir.
func (t craftedTenant) entryIndex(tb testing.TB, dir, name string) int {
	tb.Helper()
	i := slices.IndexFunc(t[dir], func(e object.TreeEntry) bool { return e.Name == name })
	if i < 0 {
		tb.Fatalf("no %s in %s", name, dir)
	}
	return i
}

func problemStrings(tb testing.TB, err error) []string {
	tb.Helper()
	if err == nil {
		return nil
	}
	var ps schemas.Problems
	if !errors.As(err, &ps) {
		tb.Fatalf("load: %v, want problems", err)
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

const craftedMsg = "a git tree made by git has none"

// TestLoadSourceCraftedTrees loads trees that git would never write but
// a crafted commit can hold: each is a problem naming its entry, never a
// panic, a silently skipped file or a path cleaned into another one.
func TestLoadSourceCraftedTrees(t *testing.T) {
	missing := plumbing.NewHash("00000000000000000000000000000000000000ff")
	blobOf := func(tb testing.TB, st storer.EncodedObjectStorer, s string) plumbing.Hash {
		return putBlob(tb, st, []byte(s))
	}
	install := "channel: stable\n"
	tests := []struct {
		name string
		// edit changes the tenant; it returns raw trees, by folder.
		edit func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte
		want []string
	}{
		{
			name: "dot-dot folder in installs",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				sub := putTree(t, st, []object.TreeEntry{{Name: "x.yaml", Mode: filemode.Regular, Hash: blobOf(t, st, install)}})
				c["installs"] = append(c["installs"], object.TreeEntry{Name: "..", Mode: filemode.Dir, Hash: sub})
				return nil
			},
			want: []string{`installs/..: an entry named ".."; ` + craftedMsg},
		},
		{
			name: "dot file in installs",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				c["installs"] = append(c["installs"], object.TreeEntry{Name: ".", Mode: filemode.Regular, Hash: blobOf(t, st, install)})
				return nil
			},
			want: []string{`installs/.: an entry named "."; ` + craftedMsg},
		},
		{
			name: "name climbing out of installs",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				c["installs"] = append(c["installs"], object.TreeEntry{Name: "../x.yaml", Mode: filemode.Regular, Hash: blobOf(t, st, install)})
				return nil
			},
			want: []string{`installs/../x.yaml: a name with a slash in it; ` + craftedMsg},
		},
		{
			name: "name with a slash",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				c["channels"] = append(c["channels"], object.TreeEntry{Name: "a/b.yaml", Mode: filemode.Regular, Hash: blobOf(t, st, "components: {}\n")})
				return nil
			},
			want: []string{`channels/a/b.yaml: a name with a slash in it; ` + craftedMsg},
		},
		{
			name: "empty name",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				c["releases"] = append(c["releases"], object.TreeEntry{Name: "", Mode: filemode.Regular, Hash: blobOf(t, st, "x")})
				return nil
			},
			want: []string{`releases/"": an entry with an empty name; ` + craftedMsg},
		},
		{
			name: "terminal escape in a name",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				c["installs"] = append(c["installs"], object.TreeEntry{Name: "a\x1b[2J\rb.yaml", Mode: filemode.Regular, Hash: blobOf(t, st, install)})
				return nil
			},
			want: []string{`installs/"a\x1b[2J\rb.yaml": a name with a control or invisible character in it`},
		},
		{
			name: "upper-case extension",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				c["installs"] = append(c["installs"], object.TreeEntry{Name: "hooli.YAML", Mode: filemode.Regular, Hash: blobOf(t, st, install)})
				return nil
			},
			want: []string{`installs/hooli.YAML: only lower-case .yaml files are read; rename it to hooli.yaml`},
		},
		{
			name: "symbolic link as an install",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				c["installs"][c.entryIndex(t, "installs", "acme.yaml")] = object.TreeEntry{Name: "acme.yaml", Mode: filemode.Symlink, Hash: blobOf(t, st, "/etc/passwd")}
				return nil
			},
			want: []string{`installs/acme.yaml: is a symbolic link; a source file must be a regular file`},
		},
		{
			name: "submodule as an install",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				c["installs"][c.entryIndex(t, "installs", "acme.yaml")] = object.TreeEntry{Name: "acme.yaml", Mode: filemode.Submodule, Hash: missing}
				return nil
			},
			want: []string{`installs/acme.yaml: is a submodule or another special entry; a source file must be a regular file`},
		},
		{
			name: "mode git does not write",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				c["installs"][c.entryIndex(t, "installs", "acme.yaml")].Mode = filemode.FileMode(0o100600)
				return nil
			},
			want: []string{`installs/acme.yaml: is a submodule or another special entry; a source file must be a regular file`},
		},
		{
			name: "executable install is a file",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				c["installs"][c.entryIndex(t, "installs", "acme.yaml")].Mode = filemode.Executable
				return nil
			},
		},
		{
			name: "folder as an install",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				sub := putTree(t, st, []object.TreeEntry{{Name: "x.yaml", Mode: filemode.Regular, Hash: blobOf(t, st, install)}})
				c["installs"][c.entryIndex(t, "installs", "acme.yaml")] = object.TreeEntry{Name: "acme.yaml", Mode: filemode.Dir, Hash: sub}
				return nil
			},
			want: []string{`installs/acme.yaml: is a folder; a source file must be a regular file`},
		},
		{
			name: "folder in installs",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				sub := putTree(t, st, []object.TreeEntry{{Name: "x.yaml", Mode: filemode.Regular, Hash: blobOf(t, st, install)}})
				c["installs"] = append(c["installs"], object.TreeEntry{Name: "eu", Mode: filemode.Dir, Hash: sub})
				return nil
			},
			want: []string{`installs/eu: is a folder; installs/ holds only <name>.yaml files, README.md and .gitkeep`},
		},
		{
			name: "install twice",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				c["installs"] = append(c["installs"], object.TreeEntry{Name: "acme.yaml", Mode: filemode.Regular, Hash: blobOf(t, st, install)})
				return nil
			},
			want: []string{`installs/acme.yaml: appears 2 times in its folder; a git tree made by git holds a name once`},
		},
		{
			name: "blob missing from the repository",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				c["installs"][c.entryIndex(t, "installs", "acme.yaml")].Hash = missing
				return nil
			},
			want: []string{`installs/acme.yaml: cannot read: blob 00000000000000000000000000000000000000ff: object not found`},
		},
		{
			name: "file entry pointing at a tree",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				sub := putTree(t, st, []object.TreeEntry{{Name: "x.yaml", Mode: filemode.Regular, Hash: blobOf(t, st, install)}})
				c["installs"][c.entryIndex(t, "installs", "acme.yaml")].Hash = sub
				return nil
			},
			want: []string{`installs/acme.yaml: cannot read: blob %s: object not found`},
		},
		{
			name: "installs is a file",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				delete(c, "installs")
				c["."] = append(c["."], object.TreeEntry{Name: "installs", Mode: filemode.Regular, Hash: blobOf(t, st, install)})
				return nil
			},
			want: []string{`installs: is a file; installs must be a folder of <name>.yaml files`},
		},
		{
			name: "installs is a submodule",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				delete(c, "installs")
				c["."] = append(c["."], object.TreeEntry{Name: "installs", Mode: filemode.Submodule, Hash: missing})
				return nil
			},
			want: []string{`installs: is a submodule or another special entry; installs must be a folder of <name>.yaml files`},
		},
		{
			name: "installs twice",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				sub := putTree(t, st, []object.TreeEntry{{Name: "hooli.yaml", Mode: filemode.Regular, Hash: blobOf(t, st, install)}})
				c["."] = append(c["."], object.TreeEntry{Name: "installs", Mode: filemode.Dir, Hash: sub})
				return nil
			},
			want: []string{`installs: appears 2 times in its folder; a git tree made by git holds a name once`},
		},
		{
			name: "app file is a symbolic link",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				c["."][c.entryIndex(t, ".", "nuon.yaml")].Mode = filemode.Symlink
				return nil
			},
			want: []string{`nuon.yaml: is a symbolic link; nuon.yaml must be a regular file`},
		},
		{
			name: "app file twice",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				c["."] = append(c["."], object.TreeEntry{Name: "nuon.yaml", Mode: filemode.Regular, Hash: blobOf(t, st, "name: evil\n")})
				return nil
			},
			want: []string{`nuon.yaml: appears 2 times in its folder; a git tree made by git holds a name once`},
		},
		{
			name: "dot-dot at the root",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				sub := putTree(t, st, []object.TreeEntry{{Name: "nuon.yaml", Mode: filemode.Regular, Hash: blobOf(t, st, "name: evil\n")}})
				c["."] = append(c["."], object.TreeEntry{Name: "..", Mode: filemode.Dir, Hash: sub})
				return nil
			},
			want: []string{`..: an entry named ".."; ` + craftedMsg},
		},
		{
			name: "NUL in a name",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				// The tree format ends a name at its first NUL: what
				// follows is read as the object id and the next entries.
				c["installs"] = append(c["installs"], object.TreeEntry{Name: "a\x00b.yaml", Mode: filemode.Regular, Hash: blobOf(t, st, install)})
				return nil
			},
			want: []string{`installs: cannot list: tree %s is malformed: an entry has no mode`},
		},
		{
			name: "malformed mode",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				return map[string][]byte{"installs": append([]byte("10z644 acme.yaml\x00"), missing[:]...)}
			},
			want: []string{`installs: cannot list: tree %s is malformed: mode "10z644" is not octal`},
		},
		{
			name: "malformed root",
			edit: func(t *testing.T, st storer.Storer, c craftedTenant) map[string][]byte {
				return map[string][]byte{".": []byte("100644 nuon.yaml\x00short")}
			},
			want: []string{`nuon.yaml: cannot list the files of main: tree %s is malformed: an entry is cut short`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := objectStore(t)
			c := newCraftedTenant(t, st)
			raw := tc.edit(t, st, c)
			commit := c.commit(t, st, raw)
			_, err := renderer.LoadSource(st, commit)
			want := slices.Clone(tc.want)
			for i, w := range want {
				if strings.Contains(w, "%s") {
					want[i] = fmt.Sprintf(w, treeOf(t, st, commit, strings.SplitN(w, ":", 2)[0]))
				}
			}
			if diff := cmp.Diff(want, problemStrings(t, err)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// treeOf is the object a problem's %s names: the tree of the folder, or
// the object of the file, at name.
func treeOf(tb testing.TB, st storer.EncodedObjectStorer, commit plumbing.Hash, name string) plumbing.Hash {
	tb.Helper()
	c, err := object.GetCommit(st, commit)
	if err != nil {
		tb.Fatal(err)
	}
	if name == schemas.AppFile {
		return c.TreeHash
	}
	o, err := st.EncodedObject(plumbing.TreeObject, c.TreeHash)
	if err != nil {
		tb.Fatal(err)
	}
	rd, _ := o.Reader()
	defer rd.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(rd)
	data := buf.Bytes()
	dir, file, _ := strings.Cut(name, "/")
	i := bytes.Index(data, []byte(" "+dir+"\x00"))
	if i < 0 {
		tb.Fatalf("no %s in the root tree", dir)
	}
	h := plumbing.Hash(data[i+len(dir)+2 : i+len(dir)+2+20])
	if file == "" {
		return h
	}
	sub, err := object.GetTree(st, h)
	if err != nil {
		tb.Fatal(err)
	}
	e, err := sub.FindEntry(file)
	if err != nil {
		tb.Fatal(err)
	}
	return e.Hash
}

// TestLoadSourceHugeFile commits a 50 MB install file: it is refused from
// its blob's size, with a problem naming it, and loading allocates a
// fraction of the file (the previous reader inflated the blob and parsed
// it, ~700 MB). The bound is several times what loading the rest of the
// tenant allocates and a fifth of the file, so it cannot flake.
func TestLoadSourceHugeFile(t *testing.T) {
	st := objectStore(t)
	c := newCraftedTenant(t, st)
	big := bytes.Repeat([]byte("# padding\n"), 5<<20)
	c["installs"][c.entryIndex(t, "installs", "acme.yaml")].Hash = putBlob(t, st, big)
	commit := c.commit(t, st, nil)
	big = nil
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := renderer.LoadSource(st, commit)
	runtime.ReadMemStats(&after)
	want := []string{"installs/acme.yaml: is 50 MiB, more than the 1 MiB a source file may be"}
	if diff := cmp.Diff(want, problemStrings(t, err)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 10<<20 {
		t.Errorf("loading allocated %d bytes for a tenant with a 50 MB file, want under 10 MiB", alloc)
	}
	if _, err := renderer.LoadSource(st, commit, schemas.WithMaxFileSize(64<<20)); err == nil || strings.Contains(err.Error(), "source file may be") {
		t.Errorf("with a 64 MiB cap: %v, want the file read (and found no install)", err)
	}
}

// BenchmarkLoadSourceHugeFile reports what refusing a 50 MB file costs
// (B/op).
func BenchmarkLoadSourceHugeFile(b *testing.B) {
	st := objectStore(b)
	c := newCraftedTenant(b, st)
	c["installs"][c.entryIndex(b, "installs", "acme.yaml")].Hash = putBlob(b, st, bytes.Repeat([]byte("# padding\n"), 5<<20))
	commit := c.commit(b, st, nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := renderer.LoadSource(st, commit); err == nil {
			b.Fatal("a 50 MB file was accepted")
		}
	}
}

// TestSourceFS checks the tree file system against testing/fstest's
// conformance checks and the fixture tenant's files.
func TestSourceFS(t *testing.T) {
	st := objectStore(t)
	c := newCraftedTenant(t, st)
	c["installs"][c.entryIndex(t, "installs", "acme.yaml")].Mode = filemode.Executable
	fsys, err := renderer.SourceFS(st, c.commit(t, st, nil))
	if err != nil {
		t.Fatal(err)
	}
	files := fixtureFiles(t)
	if err := fstest.TestFS(fsys, slices.Collect(maps.Keys(files))...); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		got, err := fs.ReadFile(fsys, name)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: %q, %v; want %q", name, got, err, data)
		}
		fi, err := fs.Stat(fsys, name)
		if err != nil || fi.Size() != int64(len(data)) {
			t.Errorf("%s: stat %v, %v; want size %d", name, fi, err, len(data))
		}
	}
}

// checkProblems fails unless err is nil or Problems that each name a
// printable file and say something.
func checkProblems(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var ps schemas.Problems
	if !errors.As(err, &ps) || len(ps) == 0 {
		t.Fatalf("load: %v, want problems", err)
	}
	for _, p := range ps {
		if p.File == "" || p.Message == "" || p.Line < 0 || p.Column < 0 {
			t.Errorf("problem without a file or a message: %#v", p)
		}
		if strings.ContainsFunc(p.File, func(r rune) bool { return r < ' ' || r == 0x7f || r == utf8.RuneError }) {
			t.Errorf("problem names a file with a control character: %q", p.File)
		}
	}
}

// FuzzSourceTreeEntry adds one entry of any name, mode and content (and,
// with big set, over the size cap) to the fixture tenant's installs/.
// Loading never panics and either accepts a source file named as Classify
// says or names the entry in a problem.
func FuzzSourceTreeEntry(f *testing.F) {
	for _, name := range []string{"hooli.yaml", "hooli.YAML", "a.yml", "..", ".", "", "../x.yaml", "a\x00b", "a\x1b[2J", "README.md", ".gitkeep", "acme.yaml", "\xff"} {
		for _, mode := range []filemode.FileMode{filemode.Regular, filemode.Dir, filemode.Symlink, filemode.Submodule, filemode.Executable, 0o100600} {
			f.Add(name, uint32(mode), []byte("channel: stable\n"), false)
		}
	}
	f.Add("hooli.yaml", uint32(filemode.Regular), []byte("channel: stable\n"), true)
	f.Fuzz(func(t *testing.T, name string, mode uint32, content []byte, big bool) {
		st := memory.NewStorage()
		c := newCraftedTenant(t, st)
		if big {
			content = append(content, make([]byte, schemas.DefaultMaxFileSize)...)
		}
		h := putBlob(t, st, content)
		if filemode.FileMode(mode) == filemode.Dir {
			h = putTree(t, st, []object.TreeEntry{{Name: "x.yaml", Mode: filemode.Regular, Hash: h}})
		}
		c["installs"] = append(c["installs"], object.TreeEntry{Name: name, Mode: filemode.FileMode(mode), Hash: h})
		_, err := renderer.LoadSource(st, c.commit(t, st, nil))
		checkProblems(t, err)
		kind, _ := schemas.Classify(schemas.InstallsDir, name, fs.FileMode(0))
		if err == nil && kind == schemas.BadEntry {
			t.Fatalf("entry %q (mode %o) loaded without a problem", name, mode)
		}
		if err == nil && big && kind == schemas.SourceFile {
			t.Fatalf("entry %q (mode %o) of %d bytes loaded", name, mode, len(content))
		}
	})
}

// FuzzSourceTreeRaw replaces the tree object of installs/ with any bytes:
// loading never panics and fails only with problems.
func FuzzSourceTreeRaw(f *testing.F) {
	st := memory.NewStorage()
	c := newCraftedTenant(f, st)
	var b bytes.Buffer
	for _, e := range c["installs"] {
		fmt.Fprintf(&b, "%o %s\x00", uint32(e.Mode), e.Name)
		b.Write(e.Hash[:])
	}
	f.Add(b.Bytes())
	f.Add(append(slices.Clone(b.Bytes()), b.Bytes()...))
	f.Add([]byte("100644 a\x00b.yaml\x00" + strings.Repeat("x", 20)))
	f.Add([]byte("40000 ..\x00" + strings.Repeat("x", 20)))
	f.Add([]byte("10z644 acme.yaml\x00" + strings.Repeat("x", 20)))
	f.Add([]byte("100644 acme.yaml\x00short"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, err := renderer.LoadSource(st, c.commit(t, st, map[string][]byte{"installs": raw}))
		checkProblems(t, err)
	})
}

// TestIncrementalRenderReportsEntries adds entries to installs/ that are
// not sources after a render: the next render, which would read only the
// changed installs, reports each, as a full one does.
func TestIncrementalRenderReportsEntries(t *testing.T) {
	tests := []struct {
		name, file string
		want       string
	}{
		{"upper-case extension", "installs/hooli.YAML", "installs/hooli.YAML: only lower-case .yaml files are read; rename it to hooli.yaml"},
		{"yml", "installs/hooli.yml", "installs/hooli.yml: only .yaml files are read; rename it to hooli.yaml"},
		{"not a source", "installs/hooli.txt", "installs/hooli.txt: is not a source file: installs/ holds only <name>.yaml files, README.md and .gitkeep"},
		{"a folder", "installs/eu/hooli.yaml", "installs/eu: is a folder; installs/ holds only <name>.yaml files, README.md and .gitkeep"},
		{"too large", "installs/hooli.yaml", "installs/hooli.yaml: is 1.0 MiB (1048594 bytes), more than the 1 MiB a source file may be"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tn := newTenant(t)
			tn.render(options(t))
			content := "channel: stable\n"
			if tc.name == "too large" {
				content += "#" + strings.Repeat("x", schemas.DefaultMaxFileSize) + "\n"
			}
			tn.write(tc.file, content)
			tn.commit("add " + tc.file)
			before := refs(t, tn.dir)
			res, err := renderRepo(context.Background(), tn.open(), "main", options(t))
			if strings.HasPrefix(tc.want, "installs/hooli.yaml:") {
				// A problem of one install's own file fails that install
				// alone.
				if err != nil {
					t.Fatalf("render: %v", err)
				}
				if in := installsByID(res)["hooli"]; in.Change != renderer.Failed || !strings.Contains(in.Error, tc.want) {
					t.Errorf("hooli: %s %q, want failed with %s", in.Change, in.Error, tc.want)
				}
				return
			}
			if diff := cmp.Diff([]string{tc.want}, problemStrings(t, err)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, refs(t, tn.dir)); diff != "" {
				t.Errorf("refs moved (-before +after):\n%s", diff)
			}
		})
	}
}

// TestLoadSourceCorruptBlob edits a loose object of the repository on
// disk: the file that names it is reported, its content not trusted.
func TestLoadSourceCorruptBlob(t *testing.T) {
	dir := t.TempDir()
	r, err := git.PlainInit(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	st := gitobj.NewStore(r.Storer.(*filesystem.Storage))
	c := newCraftedTenant(t, st)
	i := c.entryIndex(t, "installs", "acme.yaml")
	h := c["installs"][i].Hash
	commit := c.commit(t, st, nil)
	// Rewrite the object's file with other content of the same size.
	orig, err := gitobj.ReadBlob(st, h, 0)
	if err != nil {
		t.Fatal(err)
	}
	forged := bytes.Replace(orig, []byte("stable"), []byte("evil!!"), 1)
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	fmt.Fprintf(zw, "blob %d\x00", len(forged))
	zw.Write(forged)
	zw.Close()
	p := filepath.Join(dir, "objects", h.String()[:2], h.String()[2:])
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, z.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = renderer.LoadSource(st, commit)
	got := problemStrings(t, err)
	if len(got) != 1 || !strings.HasPrefix(got[0], "installs/acme.yaml: cannot read: blob "+h.String()+": object "+h.String()+" is corrupt") {
		t.Errorf("problems %q, want installs/acme.yaml reported corrupt", got)
	}
}

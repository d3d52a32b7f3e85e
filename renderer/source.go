package renderer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"gopkg.in/yaml.v3"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/schemas"
)

// LoadSource reads and validates the source files of a main commit. Every
// problem, a crafted tree's included, is reported as schemas.Problems
// naming its file.
func LoadSource(st storer.EncodedObjectStorer, commit plumbing.Hash, opts ...schemas.Option) (*schemas.Source, error) {
	fsys, err := SourceFS(st, commit)
	if err != nil {
		return nil, err
	}
	return schemas.Load(fsys, opts...)
}

// SourceFS returns the tree of a commit as a file system, for schemas.Load.
//
// It shows the tree as it is: every entry of a folder in ReadDir, however
// it is named (a crafted tree may hold "..", "a/b", a name twice, control
// characters), symbolic links as fs.ModeSymlink, submodules (gitlinks) and
// unknown modes as fs.ModeIrregular, so that the loader can name each
// one. A file's size comes from its blob's object header, and the blob is
// read only when the file is: the loader refuses an over-large file from
// Stat without its content ever being inflated.
func SourceFS(st storer.EncodedObjectStorer, commit plumbing.Hash) (fs.FS, error) {
	f, err := sourceFS(st, commit, false, nil)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// SourceFSOnly is SourceFS whose installs/ folder lists only the entries
// only (as main's installs/ tree holds them, by name, mode and blob; any
// order): a reader of a few install files of a main of a million installs
// then reads neither that tree nor its entries. A name that is not in
// main's tree is listed all the same: only's entries are the caller's
// word.
func SourceFSOnly(st storer.EncodedObjectStorer, commit plumbing.Hash, only []gitobj.Entry) (fs.FS, error) {
	es := make([]treeEntry, len(only))
	for i, e := range only {
		es[i] = treeEntry{name: e.Name, mode: e.Mode, hash: e.Hash}
	}
	f, err := sourceFS(st, commit, true, es)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// sourceFS is SourceFS; with restrict, installs/ holds only the entries
// only (of the installs an incremental render reads, perhaps none), and
// its tree is not read again.
func sourceFS(st storer.EncodedObjectStorer, commit plumbing.Hash, restrict bool, only []treeEntry) (*treeFS, error) {
	c, err := gitobj.ReadCommit(st, commit)
	if err != nil {
		return nil, fmt.Errorf("read source commit %s: %w", commit, err)
	}
	f := &treeFS{st: st, root: c.TreeHash, maxTree: maxSourceTree, trees: map[plumbing.Hash][]treeEntry{}}
	if restrict {
		f.restricted = true
		f.only = slices.SortedStableFunc(slices.Values(only), func(a, b treeEntry) int { return strings.Compare(a.name, b.name) })
	}
	return f, nil
}

// treeFS is a git tree as an fs.FS; see SourceFS.
type treeFS struct {
	st   storer.EncodedObjectStorer
	root plumbing.Hash
	// only, when restricted, is all installs/ lists, sorted by name.
	restricted bool
	only       []treeEntry
	// maxTree bounds the size of a tree object read; maxSourceTree.
	maxTree int64
	// cache, when not nil, keeps the trees and blobs outside installs/
	// for the next render, and gives those it kept.
	cache *Cache

	mu sync.Mutex
	// trees are the trees read so far, their entries sorted by name.
	trees map[plumbing.Hash][]treeEntry
}

var (
	_ fs.ReadDirFS = (*treeFS)(nil)
	_ fs.StatFS    = (*treeFS)(nil)
)

// maxSourceTree bounds the tree objects SourceFS reads whole: 64 MiB is
// some 1.5 million entries of installs/, 150 times the largest fleet
// measured (BENCHMARKS.md renders 10,000 installs).
const maxSourceTree = 64 << 20

// treeEntry is one entry of a tree object, as written.
type treeEntry struct {
	name string
	mode filemode.FileMode
	hash plumbing.Hash
}

// entries reads the tree h, sorted by name.
func (f *treeFS) entries(h plumbing.Hash) ([]treeEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if es, ok := f.trees[h]; ok {
		return es, nil
	}
	es, err := parseTree(f.st, h, f.maxTree)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(es, func(a, b treeEntry) int { return strings.Compare(a.name, b.name) })
	f.trees[h] = es
	return es, nil
}

// entriesAt returns the entries of the folder at path dir, whose tree is
// h.
func (f *treeFS) entriesAt(dir string, h plumbing.Hash) ([]treeEntry, error) {
	if f.restricted && dir == schemas.InstallsDir {
		return f.only, nil
	}
	if f.cache == nil || inInstalls(dir) {
		return f.entries(h)
	}
	if es, ok := f.cache.entries(h); ok {
		return es, nil
	}
	es, err := f.entries(h)
	if err == nil {
		f.cache.keepEntries(h, es)
	}
	return es, err
}

// inInstalls reports whether the path p of fs.FS is installs/ or in it:
// what an install-only change changes, not kept in a Cache.
func inInstalls(p string) bool {
	return p == schemas.InstallsDir || strings.HasPrefix(p, schemas.InstallsDir+"/")
}

// lookup finds the entry at name, a path of fs.FS.
func (f *treeFS) lookup(op, name string) (treeEntry, error) {
	if !fs.ValidPath(name) {
		return treeEntry{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	e := treeEntry{name: ".", mode: filemode.Dir, hash: f.root}
	if name == "." {
		return e, nil
	}
	dir := "."
	for elem := range strings.SplitSeq(name, "/") {
		if e.mode != filemode.Dir {
			return treeEntry{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		es, err := f.entriesAt(dir, e.hash)
		dir = path.Join(dir, elem)
		if err != nil {
			return treeEntry{}, &fs.PathError{Op: op, Path: name, Err: err}
		}
		i, ok := slices.BinarySearchFunc(es, elem, func(e treeEntry, name string) int { return strings.Compare(e.name, name) })
		if !ok {
			return treeEntry{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		e = es[i]
	}
	return e, nil
}

// ReadDir lists the folder name, every entry of its tree included.
func (f *treeFS) ReadDir(name string) ([]fs.DirEntry, error) {
	e, err := f.lookup("readdir", name)
	if err != nil {
		return nil, err
	}
	if e.mode != filemode.Dir {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("not a folder")}
	}
	es, err := f.entriesAt(name, e.hash)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	out := make([]fs.DirEntry, 0, len(es))
	for _, c := range es {
		out = append(out, &treeInfo{fsys: f, e: c})
	}
	return out, nil
}

// Stat describes the entry at name; a file's size is its blob's, from
// the object's header.
func (f *treeFS) Stat(name string) (fs.FileInfo, error) {
	e, err := f.lookup("stat", name)
	if err != nil {
		return nil, err
	}
	fi := &treeInfo{fsys: f, e: e}
	if err := fi.sized(); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	return fi, nil
}

// Open opens the entry at name. A file's blob is read on the first Read.
func (f *treeFS) Open(name string) (fs.File, error) {
	e, err := f.lookup("open", name)
	if err != nil {
		return nil, err
	}
	if e.mode == filemode.Dir {
		es, err := f.ReadDir(name)
		if err != nil {
			return nil, err
		}
		return &treeDir{info: treeInfo{fsys: f, e: e}, entries: es}, nil
	}
	return &treeFile{info: treeInfo{fsys: f, e: e}, path: name}, nil
}

// treeInfo is an entry as fs.FileInfo and fs.DirEntry.
type treeInfo struct {
	fsys *treeFS
	e    treeEntry
	size int64
	// hasSize is true once size is read.
	hasSize bool
}

var (
	_ fs.FileInfo = (*treeInfo)(nil)
	_ fs.DirEntry = (*treeInfo)(nil)
)

// sized reads the size of a file's blob from its header.
func (i *treeInfo) sized() error {
	if i.hasSize || !i.Mode().IsRegular() {
		return nil
	}
	if data, ok := i.fsys.cache.blob(i.e.hash); ok {
		i.size, i.hasSize = int64(len(data)), true
		return nil
	}
	size, err := i.fsys.st.EncodedObjectSize(i.e.hash)
	if err != nil {
		return fmt.Errorf("blob %s: %w", i.e.hash, err)
	}
	i.size, i.hasSize = size, true
	return nil
}

func (i *treeInfo) Name() string       { return i.e.name }
func (i *treeInfo) Size() int64        { return i.size }
func (i *treeInfo) ModTime() time.Time { return time.Time{} }
func (i *treeInfo) IsDir() bool        { return i.e.mode == filemode.Dir }
func (i *treeInfo) Sys() any           { return i.e.mode }
func (i *treeInfo) Type() fs.FileMode  { return i.Mode().Type() }

func (i *treeInfo) Mode() fs.FileMode { return fsMode(i.e.mode) }

func (i *treeInfo) Info() (fs.FileInfo, error) {
	c := *i
	if err := c.sized(); err != nil {
		return nil, err
	}
	return &c, nil
}

// treeFile is an open file of a treeFS.
type treeFile struct {
	info treeInfo
	path string
	// rd reads the blob, verified against its id, once it is read.
	rd io.Reader
}

func (f *treeFile) Stat() (fs.FileInfo, error) {
	if err := f.info.sized(); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: f.path, Err: err}
	}
	return &f.info, nil
}

func (f *treeFile) Read(p []byte) (int, error) {
	if f.rd == nil {
		if !f.info.Mode().IsRegular() {
			return 0, &fs.PathError{Op: "read", Path: f.path, Err: errors.New("not a regular file")}
		}
		cache := f.info.fsys.cache
		if inInstalls(f.path) {
			cache = nil
		}
		data, ok := cache.blob(f.info.e.hash)
		if !ok {
			var err error
			if data, err = gitobj.ReadBlob(f.info.fsys.st, f.info.e.hash, 0); err != nil {
				return 0, &fs.PathError{Op: "read", Path: f.path, Err: fmt.Errorf("blob %s: %w", f.info.e.hash, err)}
			}
			cache.keepBlob(f.info.e.hash, data)
		}
		f.rd = bytes.NewReader(data)
	}
	return f.rd.Read(p)
}

func (f *treeFile) Close() error { return nil }

// treeDir is an open folder of a treeFS.
type treeDir struct {
	info    treeInfo
	entries []fs.DirEntry
}

func (d *treeDir) Stat() (fs.FileInfo, error) { return &d.info, nil }
func (d *treeDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.e.name, Err: errors.New("is a folder")}
}
func (d *treeDir) Close() error { return nil }

func (d *treeDir) ReadDir(n int) ([]fs.DirEntry, error) {
	if n <= 0 {
		es := d.entries
		d.entries = nil
		return es, nil
	}
	if len(d.entries) == 0 {
		return nil, io.EOF
	}
	es := d.entries[:min(n, len(d.entries))]
	d.entries = d.entries[len(es):]
	return es, nil
}

// sourceChange is what changed in installs/ between the source of the
// previous render and this one.
type sourceChange struct {
	// changed are the installs whose file is new or changed, or that have
	// no folder in the previous render (it failed them).
	changed map[string]bool
	// removed are the installs whose file is gone.
	removed []string
	// entries are the files of changed in installs/ on this source, in
	// git's order: all of installs/ an incremental load lists.
	entries []treeEntry
}

// sourceDelta compares the source commit with the one the previous render
// was made from. When only install files changed, it returns what did:
// the state of any other install is the same as in the previous render,
// because an install's state depends only on its own file, nuon.yaml,
// channels/ and releases/. ok is false when a full render is needed,
// which is also how an entry of installs/ that is not a source file
// (schemas.Classify) gets reported.
func (r *renderRun) sourceDelta() (ch *sourceChange, ok bool) {
	if !r.trusted || r.prevCommit == nil || r.prevCount < 0 {
		return nil, false
	}
	if f, _ := schemas.Trailer(r.prevCommit.Message, TrailerFormat); f != strconv.Itoa(Format) {
		return nil, false
	}
	from, _ := schemas.Trailer(r.prevCommit.Message, schemas.TrailerSource)
	if !plumbing.IsHash(from) {
		return nil, false
	}
	old, err := commitTree(r.st, plumbing.NewHash(from))
	if err != nil {
		return nil, false
	}
	cur, err := commitTree(r.st, r.source)
	if err != nil {
		return nil, false
	}
	for _, name := range []string{schemas.AppFile, schemas.ChannelsDir, schemas.ReleasesDir, trustTop} {
		if entryOf(cur, name) == entryOf(old, name) {
			continue
		}
		if name != schemas.ChannelsDir {
			return nil, false
		}
		// A channel whose pins alone changed renders nothing while its
		// rollout state gives those pins: pinsOnly says which, and
		// loadSource checks the states once the source is open.
		if r.pinsOnly, ok = r.channelPins(entryOf(old, name), entryOf(cur, name)); !ok {
			return nil, false
		}
	}
	ch = &sourceChange{changed: map[string]bool{}}
	oldDir, curDir := entryOf(old, schemas.InstallsDir), entryOf(cur, schemas.InstallsDir)
	if oldDir == curDir {
		// Nothing that is rendered changed: every install keeps its state.
		// The tree is indexed all the same, once per process (the first
		// render of a server, most often): the next change is compared
		// with it around what moved, where without it both trees were
		// walked whole, 0.12 s at a million installs.
		r.keepIndex(curDir)
		return ch, true
	}
	// Both trees are compared as written, in git's order, which each
	// must be in: an entry the same in both is skipped as bytes, and only
	// the others are read. At 100,000 installs, reading them into lists
	// of names cost more than the rest of a one-install render.
	curRaw, err := rawTree(r.st, curDir)
	if err != nil {
		return nil, false
	}
	var oldCount int
	var idx *rawIndex
	if old, cached := r.opts.Cache.rawTree(oldDir.hash); cached {
		oldCount = old.installs
		idx, ok = old.delta(curRaw, ch)
	}
	if idx == nil {
		// Not kept, or a change the kept tree's index does not place:
		// both trees walked whole.
		ch = &sourceChange{changed: map[string]bool{}}
		oldRaw, err := rawTree(r.st, oldDir)
		if err != nil {
			return nil, false
		}
		var offs []uint32
		var curCount int
		offs, oldCount, curCount, ok = diffRaw(oldRaw, curRaw, rawEntry{}, rawEntry{}, 0, ch, make([]uint32, 0, len(curRaw)/32))
		idx = &rawIndex{raw: curRaw, offs: offs, installs: curCount}
	}
	if !ok {
		return nil, false
	}
	r.opts.Cache.keep(curDir.hash, idx)
	if oldCount != r.prevCount {
		// The previous render has no folder for some installs of its
		// source (it failed them): render those again too.
		if err := r.addUnrendered(ch, curDir); err != nil {
			return nil, false
		}
	}
	return ch, true
}

// addUnrendered adds to ch the installs of the source's installs/ tree dir
// that have no folder in the previous render.
func (r *renderRun) addUnrendered(ch *sourceChange, dir entry) error {
	es, err := parseTree(r.st, dir.hash, maxSourceTree)
	if err != nil {
		return err
	}
	for _, e := range es {
		id, ok := strings.CutSuffix(e.name, ".yaml")
		if !ok || ch.changed[id] {
			continue
		}
		if _, has, err := r.prevTrees.get(id); err != nil {
			return err
		} else if !has {
			ch.changed[id] = true
			ch.entries = append(ch.entries, e)
		}
	}
	slices.SortFunc(ch.entries, gitOrder)
	return nil
}

// keepIndex keeps in the render's Cache the installs/ tree dir with its
// index (gitobj.ReadIndexShared, shared with the tenant server's key table
// and rollout controller), unless the Cache keeps it already. Nothing is
// kept when the tree cannot be read, or holds a folder, which the next
// render then reports from a full load.
func (r *renderRun) keepIndex(dir entry) {
	if r.opts.Cache == nil || dir.hash.IsZero() || dir.mode != filemode.Dir {
		return
	}
	if _, kept := r.opts.Cache.rawTree(dir.hash); kept {
		return
	}
	x, err := gitobj.ReadIndexShared(r.st, dir.hash, maxSourceTree)
	if err != nil {
		return
	}
	installs := 0
	for k := range x.Len() {
		e := x.Entry(k)
		if !e.Mode.IsFile() {
			return
		}
		if bytes.HasSuffix(e.Name, []byte(".yaml")) {
			installs++
		}
	}
	r.opts.Cache.keep(dir.hash, &rawIndex{raw: x.Raw, offs: x.Offs, installs: installs})
}

// rawTree reads the tree of a folder entry as written; nothing when there
// is no such folder.
func rawTree(st storer.EncodedObjectStorer, e entry) ([]byte, error) {
	if e.hash.IsZero() {
		return nil, nil
	}
	if e.mode != filemode.Dir {
		return nil, errors.New("not a folder")
	}
	// Shared: the tenant server's key table and rollout controller read
	// the same tree when main moves.
	return gitobj.ReadTreeShared(st, e.hash, maxSourceTree)
}

// rawIndex is an installs/ tree as written, with where each entry starts
// (gitobj.TreeIndex): what a Cache keeps of the last source's installs/,
// so that the next source's tree, which differs in a few entries, is
// compared around them rather than entry by entry.
type rawIndex struct {
	raw []byte
	// offs[k] is where entry k starts in raw.
	offs []uint32
	// installs are the entries that are install files (<id>.yaml).
	installs int
}

// delta compares cur, the tree as written that follows x's, with x, as
// diffRaw does, adding to ch what changed; it returns cur's index, or nil
// when the change cannot be placed by x's index and both are to be walked
// whole (ok is then meaningless). gitobj.TreeIndex.Delta walks only the
// entries between what the two trees share at their start and end.
func (x *rawIndex) delta(cur []byte, ch *sourceChange) (idx *rawIndex, ok bool) {
	var oldMid, curMid int
	ti, _, _, err := (&gitobj.TreeIndex{Raw: x.raw, Offs: x.offs}).Delta(cur, func(w *gitobj.TreeWalk) error {
		o, c, ok := diffStep(w, ch)
		if !ok {
			return errNotIncremental
		}
		oldMid += o
		curMid += c
		return nil
	})
	if err != nil {
		return nil, false
	}
	return &rawIndex{raw: cur, offs: ti.Offs, installs: x.installs - oldMid + curMid}, true
}

// errNotIncremental stops a tree walk whose change a full load must
// report.
var errNotIncremental = errors.New("not an incremental change")

// diffRaw walks the installs/ tree entries old and cur (as written, each
// in git's order; gitobj.TreeWalk) side by side and adds to ch the
// installs whose file is new, changed or gone. before and after, when
// set, are the entries that bound both in git's order (those around a
// part of a tree). It appends to offs where each entry of cur starts,
// base added, and returns the install files in old and in cur; ok is
// false when a full load must say what the trees hold: an entry that is
// not in order, a folder, a file that is not a source file.
func diffRaw(old, cur []byte, before, after rawEntry, base uint32, ch *sourceChange, offs []uint32) (_ []uint32, oldCount, curCount int, ok bool) {
	w := gitobj.NewTreeWalk(old, cur, before, after, base)
	for w.Next() {
		if !w.Cur.IsZero() {
			offs = append(offs, w.CurOff)
		}
		o, c, ok := diffStep(w, ch)
		if !ok {
			return nil, 0, 0, false
		}
		oldCount += o
		curCount += c
	}
	if w.Err() != nil {
		return nil, 0, 0, false
	}
	return offs, oldCount, curCount, true
}

// diffStep adds to ch what one step of a walk of installs/ says, and
// returns the install files of the step in the old tree and in the new
// one (0 or 1 each); false when a full load must say what they hold.
func diffStep(w *gitobj.TreeWalk, ch *sourceChange) (oldCount, curCount int, ok bool) {
	o, c := w.Old, w.Cur
	if !o.IsZero() {
		if !o.Mode.IsFile() {
			// A folder gone or changed: let a full load say what it was.
			return 0, 0, false
		}
		// The previous render read this source: its entries are
		// install files (<id>.yaml), README.md and .gitkeep.
		if id, isInstall := bytes.CutSuffix(o.Name, []byte(".yaml")); isInstall {
			oldCount++
			if c.IsZero() {
				ch.removed = append(ch.removed, string(id))
			}
		}
	}
	if c.IsZero() {
		return oldCount, 0, true
	}
	if w.Same() {
		if bytes.HasSuffix(c.Name, []byte(".yaml")) {
			curCount++
		}
		return oldCount, curCount, true
	}
	e := treeEntry{name: string(c.Name), mode: c.Mode, hash: c.Hash()}
	switch kind, _ := schemas.Classify(schemas.InstallsDir, e.name, fsMode(e.mode)); kind {
	case schemas.SourceFile:
		curCount++
		ch.changed[strings.TrimSuffix(e.name, ".yaml")] = true
		ch.entries = append(ch.entries, e)
	case schemas.NotRead:
		// README.md, .gitkeep
	default:
		// Let a full load report it.
		return 0, 0, false
	}
	return oldCount, curCount, true
}

// rawEntry is one entry of a tree object, as written.
type rawEntry = gitobj.RawEntry

// subtreeList lists the folder name of t, which may not exist, as its
// tree holds it; an error when its entries are not each once in git's
// order.
func subtreeList(st storer.EncodedObjectStorer, t *object.Tree, name string) ([]treeEntry, error) {
	e := entryOf(t, name)
	if e.hash.IsZero() {
		return nil, nil
	}
	if e.mode != filemode.Dir {
		return nil, fmt.Errorf("%s is not a folder", name)
	}
	es, err := parseTree(st, e.hash, 0)
	if err != nil {
		return nil, err
	}
	for i := 1; i < len(es); i++ {
		if gitOrder(es[i-1], es[i]) >= 0 {
			return nil, fmt.Errorf("tree %s: %q and %q are not in git's order", e.hash, es[i-1].name, es[i].name)
		}
	}
	return es, nil
}

// gitOrder compares tree entries as git orders them: by name, a folder's
// as if it ended in "/".
func gitOrder(a, b treeEntry) int {
	return gitobj.CompareEntries(gitobj.Entry{Name: a.name, Mode: a.mode}, gitobj.Entry{Name: b.name, Mode: b.mode})
}

func commitTree(st storer.EncodedObjectStorer, commit plumbing.Hash) (*object.Tree, error) {
	c, err := object.GetCommit(st, commit)
	if err != nil {
		return nil, err
	}
	return c.Tree()
}

// fsMode is the fs.FileMode of a git mode: a folder, a regular file
// (executable or not), a symbolic link; a submodule (gitlink) or a mode
// git does not write is fs.ModeIrregular.
func fsMode(m filemode.FileMode) fs.FileMode {
	switch m {
	case filemode.Dir:
		return fs.ModeDir | 0o555
	case filemode.Regular, filemode.Deprecated:
		return 0o444
	case filemode.Executable:
		return 0o555
	case filemode.Symlink:
		return fs.ModeSymlink | 0o777
	}
	return fs.ModeIrregular
}

// entry is a tree entry's mode and object.
type entry struct {
	mode filemode.FileMode
	hash plumbing.Hash
}

func entryOf(t *object.Tree, name string) entry {
	for _, e := range t.Entries {
		if e.Name == name {
			return entry{e.Mode, e.Hash}
		}
	}
	return entry{}
}

// parseTree reads a tree's entries as they are written, names as they
// are; a positive limit refuses a larger tree object from its size. It
// parses the tree object itself: the trees it reads hold one entry per
// install, and go-git's tree decoding costs several times more.
func parseTree(st storer.EncodedObjectStorer, h plumbing.Hash, limit int64) ([]treeEntry, error) {
	_, data, err := gitobj.ReadObject(st, plumbing.TreeObject, h, limit)
	if errors.Is(err, gitobj.ErrTooLarge) {
		return nil, fmt.Errorf("tree %s is larger than the %d bytes a folder of main may be", h, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", h, err)
	}
	out := make([]treeEntry, 0, len(data)/40)
	for len(data) > 0 {
		sp := bytes.IndexByte(data, ' ')
		if sp < 0 {
			return nil, fmt.Errorf("tree %s is malformed: an entry has no mode", h)
		}
		mode, err := strconv.ParseUint(string(data[:sp]), 8, 32)
		if err != nil {
			return nil, fmt.Errorf("tree %s is malformed: mode %q is not octal", h, data[:sp])
		}
		data = data[sp+1:]
		nul := bytes.IndexByte(data, 0)
		if nul < 0 || len(data) < nul+1+len(plumbing.ZeroHash) {
			return nil, fmt.Errorf("tree %s is malformed: an entry is cut short", h)
		}
		e := treeEntry{name: string(data[:nul]), mode: filemode.FileMode(mode)}
		copy(e.hash[:], data[nul+1:])
		out = append(out, e)
		data = data[nul+1+len(plumbing.ZeroHash):]
	}
	return out, nil
}

// readBlob reads a blob whole.
func readBlob(st storer.EncodedObjectStorer, h plumbing.Hash) ([]byte, error) {
	b, err := object.GetBlob(st, h)
	if err != nil {
		return nil, err
	}
	rd, err := b.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	return io.ReadAll(rd)
}

// channelPins compares the channels/ folders old and cur of two sources:
// when every file that differs is a channel file (<name>.yaml) in both,
// whose documents are the same but for their components' pins, it
// returns those channels with the components whose pin differs. ok is
// false for anything else: a channel added or removed, another field
// changed, a file that does not parse, an entry that is not a channel
// file. Nothing here judges a file: the load that follows does.
func (r *renderRun) channelPins(old, cur entry) (map[string]map[string]bool, bool) {
	if old.mode != filemode.Dir || cur.mode != filemode.Dir {
		return nil, false
	}
	oldEs, err := parseTree(r.st, old.hash, maxSourceTree)
	if err != nil {
		return nil, false
	}
	curEs, err := parseTree(r.st, cur.hash, maxSourceTree)
	if err != nil || len(oldEs) != len(curEs) {
		return nil, false
	}
	out := map[string]map[string]bool{}
	for i, o := range oldEs {
		c := curEs[i]
		if o.name != c.name || o.mode != c.mode {
			return nil, false
		}
		if o.hash == c.hash {
			continue
		}
		name, isYAML := strings.CutSuffix(c.name, ".yaml")
		if !isYAML || !c.mode.IsFile() {
			return nil, false
		}
		pins, ok := r.pinChange(o.hash, c.hash)
		if !ok {
			return nil, false
		}
		out[name] = pins
	}
	return out, true
}

// pinChange compares two channel files: the components whose pin
// differs, and ok when nothing else does. Both are decoded as YAML, every
// document, and compared as decoded, "components" aside: two files the
// same but for comments, layout or the pins decode the same.
func (r *renderRun) pinChange(old, cur plumbing.Hash) (map[string]bool, bool) {
	o, ok := r.channelDocs(old)
	if !ok {
		return nil, false
	}
	c, ok := r.channelDocs(cur)
	if !ok || len(o) != 1 || len(c) != 1 {
		return nil, false
	}
	oc, ok := o[0]["components"].(map[string]any)
	if !ok {
		return nil, false
	}
	cc, ok := c[0]["components"].(map[string]any)
	if !ok {
		return nil, false
	}
	delete(o[0], "components")
	delete(c[0], "components")
	if !reflect.DeepEqual(o[0], c[0]) {
		return nil, false
	}
	changed := map[string]bool{}
	for k, v := range oc {
		if w, has := cc[k]; !has || !reflect.DeepEqual(v, w) {
			changed[k] = true
		}
	}
	for k := range cc {
		if _, has := oc[k]; !has {
			changed[k] = true
		}
	}
	return changed, true
}

// channelDocs decodes every YAML document of the blob h, each a mapping.
func (r *renderRun) channelDocs(h plumbing.Hash) ([]map[string]any, bool) {
	data, err := gitobj.ReadBlob(r.st, h, r.opts.MaxFileSize)
	if err != nil {
		return nil, false
	}
	var docs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var d map[string]any
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			return docs, true
		} else if err != nil || d == nil {
			return nil, false
		}
		docs = append(docs, d)
	}
}

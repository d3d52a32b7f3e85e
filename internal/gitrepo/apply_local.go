package gitrepo

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// Files of a repository on disk that hold refs, as git names them.
const (
	packedRefsFile = "packed-refs"
	packedRefsLock = "packed-refs.lock"
)

// applyLocal moves the refs of a repository on disk.
//
// Writing thousands of refs one file each, and reading them back on the
// next render, costs far more than the render itself; git's own packed-refs
// holds them in one file. So the updates of refs that have no file of their
// own (they are in packed-refs or do not exist) are written together: a new
// packed-refs is written under git's lock, packed-refs.lock, and renamed
// into place, one atomic step for all of them. A ref with a file of its
// own, which git or go-git wrote, is compare-and-swapped alone, before
// that step, or after it when it is the last update. A deletion takes the
// ref out of packed-refs in that step and removes its file, if it has
// one, after it, as git does, so the ref never reads as an older value.
func (r *Repo) applyLocal(updates []Update) (err error) {
	sf, ok := r.repo.Storer.(interface{ Filesystem() billy.Filesystem })
	if !ok {
		return r.applyEach(updates)
	}
	fsys := sf.Filesystem()
	if _, err := fsys.Lstat("commondir"); err == nil {
		// A linked worktree: its refs live elsewhere.
		return r.applyEach(updates)
	}
	lock, err := fsys.OpenFile(packedRefsLock, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("update refs: %w: %s exists: another writer holds it", ErrStale, packedRefsLock)
	}
	if err != nil {
		return fmt.Errorf("update refs: %w", err)
	}
	locked := true
	defer func() {
		if locked {
			lock.Close()
			_ = fsys.Remove(packedRefsLock)
		}
	}()
	if len(updates) <= looseUpdates {
		if done, err := applyLoose(fsys, updates); done || err != nil {
			return err
		}
	}

	t0 := time.Now()
	packed, err := readPackedRefs(fsys)
	if err != nil {
		return fmt.Errorf("update refs: read %s: %w", packedRefsFile, err)
	}
	phase("refs read packed", &t0)
	var loose, inPack, looseDeletes []Update
	// Built only for a new ref: it lists every packed ref's folders.
	var dirs *dirCheck
	files := refFiles{fsys: fsys, dirs: map[string]map[string]bool{}}
	for _, u := range updates {
		isDir, exists := files.lookup(u.Name.String())
		switch {
		case exists && isDir:
			return fmt.Errorf("update %s: a folder of refs has that name", u.Name)
		case exists:
			cur, err := r.Ref(u.Name)
			if err != nil {
				return fmt.Errorf("read %s: %w", u.Name, err)
			}
			if cur != u.Old {
				return fmt.Errorf("update %s: %w: it is %s, expected %s", u.Name, ErrStale, cur, u.Old)
			}
			if u.New.IsZero() {
				looseDeletes = append(looseDeletes, u)
				if !packed.hash(u.Name).IsZero() {
					inPack = append(inPack, u)
				}
				continue
			}
			loose = append(loose, u)
		default:
			if cur := packed.hash(u.Name); cur != u.Old {
				return fmt.Errorf("update %s: %w: it is %s, expected %s", u.Name, ErrStale, cur, u.Old)
			}
			if u.Old.IsZero() {
				if dirs == nil {
					dirs = newDirCheck(fsys, packed)
				}
				if err := dirs.check(u.Name); err != nil {
					return err
				}
			}
			inPack = append(inPack, u)
		}
	}

	phase("refs check", &t0)
	last := updates[len(updates)-1]
	for _, u := range loose {
		if u != last {
			if err := r.casLoose(u); err != nil {
				return err
			}
		}
	}
	var folded []string
	if len(inPack) > 0 {
		packed.added = slices.Grow(packed.added, len(inPack))
		for _, u := range inPack {
			packed.set(u.Name, u.New)
		}
		phase("refs set", &t0)
		// The ref files that earlier small updates wrote beside the
		// refs moved here join packed-refs too, so that they stay few.
		if folded, err = foldLoose(fsys, packed, updates); err != nil {
			return fmt.Errorf("update refs: %w", err)
		}
		defer func() {
			for _, name := range folded {
				_ = fsys.Remove(name + ".lock")
			}
		}()
		phase("refs fold", &t0)
		if err := packed.write(lock); err != nil {
			return fmt.Errorf("update refs: write %s: %w", packedRefsLock, err)
		}
		phase("refs write", &t0)
		if err := lock.Close(); err != nil {
			return fmt.Errorf("update refs: write %s: %w", packedRefsLock, err)
		}
		if err := fsys.Rename(packedRefsLock, packedRefsFile); err != nil {
			return fmt.Errorf("update refs: %w", err)
		}
		locked = false
		// packed-refs holds what each folded file held: the files can go.
		for _, name := range folded {
			_ = fsys.Remove(name)
		}
	}
	for _, u := range looseDeletes {
		if err := r.removeLoose(fsys, u); err != nil {
			return err
		}
	}
	if len(loose) > 0 && loose[len(loose)-1] == last {
		return r.casLoose(last)
	}
	return nil
}

// refFiles finds which refs have a file (or a folder) of their own,
// reading each folder of refs once: a cold render of a million installs
// otherwise asked the file system about each of its million refs, none of
// which has a file.
type refFiles struct {
	fsys billy.Filesystem
	// dirs are the folders read, each with its entries' names, true for
	// a folder; empty when it could not be read (it does not exist).
	dirs map[string]map[string]bool
}

// lookup reports whether the ref name has a file or a folder, and which.
func (f *refFiles) lookup(name string) (isDir, exists bool) {
	dir, base := path.Split(name)
	entries, ok := f.dirs[dir]
	if !ok {
		// Any error reads as an empty folder, as a failed Lstat of the
		// ref did: the ref is then compared with packed-refs.
		infos, _ := f.fsys.ReadDir(dir)
		entries = make(map[string]bool, len(infos))
		for _, fi := range infos {
			entries[fi.Name()] = fi.IsDir()
		}
		f.dirs[dir] = entries
	}
	isDir, exists = entries[base]
	return isDir, exists
}

// removeLoose removes the file of a ref being deleted, if it is still at
// u.Old.
func (r *Repo) removeLoose(fsys billy.Filesystem, u Update) error {
	ref, err := r.repo.Storer.Reference(u.Name)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return fmt.Errorf("delete %s: %w: it is gone, expected %s", u.Name, ErrStale, u.Old)
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", u.Name, err)
	}
	if ref.Hash() != u.Old {
		return fmt.Errorf("delete %s: %w: it is %s, expected %s", u.Name, ErrStale, ref.Hash(), u.Old)
	}
	if err := fsys.Remove(u.Name.String()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", u.Name, err)
	}
	return nil
}

// casLoose compares and swaps one ref that has a file of its own.
func (r *Repo) casLoose(u Update) error {
	var old *plumbing.Reference
	if !u.Old.IsZero() {
		old = plumbing.NewHashReference(u.Name, u.Old)
	}
	if err := r.repo.Storer.CheckAndSetReference(plumbing.NewHashReference(u.Name, u.New), old); err != nil {
		return fmt.Errorf("update %s: %w: %v", u.Name, ErrStale, err)
	}
	return nil
}

// applyEach compare-and-swaps each ref in order, where the repository's
// refs are not files this package knows how to write together.
func (r *Repo) applyEach(updates []Update) error {
	for _, u := range updates {
		cur, err := r.Ref(u.Name)
		if err != nil {
			return fmt.Errorf("read %s: %w", u.Name, err)
		}
		if cur != u.Old {
			return fmt.Errorf("update %s: %w: it is %s, expected %s", u.Name, ErrStale, cur, u.Old)
		}
		if u.New.IsZero() {
			if err := r.repo.Storer.RemoveReference(u.Name); err != nil {
				return fmt.Errorf("delete %s: %w", u.Name, err)
			}
			continue
		}
		if err := r.casLoose(u); err != nil {
			return err
		}
	}
	return nil
}

// packedRefs is a parsed packed-refs file: its refs sorted by name, as
// git writes them, so that a ref is found by binary search and the file is
// written again by one merge of the refs kept with the refs added. With
// 100,000 install refs, a map of them and a sort on every write cost a
// render that moved two refs some 90 ms (renderer's BenchmarkRenderFleet).
type packedRefs struct {
	// traits of the header line; nil when the file had none.
	traits []string
	// refs are sorted by name, one each.
	refs []packedRef
	// added are refs not in refs, sorted by name when written; addedAt
	// finds one by name once one was added out of order (nil while added
	// is sorted, as a render's updates are: a map of a cold render's
	// million refs cost some 0.6 s).
	// finds one by name (a cold render adds 100,000).
	added   []packedRef
	addedAt map[string]int
}

type packedRef struct {
	name string
	// hash is "" for a ref deleted since the file was read: not written.
	hash string
	// peeled is the object an annotated tag points to ("^" line), or "".
	peeled string
}

func readPackedRefs(fsys billy.Filesystem) (*packedRefs, error) {
	p := &packedRefs{}
	f, err := fsys.Open(packedRefsFile)
	if errors.Is(err, fs.ErrNotExist) {
		p.traits = []string{"peeled", "fully-peeled", "sorted"}
		return p, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	// One string for the whole file: every name and hash is a part of it.
	text := string(data)
	p.refs = make([]packedRef, 0, strings.Count(text, "\n")+1)
	sorted := true
	for n := 1; len(text) > 0; n++ {
		line, rest, _ := strings.Cut(text, "\n")
		text = rest
		if len(line) > 1<<20 {
			return nil, fmt.Errorf("line %d: longer than %d bytes", n, 1<<20)
		}
		switch {
		case n == 1 && strings.HasPrefix(line, "# pack-refs with:"):
			p.traits = strings.Fields(strings.TrimPrefix(line, "# pack-refs with:"))
		case strings.HasPrefix(line, "^"):
			if len(p.refs) == 0 {
				return nil, fmt.Errorf("line %d: peeled value without a ref", n)
			}
			p.refs[len(p.refs)-1].peeled = line[1:]
		case line == "" || strings.HasPrefix(line, "#"):
		default:
			h, name, ok := strings.Cut(line, " ")
			if !ok || !plumbing.IsHash(h) {
				return nil, fmt.Errorf("line %d: %q is not a ref", n, line)
			}
			if k := len(p.refs); k > 0 && p.refs[k-1].name >= name {
				sorted = false
			}
			p.refs = append(p.refs, packedRef{name: name, hash: h})
		}
	}
	if !sorted {
		// A file git did not sort (or with a name twice): sort it, the
		// last line of a name winning, as it did when read into a map.
		slices.SortStableFunc(p.refs, func(a, b packedRef) int { return strings.Compare(a.name, b.name) })
		out := p.refs[:0]
		for _, r := range p.refs {
			if k := len(out); k > 0 && out[k-1].name == r.name {
				out[k-1] = r
				continue
			}
			out = append(out, r)
		}
		p.refs = out
	}
	if !slices.Contains(p.traits, "sorted") {
		p.traits = append(p.traits, "sorted")
	}
	return p, nil
}

// find returns the ref name, nil when there is none.
func (p *packedRefs) find(name string) *packedRef {
	if i, ok := slices.BinarySearchFunc(p.refs, name, func(r packedRef, n string) int { return strings.Compare(r.name, n) }); ok {
		return &p.refs[i]
	}
	if p.addedAt == nil {
		if i, ok := slices.BinarySearchFunc(p.added, name, func(r packedRef, n string) int { return strings.Compare(r.name, n) }); ok {
			return &p.added[i]
		}
	} else if i, ok := p.addedAt[name]; ok {
		return &p.added[i]
	}
	return nil
}

func (p *packedRefs) hash(name plumbing.ReferenceName) plumbing.Hash {
	r := p.find(name.String())
	if r == nil || r.hash == "" {
		return plumbing.ZeroHash
	}
	return plumbing.NewHash(r.hash)
}

// set sets a ref; the zero hash deletes it.
func (p *packedRefs) set(name plumbing.ReferenceName, h plumbing.Hash) {
	if r := p.find(name.String()); r != nil {
		*r = packedRef{name: r.name, hash: h.String()}
		if h.IsZero() {
			r.hash = ""
		}
		return
	}
	if h.IsZero() {
		return
	}
	if n := len(p.added); p.addedAt == nil && (n == 0 || p.added[n-1].name < name.String()) {
		p.added = append(p.added, packedRef{name: name.String(), hash: h.String()})
		return
	}
	if p.addedAt == nil {
		p.addedAt = make(map[string]int, len(p.added)+1)
		for i, r := range p.added {
			p.addedAt[r.name] = i
		}
	}
	p.addedAt[name.String()] = len(p.added)
	p.added = append(p.added, packedRef{name: name.String(), hash: h.String()})
}

// write writes the file as git does: the header, then the refs sorted by
// name, each followed by its peeled value if it has one.
func (p *packedRefs) write(w io.Writer) error {
	added := p.added
	if p.addedAt != nil {
		added = slices.SortedFunc(slices.Values(p.added), func(a, b packedRef) int { return strings.Compare(a.name, b.name) })
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	fmt.Fprintf(bw, "# pack-refs with: %s \n", strings.Join(p.traits, " "))
	line := func(r packedRef) {
		if r.hash == "" {
			return
		}
		bw.WriteString(r.hash)
		bw.WriteByte(' ')
		bw.WriteString(r.name)
		bw.WriteByte('\n')
		if r.peeled != "" {
			bw.WriteByte('^')
			bw.WriteString(r.peeled)
			bw.WriteByte('\n')
		}
	}
	refs := p.refs
	for len(refs) > 0 || len(added) > 0 {
		if len(added) == 0 || len(refs) > 0 && refs[0].name < added[0].name {
			line(refs[0])
			refs = refs[1:]
			continue
		}
		line(added[0])
		added = added[1:]
	}
	return bw.Flush()
}

// dirCheck finds the conflicts git forbids between a new ref and the
// existing ones: a ref named like a folder of another (refs/heads/a beside
// refs/heads/a/b).
type dirCheck struct {
	fsys   billy.Filesystem
	packed *packedRefs
	// folders holds every folder of a packed ref's name.
	folders map[string]bool
	// files caches whether a path is a loose ref file.
	files map[string]bool
}

func newDirCheck(fsys billy.Filesystem, packed *packedRefs) *dirCheck {
	d := &dirCheck{fsys: fsys, packed: packed, folders: map[string]bool{}, files: map[string]bool{}}
	for _, r := range packed.refs {
		for dir := path.Dir(r.name); dir != "." && !d.folders[dir]; dir = path.Dir(dir) {
			d.folders[dir] = true
		}
	}
	return d
}

func (d *dirCheck) check(name plumbing.ReferenceName) error {
	s := name.String()
	if d.folders[s] {
		return fmt.Errorf("update %s: refs exist under that name as a folder", name)
	}
	for dir := path.Dir(s); dir != "." && dir != "refs"; dir = path.Dir(dir) {
		if d.packed.find(dir) != nil {
			return fmt.Errorf("update %s: ref %s exists", name, dir)
		}
		isFile, ok := d.files[dir]
		if !ok {
			fi, err := d.fsys.Lstat(dir)
			isFile = err == nil && !fi.IsDir()
			d.files[dir] = isFile
		}
		if isFile {
			return fmt.Errorf("update %s: ref %s exists", name, dir)
		}
	}
	for dir := path.Dir(s); dir != "." && !d.folders[dir]; dir = path.Dir(dir) {
		d.folders[dir] = true
	}
	return nil
}

// Updates of a local repository that are this few are written as ref
// files of their own (git's loose refs), each under its lock, as git
// update-ref does: rewriting a packed-refs of 100,000 install refs to move
// two cost a one-install render more than the rest of it. More updates,
// or a folder of refs that already holds maxLoose ref files, go into one
// new packed-refs, which takes in the other ref files of the folders it
// updates (foldLoose).
const (
	looseUpdates = 64
	maxLoose     = 1024
)

// applyLoose writes updates as ref files, the last one last. It takes each
// ref's lock (<name>.lock, as git does), checks every ref is at its Old
// value, and only then moves them. done is false, with nothing written,
// when a folder of the updates holds maxLoose ref files or more.
func applyLoose(fsys billy.Filesystem, updates []Update) (done bool, err error) {
	for _, u := range updates {
		if u.New.IsZero() {
			// A deletion must take the ref out of packed-refs too: one
			// new packed-refs does both.
			return false, nil
		}
		// A folder that is not there, or is a ref (checked below), holds
		// no ref files.
		infos, _ := fsys.ReadDir(path.Dir(u.Name.String()))
		if len(infos) >= maxLoose {
			return false, nil
		}
	}
	// Read only when a ref has no file of its own: the refs a render
	// moves again are files by then, and packed-refs holds 100,000.
	data := &packedFile{fsys: fsys}
	for _, u := range updates {
		cur, err := currentRef(fsys, data, u.Name.String())
		if errors.Is(err, errUnsorted) {
			// A packed-refs git did not write (a name twice, say): one
			// new packed-refs puts it right.
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if cur != u.Old {
			return false, fmt.Errorf("update %s: %w: it is %s, expected %s", u.Name, ErrStale, cur, u.Old)
		}
		if u.Old.IsZero() {
			err := checkNewRef(fsys, data, u.Name.String())
			if errors.Is(err, errUnsorted) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
		}
	}
	var locks []string
	defer func() {
		for _, l := range locks {
			_ = fsys.Remove(l)
		}
	}()
	files := make([]billy.File, 0, len(updates))
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, u := range updates {
		name := u.Name.String()
		if err := fsys.MkdirAll(path.Dir(name), 0o755); err != nil {
			return false, fmt.Errorf("update %s: %w", name, err)
		}
		f, err := fsys.OpenFile(name+".lock", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if errors.Is(err, fs.ErrExist) {
			return false, fmt.Errorf("update %s: %w: %s.lock exists: another writer holds it", name, ErrStale, name)
		}
		if err != nil {
			return false, fmt.Errorf("update %s: %w", name, err)
		}
		locks, files = append(locks, name+".lock"), append(files, f)
		// Checked again under the ref's lock: git moves a ref under it.
		cur, err := currentRef(fsys, data, name)
		if err != nil {
			return false, err
		}
		if cur != u.Old {
			return false, fmt.Errorf("update %s: %w: it is %s, expected %s", name, ErrStale, cur, u.Old)
		}
		if _, err := f.Write([]byte(u.New.String() + "\n")); err != nil {
			return false, fmt.Errorf("update %s: %w", name, err)
		}
	}
	for i, u := range updates {
		if err := files[i].Close(); err != nil {
			return false, fmt.Errorf("update %s: %w", u.Name, err)
		}
	}
	files = nil
	for i, u := range updates {
		if err := fsys.Rename(locks[i], u.Name.String()); err != nil {
			return false, fmt.Errorf("update %s: %w", u.Name, err)
		}
		locks[i] = ""
	}
	locks = nil
	return true, nil
}

// packedFile is packed-refs, read once, when first asked for.
type packedFile struct {
	fsys billy.Filesystem
	read bool
	data []byte
	err  error
}

// errUnsorted: packed-refs does not say it is sorted.
var errUnsorted = errors.New("packed-refs is not sorted")

// bytes returns packed-refs, nil when there is none; errUnsorted when git
// did not write it sorted.
func (p *packedFile) bytes() ([]byte, error) {
	if !p.read {
		p.read = true
		p.data, p.err = readPackedRefsFile(p.fsys)
		if p.err != nil {
			p.err = fmt.Errorf("update refs: read %s: %w", packedRefsFile, p.err)
		} else if len(p.data) > 0 && !sortedPackedRefs(p.data) {
			p.err = errUnsorted
		}
	}
	return p.data, p.err
}

// currentRef is the value of ref name: its file's, else packed-refs',
// zero when it has none.
func currentRef(fsys billy.Filesystem, packed *packedFile, name string) (plumbing.Hash, error) {
	fi, err := fsys.Lstat(name)
	switch {
	case err == nil && fi.IsDir():
		return plumbing.ZeroHash, fmt.Errorf("update %s: a folder of refs has that name", name)
	case err == nil:
		h, ok, err := readLooseRef(fsys, name)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("read %s: %w", name, err)
		}
		if !ok {
			return plumbing.ZeroHash, fmt.Errorf("update %s: its file holds no object id", name)
		}
		return h, nil
	case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
		// ENOTDIR: a folder of the name is a ref, which checkNewRef
		// refuses.
		return plumbing.ZeroHash, fmt.Errorf("read %s: %w", name, err)
	}
	return packed.find(name)
}

// find returns name's id in packed-refs, zero when it has none: by binary
// search on the file when git wrote it sorted and it was not read whole,
// else from its bytes; errUnsorted as bytes.
func (p *packedFile) find(name string) (plumbing.Hash, error) {
	if !p.read {
		h, err := p.search(name)
		if !errors.Is(err, errNoSearch) {
			return h, err
		}
	}
	data, err := p.bytes()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	h, _ := findPackedRef(data, name)
	return h, nil
}

// search is find by searchPackedRef; errNoSearch when the file must be
// read whole.
func (p *packedFile) search(name string) (h plumbing.Hash, err error) {
	err = p.searchWith(func(r io.ReaderAt, size int64) (err error) {
		h, _, err = searchPackedRef(r, size, name, searchWindow)
		return err
	})
	return h, err
}

// hasPrefix reports whether a ref in packed-refs has a name starting with
// prefix: by binary search on the file when git wrote it sorted and it
// was not read whole, else by a scan of its bytes; errUnsorted as bytes.
func (p *packedFile) hasPrefix(prefix string) (bool, error) {
	if !p.read {
		var found bool
		err := p.searchWith(func(r io.ReaderAt, size int64) (err error) {
			found, err = searchPackedPrefix(r, size, prefix, searchWindow)
			return err
		})
		if !errors.Is(err, errNoSearch) {
			return found, err
		}
	}
	data, err := p.bytes()
	if err != nil {
		return false, err
	}
	return bytes.Contains(data, []byte(" "+prefix)), nil
}

// searchWith opens packed-refs and, when git wrote it sorted, calls
// search with it and its size (no file: search is not called, nil);
// errUnsorted when it is not sorted, errNoSearch when the file must be
// read whole.
func (p *packedFile) searchWith(search func(r io.ReaderAt, size int64) error) error {
	f, err := p.fsys.Open(packedRefsFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update refs: read %s: %w", packedRefsFile, err)
	}
	defer f.Close()
	fi, err := p.fsys.Stat(packedRefsFile)
	if err != nil {
		return errNoSearch
	}
	head := make([]byte, searchLine)
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("update refs: read %s: %w", packedRefsFile, err)
	}
	if n > 0 && !sortedPackedRefs(head[:n]) {
		return errUnsorted
	}
	err = search(f, fi.Size())
	if err != nil && !errors.Is(err, errNoSearch) {
		err = fmt.Errorf("update refs: read %s: %w", packedRefsFile, err)
	}
	return err
}

// checkNewRef refuses a new ref name that git would: one named like a
// folder of other refs, or under a name that is a ref. packed-refs is
// searched, not read: it is 150 MB at a million installs, and an install's
// first status push makes a new ref.
func checkNewRef(fsys billy.Filesystem, packed *packedFile, name string) error {
	under, err := packed.hasPrefix(name + "/")
	if err != nil {
		return err
	}
	if under {
		return fmt.Errorf("update %s: refs exist under that name as a folder", name)
	}
	for dir := path.Dir(name); dir != "." && dir != "refs"; dir = path.Dir(dir) {
		h, err := packed.find(dir)
		if err != nil {
			return err
		}
		if !h.IsZero() {
			return fmt.Errorf("update %s: ref %s exists", name, dir)
		}
		if fi, err := fsys.Lstat(dir); err == nil && !fi.IsDir() {
			return fmt.Errorf("update %s: ref %s exists", name, dir)
		}
	}
	return nil
}

// foldLoose sets in packed the ref files of the folders of updates that
// updates do not move, each under its lock, and returns their names: the
// caller removes each file, then its lock, once packed-refs is written.
// A ref another writer holds the lock of stays a file.
func foldLoose(fsys billy.Filesystem, packed *packedRefs, updates []Update) ([]string, error) {
	// A million updates are in few folders, most often none with a ref
	// file: the names moved are a set only once a folder has one.
	dirs := map[string]bool{}
	last := ""
	for _, u := range updates {
		if d := path.Dir(u.Name.String()); d != last {
			dirs[d], last = true, d
		}
	}
	var moved map[string]bool
	var folded []string
	for _, dir := range slices.Sorted(maps.Keys(dirs)) {
		infos, err := fsys.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return folded, err
		}
		for _, fi := range infos {
			name := dir + "/" + fi.Name()
			if !fi.Mode().IsRegular() || strings.HasSuffix(name, ".lock") {
				continue
			}
			if moved == nil {
				moved = make(map[string]bool, len(updates))
				for _, u := range updates {
					moved[u.Name.String()] = true
				}
			}
			if moved[name] {
				continue
			}
			l, err := fsys.OpenFile(name+".lock", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				continue
			}
			l.Close()
			h, ok, err := readLooseRef(fsys, name)
			if err != nil || !ok {
				_ = fsys.Remove(name + ".lock")
				continue
			}
			packed.set(plumbing.ReferenceName(name), h)
			folded = append(folded, name)
		}
	}
	return folded, nil
}

// sortedPackedRefs reports whether packed-refs says it is sorted, as git
// writes it: each name once, in order.
func sortedPackedRefs(data []byte) bool {
	header, _, _ := bytes.Cut(data, []byte("\n"))
	traits, ok := bytes.CutPrefix(header, []byte("# pack-refs with:"))
	return ok && slices.Contains(strings.Fields(string(traits)), "sorted")
}

// phase logs, at debug level, how long a phase of an update took since
// *t0, and starts the next.
func phase(name string, t0 *time.Time) {
	now := time.Now()
	slog.Debug("phase", "name", name, "took", now.Sub(*t0).Round(time.Millisecond))
	*t0 = now
}

package gitrepo

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

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

	packed, err := readPackedRefs(fsys)
	if err != nil {
		return fmt.Errorf("update refs: read %s: %w", packedRefsFile, err)
	}
	var loose, inPack, looseDeletes []Update
	// Built only for a new ref: it lists every packed ref's folders.
	var dirs *dirCheck
	for _, u := range updates {
		fi, err := fsys.Lstat(u.Name.String())
		switch {
		case err == nil && fi.IsDir():
			return fmt.Errorf("update %s: a folder of refs has that name", u.Name)
		case err == nil:
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

	last := updates[len(updates)-1]
	for _, u := range loose {
		if u != last {
			if err := r.casLoose(u); err != nil {
				return err
			}
		}
	}
	if len(inPack) > 0 {
		for _, u := range inPack {
			packed.set(u.Name, u.New)
		}
		if err := packed.write(lock); err != nil {
			return fmt.Errorf("update refs: write %s: %w", packedRefsLock, err)
		}
		if err := lock.Close(); err != nil {
			return fmt.Errorf("update refs: write %s: %w", packedRefsLock, err)
		}
		if err := fsys.Rename(packedRefsLock, packedRefsFile); err != nil {
			return fmt.Errorf("update refs: %w", err)
		}
		locked = false
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
	if i, ok := p.addedAt[name]; ok {
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
	if p.addedAt == nil {
		p.addedAt = map[string]int{}
	}
	p.addedAt[name.String()] = len(p.added)
	p.added = append(p.added, packedRef{name: name.String(), hash: h.String()})
}

// write writes the file as git does: the header, then the refs sorted by
// name, each followed by its peeled value if it has one.
func (p *packedRefs) write(w io.Writer) error {
	added := slices.SortedFunc(slices.Values(p.added), func(a, b packedRef) int { return strings.Compare(a.name, b.name) })
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

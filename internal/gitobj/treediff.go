package gitobj

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
)

// RawEntry is one entry of a tree object as written: what a tree of a
// million installs is compared as, without a string or a map per entry.
type RawEntry struct {
	// Raw is the whole entry: mode, name and object id.
	Raw  []byte
	Name []byte
	Mode filemode.FileMode
}

// Hash is the entry's object id.
func (e RawEntry) Hash() plumbing.Hash {
	return plumbing.Hash(e.Raw[len(e.Raw)-len(plumbing.ZeroHash):])
}

// IsZero reports whether e is no entry.
func (e RawEntry) IsZero() bool { return e.Raw == nil }

// NextRawEntry reads the first entry of the tree object content data and
// returns it with what follows it; false when data does not start with an
// entry (a mode of octal digits, a space, a name, a NUL, 20 bytes).
func NextRawEntry(data []byte) (RawEntry, []byte, bool) {
	sp := bytes.IndexByte(data, ' ')
	if sp <= 0 || sp > 7 {
		return RawEntry{}, nil, false
	}
	var mode uint32
	for _, c := range data[:sp] {
		if c < '0' || c > '7' {
			return RawEntry{}, nil, false
		}
		mode = mode<<3 | uint32(c-'0')
	}
	nul := bytes.IndexByte(data[sp+1:], 0)
	end := sp + 1 + nul + 1 + len(plumbing.ZeroHash)
	if nul <= 0 || end > len(data) {
		return RawEntry{}, nil, false
	}
	return RawEntry{Raw: data[:end], Name: data[sp+1 : sp+1+nul], Mode: filemode.FileMode(mode)}, data[end:], true
}

// CompareRaw orders raw entries as git orders a tree's entries (see
// CompareEntries): 0 only for the same name of the same kind (folder or
// not), whatever their ids.
func CompareRaw(a, b RawEntry) int {
	return compareNames(a.Name, a.Mode == filemode.Dir, b.Name, b.Mode == filemode.Dir)
}

// compareNames orders two entry names as git orders a tree: by bytes, a
// folder's name compared as if it ended in "/". It is the one ordering
// of CompareRaw and CompareEntries.
func compareNames(a []byte, aDir bool, b []byte, bDir bool) int {
	n := min(len(a), len(b))
	if c := bytes.Compare(a[:n], b[:n]); c != 0 {
		return c
	}
	next := func(name []byte, dir bool) int {
		switch {
		case n < len(name):
			return int(name[n])
		case dir:
			return '/'
		}
		return -1
	}
	// Past the common part at least one name has ended; a name cannot
	// hold "/", so two folders of one name are the only tie left.
	return cmp.Compare(next(a, aDir), next(b, bDir))
}

// ErrTreeOrder marks a tree object whose entries are not each once in
// git's order, which a merge walk cannot compare.
var ErrTreeOrder = errors.New("tree entries not in git's order")

// TreeWalk compares two tree objects as written (old and cur), in git's
// order, side by side: the one way nuon tells which entries of main's
// installs/ changed between two commits (the render, the server's key
// table, the rollout controller). Each step is one name: in old only, in
// cur only, or in both (the same entry when Same). Nothing is allocated
// per entry. Both trees are checked to be in git's order, each name once,
// and bounded by Before and After when those are set.
type TreeWalk struct {
	old, cur []byte
	curLen   int
	base     uint32

	// Old and Cur are the step's entries; the zero RawEntry when the name
	// is not in that tree.
	Old, Cur RawEntry
	// CurOff is where Cur starts in the cur given, plus base.
	CurOff uint32

	lastOld, lastCur RawEntry
	after            RawEntry
	err              error
}

// NewTreeWalk walks old and cur. before and after, when not zero, bound
// both: every entry walked must sort after before and before after (a
// part of a tree between entries it shares with another). base is added
// to CurOff.
func NewTreeWalk(old, cur []byte, before, after RawEntry, base uint32) *TreeWalk {
	return &TreeWalk{old: old, cur: cur, curLen: len(cur), base: base, lastOld: before, lastCur: before, after: after}
}

// Next steps to the next name; false at the end of both trees or on an
// error (Err).
func (w *TreeWalk) Next() bool {
	if w.err != nil {
		return false
	}
	w.Old, w.Cur = RawEntry{}, RawEntry{}
	if len(w.old) == 0 && len(w.cur) == 0 {
		if !w.after.IsZero() && (!w.lastOld.IsZero() && CompareRaw(w.lastOld, w.after) >= 0 || !w.lastCur.IsZero() && CompareRaw(w.lastCur, w.after) >= 0) {
			w.err = fmt.Errorf("%w: %q before %q", ErrTreeOrder, w.after.Name, w.lastCur.Name)
		}
		return false
	}
	var o, c RawEntry
	var oRest, cRest []byte
	var ok bool
	if len(w.old) > 0 {
		if o, oRest, ok = NextRawEntry(w.old); !ok {
			w.err = errors.New("old tree: malformed entry")
			return false
		}
		if !w.lastOld.IsZero() && CompareRaw(w.lastOld, o) >= 0 {
			w.err = fmt.Errorf("%w: %q after %q", ErrTreeOrder, o.Name, w.lastOld.Name)
			return false
		}
	}
	if len(w.cur) > 0 {
		if c, cRest, ok = NextRawEntry(w.cur); !ok {
			w.err = errors.New("tree: malformed entry")
			return false
		}
		if !w.lastCur.IsZero() && CompareRaw(w.lastCur, c) >= 0 {
			w.err = fmt.Errorf("%w: %q after %q", ErrTreeOrder, c.Name, w.lastCur.Name)
			return false
		}
	}
	order := 0
	switch {
	case o.IsZero():
		order = 1
	case c.IsZero():
		order = -1
	default:
		order = CompareRaw(o, c)
	}
	if order <= 0 {
		w.Old, w.old, w.lastOld = o, oRest, o
	}
	if order >= 0 {
		w.CurOff = w.base + uint32(w.curLen-len(w.cur))
		w.Cur, w.cur, w.lastCur = c, cRest, c
	}
	return true
}

// Same reports whether the step's name is in both trees as the same
// entry (mode and id).
func (w *TreeWalk) Same() bool {
	return !w.Old.IsZero() && !w.Cur.IsZero() && bytes.Equal(w.Old.Raw, w.Cur.Raw)
}

// Err is why the walk stopped early; nil at the end of both trees.
func (w *TreeWalk) Err() error { return w.err }

// TreeIndex is a tree object as written with where each entry starts:
// what is kept of main's installs/ tree (about 48 bytes an install, 4 of
// them the offset), so that the next commit's tree, which differs in a
// few entries, is compared around them (Delta) and an entry is found by
// name without a map (Find).
type TreeIndex struct {
	Raw []byte
	// Offs[k] is where entry k starts in Raw.
	Offs []uint32
}

// IndexTree indexes a tree object's content; an error when it is not a
// well-formed tree in git's order.
func IndexTree(raw []byte) (*TreeIndex, error) {
	w := NewTreeWalk(nil, raw, RawEntry{}, RawEntry{}, 0)
	offs := make([]uint32, 0, len(raw)/40)
	for w.Next() {
		offs = append(offs, w.CurOff)
	}
	if w.Err() != nil {
		return nil, w.Err()
	}
	return &TreeIndex{Raw: raw, Offs: offs}, nil
}

// Len is the number of entries.
func (x *TreeIndex) Len() int { return len(x.Offs) }

// end is where entry k ends.
func (x *TreeIndex) end(k int) int {
	if k+1 < len(x.Offs) {
		return int(x.Offs[k+1])
	}
	return len(x.Raw)
}

// Entry is entry k.
func (x *TreeIndex) Entry(k int) RawEntry {
	e, _, _ := NextRawEntry(x.Raw[x.Offs[k]:x.end(k)])
	return e
}

// Find returns the entry of the name, a folder when dir; false when the
// tree has none.
func (x *TreeIndex) Find(name string, dir bool) (RawEntry, bool) {
	probe := RawEntry{Name: []byte(name), Mode: filemode.Regular}
	if dir {
		probe.Mode = filemode.Dir
	}
	k := sort.Search(len(x.Offs), func(k int) bool { return CompareRaw(x.Entry(k), probe) >= 0 })
	if k < len(x.Offs) {
		if e := x.Entry(k); CompareRaw(e, probe) == 0 {
			return e, true
		}
	}
	return RawEntry{}, false
}

// Delta compares cur, the content of the tree that follows x's, with x
// and returns cur's index. Only what lies between the bytes the two share
// at their start and at their end is walked (entries wholly within those
// are the same entries at the same place from the start or from the end,
// as x's entries were read from its start, and when the bytes between
// are whole entries of cur); fn is called for each step of that walk
// (Same ones too), and Delta stops with fn's error. x's entries walked
// are [i, j). Otherwise Delta fails only when cur is not a tree in git's
// order (FuzzTreeIndexDelta).
//
// The last Delta between two trees ReadTreeShared keeps is kept, by the
// two trees' content in memory, which is never changed: a Delta of the
// same two (from another index of the same content, as the render, the
// key table and the rollout controller each compare main's new installs/
// tree with the one before) takes its entries [i, j) and index and walks
// only those, where each compared the two trees' 41 MB and copied 4 MB
// of offsets at a million installs. Other bytes, which their owner may
// change, are compared every time.
func (x *TreeIndex) Delta(cur []byte, fn func(w *TreeWalk) error) (idx *TreeIndex, i, j int, err error) {
	if d, ok := keptDelta(x, cur); ok {
		return d.walk(x, fn)
	}
	n := len(x.Offs)
	p, ok := sharedPrefix(x.Raw, cur)
	if !ok {
		p = commonPrefix(x.Raw, cur)
	}
	// i: the first entry not wholly within the shared start.
	i = sort.Search(n, func(k int) bool { return x.end(k) > p })
	from := len(x.Raw)
	if i < n {
		from = int(x.Offs[i])
	}
	// from <= p <= len(cur): entry i starts where entry i-1 ended,
	// within the shared start.
	s := commonSuffix(x.Raw[from:], cur[from:])
	// j: the first entry from i on wholly within the shared end.
	j = i + sort.Search(n-i, func(k int) bool { return int(x.Offs[i+k]) >= len(x.Raw)-s })
	to := len(x.Raw)
	if j < n {
		to = int(x.Offs[j])
	}
	shift := len(cur) - len(x.Raw)
	if !wholeEntries(cur[from : to+shift]) {
		// The shared end does not start at an entry of cur (its first
		// bytes end an entry of cur that starts before): walk to the end.
		j, to = n, len(x.Raw)
	}
	var before, after RawEntry
	if i > 0 {
		before = x.Entry(i - 1)
	}
	if j < n {
		after = x.Entry(j)
	}
	offs := make([]uint32, 0, n+8)
	offs = append(offs, x.Offs[:i]...)
	w := NewTreeWalk(x.Raw[from:to], cur[from:to+shift], before, after, uint32(from))
	for w.Next() {
		if !w.Cur.IsZero() {
			offs = append(offs, w.CurOff)
		}
		if fn != nil {
			if err := fn(w); err != nil {
				return nil, 0, 0, err
			}
		}
	}
	if w.Err() != nil {
		return nil, 0, 0, w.Err()
	}
	for _, o := range x.Offs[j:] {
		offs = append(offs, uint32(int(o)+shift))
	}
	idx = &TreeIndex{Raw: cur, Offs: offs}
	keepDelta(&delta{old: x.Raw, idx: idx, n: n, i: i, j: j, from: from, to: to})
	return idx, i, j, nil
}

// delta is a Delta done: of old's index of n entries, [i, j) walked, the
// bytes [from, to) of old; idx is the index made.
type delta struct {
	old      []byte
	idx      *TreeIndex
	n, i, j  int
	from, to int
}

// lastDelta is the last Delta done.
var lastDelta struct {
	mu sync.Mutex
	d  *delta
}

// sameBytes reports whether a and b are the same bytes in memory.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && len(a) > 0 && &a[0] == &b[0]
}

// keptDelta is the Delta kept of x's content to cur, when there is one.
func keptDelta(x *TreeIndex, cur []byte) (*delta, bool) {
	lastDelta.mu.Lock()
	d := lastDelta.d
	lastDelta.mu.Unlock()
	if d == nil || !sameBytes(d.old, x.Raw) || !sameBytes(d.idx.Raw, cur) || d.n != len(x.Offs) {
		return nil, false
	}
	return d, true
}

// keepDelta keeps d as the last Delta, when both its trees are content
// ReadTreeShared keeps.
func keepDelta(d *delta) {
	if !sharedContent(d.old) || !sharedContent(d.idx.Raw) {
		return
	}
	lastDelta.mu.Lock()
	lastDelta.d = d
	lastDelta.mu.Unlock()
}

// walk walks what d walked, for x, an index of d's old content, calling
// fn at each step as Delta does.
func (d *delta) walk(x *TreeIndex, fn func(w *TreeWalk) error) (*TreeIndex, int, int, error) {
	var before, after RawEntry
	if d.i > 0 {
		before = x.Entry(d.i - 1)
	}
	if d.j < d.n {
		after = x.Entry(d.j)
	}
	shift := len(d.idx.Raw) - len(d.old)
	w := NewTreeWalk(x.Raw[d.from:d.to], d.idx.Raw[d.from:d.to+shift], before, after, uint32(d.from))
	for w.Next() {
		if fn != nil {
			if err := fn(w); err != nil {
				return nil, 0, 0, err
			}
		}
	}
	if w.Err() != nil {
		return nil, 0, 0, w.Err()
	}
	return d.idx, d.i, d.j, nil
}

// wholeEntries reports whether data is tree entries, the last ending
// where data does.
func wholeEntries(data []byte) bool {
	for len(data) > 0 {
		var ok bool
		if _, data, ok = NextRawEntry(data); !ok {
			return false
		}
	}
	return true
}

// commonPrefix is the length of what a and b share at their start.
func commonPrefix(a, b []byte) int {
	n := 0
	const chunk = 4 << 10
	for len(a)-n >= chunk && len(b)-n >= chunk && bytes.Equal(a[n:n+chunk], b[n:n+chunk]) {
		n += chunk
	}
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// commonSuffix is the length of what a and b share at their end.
func commonSuffix(a, b []byte) int {
	n := 0
	const chunk = 4 << 10
	for len(a)-n >= chunk && len(b)-n >= chunk && bytes.Equal(a[len(a)-n-chunk:len(a)-n], b[len(b)-n-chunk:len(b)-n]) {
		n += chunk
	}
	for n < len(a) && n < len(b) && a[len(a)-1-n] == b[len(b)-1-n] {
		n++
	}
	return n
}

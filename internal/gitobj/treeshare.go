package gitobj

import (
	"crypto/sha1"
	"encoding"
	"slices"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// shareAbove is the size from which ReadTreeShared shares a tree: main's
// installs/ tree is 48 MB at a million installs, 4.8 MB at 100,000; the
// trees below are read again, which costs little.
const shareAbove = 1 << 20

// shared are the large trees read last, and those being read.
var shared struct {
	mu    sync.Mutex
	calls map[plumbing.Hash]*treeCall
	// order is the ids of calls, oldest first; at most keepShared done.
	order []plumbing.Hash
}

// keepShared is how many large trees are kept: the one main had and the
// one it has.
const keepShared = 2

type treeCall struct {
	done chan struct{}
	raw  []byte
	err  error

	// marks are the SHA-1 states of the object's hash (header and
	// content) at every markSize bytes of content (hashMarks).
	marks [][]byte
	// prefix is the length of what raw shares at its start with the
	// kept tree base, compared for its hash (checkShared); base is zero
	// when it compared none. By id, not content: a tree no longer kept
	// is not kept alive.
	base   plumbing.Hash
	prefix int

	// index is raw indexed, made once by the first reader that asks
	// (ReadIndexShared) or given by one that made it (KeepIndex).
	indexOnce sync.Once
	index     *TreeIndex
	indexErr  error
}

// ReadTreeShared returns the content of the tree object h as ReadObject
// does (checked against h; a positive limit bounds its size), sharing one
// read among the readers of the same large tree in the process: when main
// moves, the render, the server's key table and its rollout controller
// each compare main's new installs/ tree with the one before, and it is
// read, inflated and hashed once. A tree is found by its id, so what is
// kept is never stale; a reader asking while another reads it waits for
// that read. The content is shared: not to be changed.
func ReadTreeShared(st storer.EncodedObjectStorer, h plumbing.Hash, limit int64) ([]byte, error) {
	shared.mu.Lock()
	if c, ok := shared.calls[h]; ok {
		shared.mu.Unlock()
		<-c.done
		if c.err == nil && (limit <= 0 || int64(len(c.raw)) <= limit) {
			return c.raw, nil
		}
		// Failed for that reader, or over this one's limit: read as
		// this reader asks.
		_, raw, err := ReadObject(st, plumbing.TreeObject, h, limit)
		return raw, err
	}
	c := &treeCall{done: make(chan struct{})}
	if shared.calls == nil {
		shared.calls = map[plumbing.Hash]*treeCall{}
	}
	shared.calls[h] = c
	shared.mu.Unlock()

	if _, c.raw, c.err = readUnchecked(st, plumbing.TreeObject, h, limit); c.err == nil {
		c.marks, c.base, c.prefix, c.err = checkShared(h, c.raw)
	}
	close(c.done)

	shared.mu.Lock()
	defer shared.mu.Unlock()
	if c.err != nil || len(c.raw) < shareAbove {
		delete(shared.calls, h)
		return c.raw, c.err
	}
	shared.order = append(shared.order, h)
	for len(shared.order) > keepShared {
		delete(shared.calls, shared.order[0])
		shared.order = shared.order[1:]
	}
	return c.raw, nil
}

// ReadIndexShared returns the tree object h read as ReadTreeShared reads
// it, indexed (IndexTree), the index shared as the content is: when main
// moves, the render, the server's key table and its rollout controller
// each take the index of main's installs/ tree, and at a million installs
// the walk that makes it is some 0.1 s. An index made from the tree before
// (TreeIndex.Delta), given to KeepIndex, is taken as it is. The index is
// not to be changed.
func ReadIndexShared(st storer.EncodedObjectStorer, h plumbing.Hash, limit int64) (*TreeIndex, error) {
	raw, err := ReadTreeShared(st, h, limit)
	if err != nil {
		return nil, err
	}
	c := sharedCall(h, raw)
	if c == nil {
		// Not kept (small, or no longer kept): indexed for this reader.
		return IndexTree(raw)
	}
	c.indexOnce.Do(func() { c.index, c.indexErr = IndexTree(c.raw) })
	return c.index, c.indexErr
}

// KeepIndex gives the index x of the tree h, made by its reader (most
// often by TreeIndex.Delta from the tree before, which walks a few
// entries where IndexTree walks them all), to the other readers of h
// (ReadIndexShared), when h is kept and x indexes the very content kept.
func KeepIndex(h plumbing.Hash, x *TreeIndex) {
	if x == nil || len(x.Raw) == 0 {
		return
	}
	c := sharedCall(h, x.Raw)
	if c == nil {
		return
	}
	c.indexOnce.Do(func() { c.index = x })
}

// sharedCall is the kept read of h when its content is raw itself (the
// same bytes in memory); nil otherwise.
func sharedCall(h plumbing.Hash, raw []byte) *treeCall {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	c, ok := shared.calls[h]
	if !ok {
		return nil
	}
	select {
	case <-c.done:
	default:
		return nil
	}
	if c.err != nil || len(c.raw) == 0 || len(c.raw) != len(raw) || &c.raw[0] != &raw[0] {
		return nil
	}
	return c
}

// sharedContent reports whether raw is the content of a tree kept here,
// read whole (the same bytes in memory).
func sharedContent(raw []byte) bool {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for _, h := range shared.order {
		if c := shared.calls[h]; c != nil && c.err == nil && sameBytes(c.raw, raw) {
			return true
		}
	}
	return false
}

// markSize is the content between two SHA-1 states kept of a shared tree:
// 41 states of some 100 bytes for main's installs/ tree at a million
// installs.
const markSize = 1 << 20

// checkShared checks that raw, read as the tree h, hashes to h, and
// returns its hash's marks, and the kept tree it compared raw with (zero
// when none) and the length of what they share at their start. The hash resumes from a kept tree's mark when
// one of the same length shares raw's bytes up to there (its header is
// then the same): a one-install change's installs/ tree is hashed from
// the megabyte before the entry that changed, where the whole 41 MB was
// some 20 ms at a million installs.
func checkShared(h plumbing.Hash, raw []byte) (marks [][]byte, base plumbing.Hash, prefix int, err error) {
	var kept *treeCall
	shared.mu.Lock()
	for _, k := range shared.order {
		if c := shared.calls[k]; c != nil && c.err == nil && len(c.raw) == len(raw) && len(c.marks) > 0 {
			kept, base = c, k
		}
	}
	shared.mu.Unlock()
	d := sha1.New()
	from, resumed := 0, false
	if kept != nil {
		prefix = commonPrefix(kept.raw, raw)
		k := min(prefix/markSize, len(kept.marks)-1)
		if err := d.(encoding.BinaryUnmarshaler).UnmarshalBinary(kept.marks[k]); err == nil {
			from, marks, resumed = k*markSize, slices.Clone(kept.marks[:k]), true
		} else {
			d.Reset()
		}
	}
	if !resumed {
		d.Write(objectHeader(plumbing.TreeObject, len(raw)))
	}
	for off := from; ; off += markSize {
		state, err := d.(encoding.BinaryMarshaler).MarshalBinary()
		if err != nil {
			return nil, plumbing.ZeroHash, 0, err
		}
		marks = append(marks, state)
		if off >= len(raw) {
			break
		}
		d.Write(raw[off:min(off+markSize, len(raw))])
	}
	var got plumbing.Hash
	d.Sum(got[:0])
	if got != h {
		return nil, plumbing.ZeroHash, 0, corrupt(h, got)
	}
	return marks, base, prefix, nil
}

// sharedPrefix is the length of what a and b share at their start when
// checkShared compared them: b the content of a tree kept here, a that of
// the kept tree its hash resumed from (the same bytes in memory); ok is
// false otherwise. Delta compares the same two trees: at a million
// installs, the 24 MB before a change in the middle compared twice.
func sharedPrefix(a, b []byte) (n int, ok bool) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for _, h := range shared.order {
		c := shared.calls[h]
		if c == nil || c.err != nil || c.base.IsZero() || !sameBytes(c.raw, b) {
			continue
		}
		base := shared.calls[c.base]
		if base == nil {
			continue
		}
		select {
		case <-base.done:
		default:
			continue // read again, not yet done
		}
		if base.err == nil && sameBytes(base.raw, a) {
			return c.prefix, true
		}
	}
	return 0, false
}

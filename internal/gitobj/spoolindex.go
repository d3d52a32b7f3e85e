package gitobj

import (
	"errors"
	"hash/maphash"

	"github.com/go-git/go-git/v5/plumbing"
)

// idxEntry is one object of a pack as its index lists it: its id, the
// CRC-32 of its entry and the entry's offset. It is 32 bytes; a spooled
// batch keeps one per object (a million for a render of 100,000
// installs), and writeIndex sorts them as they are.
type idxEntry struct {
	hash plumbing.Hash
	crc  uint32
	off  uint64
}

// spoolIndex says where each object of a spooled pack is: its records in
// the order they were written, and an open-addressing table that finds a
// record by id. It is written here rather than kept in a Go map because
// the map's cost per object grows with the number of objects: a
// map[plumbing.Hash]struct{off int64; crc, size uint32; typ int8} takes
// 18 ms for 90,000 random ids (a lookup and an insert each) and 342 ms
// for 900,000, 19 times as much for 10 times the ids, presized (406 ms)
// or split into 256 maps (430 ms) alike; at a million objects it is
// 74 MB, and each lookup is several cache and TLB misses into it (group
// control word, then slot) on a machine with 2 MB of L2 cache per core.
// Merge looks each object up twice, so the render of 100,000 installs
// spent more per object than that of 10,000 (BenchmarkSpooledBatch).
//
// Here the table is a slice of 8-byte slots, at most three quarters full
// (half full, the table of a render of 1,000,000 installs' 9 million
// objects was 268 MB, 16 times that of 100,000 installs): a record
// number and a tag, the high 32 bits of a seeded hash of the id (the
// seed keeps ids made to collide from piling up). A slot's place is the
// tag's top bits, and probing is linear, so a miss usually reads one
// cache line of the table and no record, and a hit reads one record. The
// records (idxEntry, 32 bytes) are appended in chunks, never moved, and
// are what the pack's index is sorted from. Doubling the table re-files
// each slot from its tag alone, reading the old table in order and
// writing the new one nearly in order: no record is read and no id
// hashed again. Nothing is ever removed. At a million objects the index
// is 32 MB of records and 16 MB of table, 48 MB in all against the
// map's 74.
type spoolIndex struct {
	seed maphash.Seed
	// slots holds 0 for an empty slot, else the record's number plus one
	// in its low 32 bits and its tag in the high ones. Its length is a
	// power of two, 1<<(32-shift).
	slots []uint64
	shift uint
	recs  [][]idxEntry
	n     int
}

const (
	// recChunk is how many records a chunk holds: 128 KB.
	recChunk = 1 << 12
	// minSlots is the size of the first table.
	minSlots = 1 << 10
	// maxSpooled bounds the objects of one spooled pack: a tag places a
	// slot in a table of at most 1<<32 slots, kept at most three
	// quarters full.
	maxSpooled = 1 << 31
)

// errSpoolFull is the error of an object past maxSpooled.
var errSpoolFull = errors.New("too many objects to spool")

func newSpoolIndex() *spoolIndex { return &spoolIndex{seed: maphash.MakeSeed()} }

// tag returns h's tag.
func (t *spoolIndex) tag(h plumbing.Hash) uint32 {
	return uint32(maphash.Bytes(t.seed, h[:]) >> 32)
}

// len is the number of records.
func (t *spoolIndex) len() int { return t.n }

// rec returns the i-th record.
func (t *spoolIndex) rec(i int) *idxEntry { return &t.recs[i/recChunk][i%recChunk] }

// get returns h's record.
func (t *spoolIndex) get(h plumbing.Hash) (idxEntry, bool) {
	_, r, ok := t.find(h, t.tag(h))
	if !ok {
		return idxEntry{}, false
	}
	return *t.rec(r), true
}

// has reports whether h has a record.
func (t *spoolIndex) has(h plumbing.Hash) bool {
	_, _, ok := t.find(h, t.tag(h))
	return ok
}

// find returns h's record number, or where its slot would go (-1 when
// there is no table yet).
func (t *spoolIndex) find(h plumbing.Hash, tag uint32) (slot, rec int, ok bool) {
	if len(t.slots) == 0 {
		return -1, 0, false
	}
	mask := len(t.slots) - 1
	for i := int(tag >> t.shift); ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return i, 0, false
		}
		if uint32(s>>32) == tag {
			if r := int(uint32(s)) - 1; t.rec(r).hash == h {
				return i, r, true
			}
		}
	}
}

// insert files e at slot, which find returned for e's id and tag, with
// nothing inserted since. The caller keeps to maxSpooled records.
func (t *spoolIndex) insert(slot int, tag uint32, e idxEntry) {
	if 4*(t.n+1) > 3*len(t.slots) {
		t.grow()
		slot = t.free(tag)
	}
	if len(t.recs) == 0 || len(t.recs[len(t.recs)-1]) == recChunk {
		t.recs = append(t.recs, make([]idxEntry, 0, recChunk))
	}
	last := &t.recs[len(t.recs)-1]
	*last = append(*last, e)
	t.n++
	t.slots[slot] = uint64(tag)<<32 | uint64(t.n)
}

// free returns the first empty slot from tag's place.
func (t *spoolIndex) free(tag uint32) int {
	mask := len(t.slots) - 1
	i := int(tag >> t.shift)
	for t.slots[i] != 0 {
		i = (i + 1) & mask
	}
	return i
}

// grow doubles the table, re-filing each slot by its tag.
func (t *spoolIndex) grow() {
	old := t.slots
	size := max(2*len(old), minSlots)
	t.slots = make([]uint64, size)
	t.shift = 32
	for 1<<(32-t.shift) < size {
		t.shift--
	}
	for _, s := range old {
		if s != 0 {
			t.slots[t.free(uint32(s>>32))] = s
		}
	}
}

// entries returns the records in the order they were written.
func (t *spoolIndex) entries() [][]idxEntry { return t.recs }

// dropTable frees the table once no object is looked up any more; the
// records stay.
func (t *spoolIndex) dropTable() { t.slots, t.shift = nil, 0 }

package gitobj

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-cmp/cmp"
)

// putTagged files e under tag unless its id has a record, as spool.write
// does, and reports whether it did.
func putTagged(ix *spoolIndex, e idxEntry, tag uint32) bool {
	slot, _, ok := ix.find(e.hash, tag)
	if ok {
		return false
	}
	ix.insert(slot, tag, e)
	return true
}

// checkAgainst checks ix against want, the map it stands for: the same
// number of records, each id found with its entry, the records in the
// order written, the table at most three quarters full, and every miss a
// miss.
func checkAgainst(t *testing.T, ix *spoolIndex, want map[plumbing.Hash]idxEntry, order []plumbing.Hash, misses []plumbing.Hash, tag func(plumbing.Hash) uint32) {
	t.Helper()
	if ix.len() != len(want) {
		t.Fatalf("len = %d, want %d", ix.len(), len(want))
	}
	if 4*ix.len() > 3*len(ix.slots) {
		t.Fatalf("%d records in %d slots: more than three quarters full", ix.len(), len(ix.slots))
	}
	for h, w := range want {
		_, r, ok := ix.find(h, tag(h))
		if !ok {
			t.Fatalf("%s not found", h)
		}
		if diff := cmp.Diff(w, *ix.rec(r), cmp.AllowUnexported(idxEntry{})); diff != "" {
			t.Fatalf("%s (-want +got):\n%s", h, diff)
		}
	}
	for _, h := range misses {
		if _, ok := want[h]; ok {
			continue
		}
		if _, _, ok := ix.find(h, tag(h)); ok {
			t.Fatalf("%s found, never filed", h)
		}
	}
	i := 0
	for _, c := range ix.entries() {
		for _, e := range c {
			if e.hash != order[i] {
				t.Fatalf("record %d is %s, want %s (the order written)", i, e.hash, order[i])
			}
			i++
		}
	}
	if i != len(order) {
		t.Fatalf("%d records, want %d", i, len(order))
	}
}

// TestSpoolIndexAsMap files ids into a spoolIndex and a map side by side,
// each id twice (the second time it is found, not filed), through several
// doublings of the table, and checks that they agree: random ids, ids
// that share all but their last bytes, and ids whose tags are forced to
// collide (one tag for all, a handful for all, so that every probe meets
// slots of the same tag and must compare ids).
func TestSpoolIndexAsMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(int) plumbing.Hash {
		var h plumbing.Hash
		for k := range h {
			h[k] = byte(rng.Uint32())
		}
		return h
	}
	sharedPrefix := func(i int) plumbing.Hash {
		var h plumbing.Hash
		for k := range h {
			h[k] = 0xee
		}
		h[18], h[19] = byte(i>>8), byte(i)
		return h
	}
	zeroSuffix := func(i int) plumbing.Hash {
		var h plumbing.Hash
		h[0], h[1], h[2] = byte(i>>16), byte(i>>8), byte(i)
		return h
	}
	for _, tc := range []struct {
		name string
		n    int
		id   func(int) plumbing.Hash
		// tag, when set, replaces the seeded hash.
		tag func(plumbing.Hash) uint32
	}{
		{name: "empty", n: 0, id: random},
		{name: "one", n: 1, id: random},
		{name: "random, five doublings", n: 10_000, id: random},
		{name: "all but the last two bytes shared", n: 10_000, id: sharedPrefix},
		{name: "first three bytes differ, the rest zero", n: 10_000, id: zeroSuffix},
		{name: "one tag for all", n: 1500, id: random, tag: func(plumbing.Hash) uint32 { return 0xdeadbeef }},
		{name: "tags at the top of the table", n: 3000, id: random, tag: func(h plumbing.Hash) uint32 { return 0xffffff00 | uint32(h[0]&3) }},
		{name: "tags that share their top bits", n: 2000, id: random, tag: func(h plumbing.Hash) uint32 { return uint32(h[0]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := newSpoolIndex()
			tag := tc.tag
			if tag == nil {
				tag = ix.tag
			}
			want := map[plumbing.Hash]idxEntry{}
			var order, misses []plumbing.Hash
			sizes := map[int]bool{}
			for i := range tc.n {
				h := tc.id(i)
				e := idxEntry{hash: h, crc: rng.Uint32(), off: rng.Uint64()}
				if got := putTagged(ix, e, tag(h)); !got {
					t.Fatalf("%s filed as if already there", h)
				}
				want[h] = e
				order = append(order, h)
				sizes[len(ix.slots)] = true
				// Again, with another entry: the first stays.
				if got := putTagged(ix, idxEntry{hash: h, off: 1}, tag(h)); got {
					t.Fatalf("%s filed twice", h)
				}
				misses = append(misses, tc.id(tc.n+i), random(0))
			}
			checkAgainst(t, ix, want, order, misses, tag)
			if tc.n >= 10_000 && len(sizes) < 5 {
				t.Errorf("the table took sizes %v: want at least five", sizes)
			}
		})
	}
}

// TestSpoolIndexMissWithCollidingTag looks up ids absent from the table
// whose tags are those of ids present: each probe meets a slot of its tag
// and must read the record to tell the ids apart.
func TestSpoolIndexMissWithCollidingTag(t *testing.T) {
	ix := newSpoolIndex()
	present := []plumbing.Hash{plumbing.NewHash("1111111111111111111111111111111111111111"), plumbing.NewHash("2222222222222222222222222222222222222222")}
	absent := plumbing.NewHash("3333333333333333333333333333333333333333")
	for i, h := range present {
		putTagged(ix, idxEntry{hash: h, off: uint64(i)}, 7)
	}
	if _, _, ok := ix.find(absent, 7); ok {
		t.Fatalf("%s found under the tag of %v", absent, present)
	}
	for i, h := range present {
		if _, r, ok := ix.find(h, 7); !ok || ix.rec(r).off != uint64(i) {
			t.Fatalf("%s: record %d, %v", h, r, ok)
		}
	}
	// Under its own seeded tag, as spool.write files it.
	if ix.has(absent) {
		t.Fatalf("%s found", absent)
	}
}

// TestSpoolIndexDropTable: once the table is dropped, the records stay
// for the pack's index and nothing is found.
func TestSpoolIndexDropTable(t *testing.T) {
	ix := newSpoolIndex()
	h := plumbing.NewHash("1111111111111111111111111111111111111111")
	putTagged(ix, idxEntry{hash: h}, ix.tag(h))
	ix.dropTable()
	if ix.has(h) || ix.len() != 1 || len(ix.entries()) != 1 {
		t.Fatalf("after dropTable: has %v, len %d, %d chunks", ix.has(h), ix.len(), len(ix.entries()))
	}
}

// TestSpoolWritesOnce: an object written to the spool twice, as two
// merges that both found it missing before compressing it write it, is
// in the pack once.
func TestSpoolWritesOnce(t *testing.T) {
	repo, err := git.PlainInit(filepath.Join(t.TempDir(), "repo.git"), true)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewSpooledBatch(repo.Storer)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	content := []byte("once\n")
	h := Hash(plumbing.BlobObject, content)
	o := newObject{data: content, size: len(content), typ: plumbing.BlobObject}.deflate()
	for range 2 {
		if err := b.spool.write(h, o); err != nil {
			t.Fatal(err)
		}
	}
	if b.spool.index.len() != 1 || b.Len() != 1 {
		t.Fatalf("%d records, Len %d: want 1", b.spool.index.len(), b.Len())
	}
	if want := int64(packHeaderSize + 1 + len(o.data)); b.spool.off != want {
		t.Fatalf("the pack is %d bytes, want %d: one entry", b.spool.off, want)
	}
	if typ, got, ok := b.Get(h); !ok || typ != plumbing.BlobObject || string(got) != "once\n" {
		t.Fatalf("Get = %v %q %v", typ, got, ok)
	}
}

package gitobj

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/storage/memory"
)

// bigTree stores a tree of n files, tagged so that each test's tree is
// its own, and returns its id and content.
func bigTree(t *testing.T, st *memory.Storage, tag string, n int) (plumbing.Hash, []byte) {
	t.Helper()
	es := make([]Entry, n)
	for i := range es {
		es[i] = Entry{Name: fmt.Sprintf("%s-%07d.yaml", tag, i), Mode: filemode.Regular}
	}
	raw := EncodeTree(es)
	o := st.NewEncodedObject()
	o.SetType(plumbing.TreeObject)
	w, _ := o.Writer()
	w.Write(raw)
	w.Close()
	h, err := st.SetEncodedObject(o)
	if err != nil {
		t.Fatal(err)
	}
	return h, raw
}

// TestReadTreeShared: a large tree is read once for its readers, at once
// or one after the other, and only the last two are kept; a small tree,
// a tree over a reader's limit and a missing one are each read as asked.
func TestReadTreeShared(t *testing.T) {
	st := memory.NewStorage()
	h1, raw1 := bigTree(t, st, "shared-a", 40_000) // some 1.6 MB
	var wg sync.WaitGroup
	got := make([][]byte, 4)
	for i := range got {
		wg.Go(func() {
			raw, err := ReadTreeShared(st, h1, 0)
			if err != nil {
				t.Error(err)
			}
			got[i] = raw
		})
	}
	wg.Wait()
	for i, raw := range got {
		if !bytes.Equal(raw, raw1) || &raw[0] != &got[0][0] {
			t.Fatalf("reader %d: not the one read of the tree", i)
		}
	}
	if _, err := ReadTreeShared(st, h1, 1000); err == nil {
		t.Error("a tree over the reader's limit was given")
	}
	// Two more large trees: the first is dropped.
	h2, _ := bigTree(t, st, "shared-b", 40_000)
	h3, _ := bigTree(t, st, "shared-c", 40_000)
	for _, h := range []plumbing.Hash{h2, h3} {
		if _, err := ReadTreeShared(st, h, 0); err != nil {
			t.Fatal(err)
		}
	}
	again, err := ReadTreeShared(st, h1, 0)
	if err != nil || !bytes.Equal(again, raw1) || &again[0] == &got[0][0] {
		t.Error("the third tree back was not read again")
	}
	small, rawSmall := bigTree(t, st, "shared-small", 3)
	a, _ := ReadTreeShared(st, small, 0)
	b, _ := ReadTreeShared(st, small, 0)
	if !bytes.Equal(a, rawSmall) || &a[0] == &b[0] {
		t.Error("a small tree was kept")
	}
	if _, err := ReadTreeShared(st, plumbing.NewHash("1111111111111111111111111111111111111111"), 0); err == nil {
		t.Error("a missing tree read")
	}
}

// TestReadIndexShared: a large tree's index is made once for its readers
// and is the index of the content they share; an index a reader made
// from the tree before (Delta), given to KeepIndex, is the one the others
// get; an index of other bytes, or of a tree not kept, is not taken.
func TestReadIndexShared(t *testing.T) {
	st := memory.NewStorage()
	h1, raw1 := bigTree(t, st, "index-a", 40_000)
	x, err := ReadIndexShared(st, h1, 0)
	if err != nil {
		t.Fatal(err)
	}
	want, err := IndexTree(raw1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(x.Offs, want.Offs) || !bytes.Equal(x.Raw, raw1) {
		t.Fatal("the shared index is not the tree's")
	}
	if y, _ := ReadIndexShared(st, h1, 0); y != x {
		t.Error("the index was made again")
	}
	raw, _ := ReadTreeShared(st, h1, 0)
	if &raw[0] != &x.Raw[0] {
		t.Error("the index is not of the content shared")
	}

	// The next tree, one entry changed: its index from Delta is kept.
	es := make([]Entry, 40_000)
	for i := range es {
		es[i] = Entry{Name: fmt.Sprintf("%s-%07d.yaml", "index-a", i), Mode: filemode.Regular}
	}
	es[20_000].Hash = plumbing.NewHash("2222222222222222222222222222222222222222")
	h2 := storeTree(t, st, EncodeTree(es))
	raw2, err := ReadTreeShared(st, h2, 0)
	if err != nil {
		t.Fatal(err)
	}
	KeepIndex(h2, &TreeIndex{Raw: bytes.Clone(raw2), Offs: want.Offs})
	d, i, j, err := x.Delta(raw2, nil)
	if err != nil || j-i != 1 {
		t.Fatalf("Delta: %v, entries [%d, %d)", err, i, j)
	}
	KeepIndex(h2, d)
	if y, err := ReadIndexShared(st, h2, 0); err != nil || y != d {
		t.Errorf("the index kept is not the one given (%v)", err)
	}
	KeepIndex(h2, want) // of other bytes: not taken
	if y, _ := ReadIndexShared(st, h2, 0); y != d {
		t.Error("an index of other bytes replaced the one kept")
	}
	small, rawSmall := bigTree(t, st, "index-small", 3)
	if s, err := ReadIndexShared(st, small, 0); err != nil || s.Len() != 3 || !bytes.Equal(s.Raw, rawSmall) {
		t.Errorf("a small tree's index: %v", err)
	}
}

// storeTree stores the tree object content raw and returns its id.
func storeTree(t *testing.T, st *memory.Storage, raw []byte) plumbing.Hash {
	t.Helper()
	o := st.NewEncodedObject()
	o.SetType(plumbing.TreeObject)
	w, _ := o.Writer()
	w.Write(raw)
	w.Close()
	h, err := st.SetEncodedObject(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestReadTreeSharedResumes: a tree of the length of a kept one is
// hashed from the kept tree's mark before their first differing byte, to
// the hash of its whole content: trees that differ in their first
// megabyte, in a later one, in their last byte, and not at all; a tree
// whose stored content was altered is refused whatever it shares.
func TestReadTreeSharedResumes(t *testing.T) {
	st := memory.NewStorage()
	es := make([]Entry, 90_000) // some 3.5 MB: three marks and a part
	for i := range es {
		es[i] = Entry{Name: fmt.Sprintf("resume-%07d.yaml", i), Mode: filemode.Regular}
	}
	base := EncodeTree(es)
	if _, err := ReadTreeShared(st, storeTree(t, st, base), 0); err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{5, 100, 45_000, 89_999} {
		es[at].Hash = plumbing.NewHash("3333333333333333333333333333333333333333")
		raw := EncodeTree(es)
		if len(raw) != len(base) {
			t.Fatal("not the same length")
		}
		got, err := ReadTreeShared(st, storeTree(t, st, raw), 0)
		if err != nil || !bytes.Equal(got, raw) {
			t.Fatalf("entry %d changed: %v", at, err)
		}
	}
	// A tree stored under the id of other content: its hash is checked
	// from the mark, and found wrong.
	es[60_000].Hash = plumbing.NewHash("4444444444444444444444444444444444444444")
	good := EncodeTree(es)
	bad := bytes.Clone(good)
	bad[len(bad)-5] ^= 1
	h := Hash(plumbing.TreeObject, good)
	o := st.NewEncodedObject()
	o.SetType(plumbing.TreeObject)
	w, _ := o.Writer()
	w.Write(bad)
	w.Close()
	st.Objects[h] = o
	if _, err := ReadTreeShared(st, h, 0); err == nil {
		t.Error("a tree whose content is not its id's was read")
	}
}

// TestSharedPrefix: the start a shared tree shares with the kept tree its
// hash resumed from is given for those two trees alone (the same bytes in
// memory), is what commonPrefix says, and Delta from an index of the old
// one gives what it gives from copies; once the old tree is no longer
// kept, nothing is given.
func TestSharedPrefix(t *testing.T) {
	st := memory.NewStorage()
	es := make([]Entry, 60_000)
	for i := range es {
		es[i] = Entry{Name: fmt.Sprintf("prefix-%07d.yaml", i), Mode: filemode.Regular}
	}
	old, err := ReadTreeShared(st, storeTree(t, st, EncodeTree(es)), 0)
	if err != nil {
		t.Fatal(err)
	}
	es[31_000].Hash = plumbing.NewHash("5555555555555555555555555555555555555555")
	cur, err := ReadTreeShared(st, storeTree(t, st, EncodeTree(es)), 0)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := sharedPrefix(old, cur)
	if !ok || p != commonPrefix(old, cur) {
		t.Fatalf("sharedPrefix = %d %v, commonPrefix %d", p, ok, commonPrefix(old, cur))
	}
	for _, pair := range [][2][]byte{{bytes.Clone(old), cur}, {old, bytes.Clone(cur)}, {cur, old}} {
		if _, ok := sharedPrefix(pair[0], pair[1]); ok {
			t.Error("a prefix given for other bytes")
		}
	}
	x, err := IndexTree(old)
	if err != nil {
		t.Fatal(err)
	}
	y, err := IndexTree(bytes.Clone(old))
	if err != nil {
		t.Fatal(err)
	}
	got, gi, gj, err := x.Delta(cur, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, wi, wj, err := y.Delta(bytes.Clone(cur), nil)
	if err != nil {
		t.Fatal(err)
	}
	if gi != wi || gj != wj || !slices.Equal(got.Offs, want.Offs) {
		t.Fatalf("Delta of shared trees [%d, %d), of copies [%d, %d)", gi, gj, wi, wj)
	}
	// Two more large trees: old is no longer kept.
	for _, tag := range []string{"prefix-b", "prefix-c"} {
		h, _ := bigTree(t, st, tag, 40_000)
		if _, err := ReadTreeShared(st, h, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := sharedPrefix(old, cur); ok {
		t.Error("a prefix given for a tree no longer kept")
	}
}

package gitobj

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/google/go-cmp/cmp"
)

// change is one name of a tree diff: its kind and the entries before and
// after, as "mode name id-byte" ("" when absent).
type change struct {
	key      string // name, "/" after a folder's
	old, cur string
}

func show(e RawEntry) string {
	if e.IsZero() {
		return ""
	}
	return fmt.Sprintf("%o %s %s", uint32(e.Mode), e.Name, e.Hash())
}

// keyOf is how a map-based diff tells entries apart: by name and kind.
func keyOf(e RawEntry) string {
	if e.Mode == filemode.Dir {
		return string(e.Name) + "/"
	}
	return string(e.Name)
}

// walkDiff is the merge walk's changes, sorted by key.
func walkDiff(old, cur []byte) ([]change, error) {
	var out []change
	w := NewTreeWalk(old, cur, RawEntry{}, RawEntry{}, 0)
	for w.Next() {
		if w.Same() {
			continue
		}
		k := keyOf(w.Old)
		if w.Old.IsZero() {
			k = keyOf(w.Cur)
		}
		out = append(out, change{k, show(w.Old), show(w.Cur)})
	}
	slices.SortFunc(out, func(a, b change) int { return bytes.Compare([]byte(a.key), []byte(b.key)) })
	return out, w.Err()
}

// parseAll reads every entry of a tree object; false when it is not
// well formed.
func parseAll(raw []byte) ([]RawEntry, bool) {
	var es []RawEntry
	for len(raw) > 0 {
		e, rest, ok := NextRawEntry(raw)
		if !ok {
			return nil, false
		}
		es = append(es, e)
		raw = rest
	}
	return es, true
}

// ordered reports whether es are each once in git's order, by the
// string comparison of CompareEntries.
func ordered(es []RawEntry) bool {
	for i := 1; i < len(es); i++ {
		a := Entry{Name: string(es[i-1].Name), Mode: es[i-1].Mode}
		b := Entry{Name: string(es[i].Name), Mode: es[i].Mode}
		if CompareEntries(a, b) >= 0 {
			return false
		}
	}
	return true
}

// mapDiff is the changes between two trees through maps of their
// entries: what the merge walk must say without building them.
func mapDiff(old, cur []RawEntry) []change {
	om, cm := map[string]RawEntry{}, map[string]RawEntry{}
	for _, e := range old {
		om[keyOf(e)] = e
	}
	for _, e := range cur {
		cm[keyOf(e)] = e
	}
	var out []change
	for k, o := range om {
		if c, ok := cm[k]; !ok || !bytes.Equal(o.Raw, c.Raw) {
			out = append(out, change{k, show(o), show(c)})
		}
	}
	for k, c := range cm {
		if _, ok := om[k]; !ok {
			out = append(out, change{k, "", show(c)})
		}
	}
	slices.SortFunc(out, func(a, b change) int { return bytes.Compare([]byte(a.key), []byte(b.key)) })
	return out
}

// tree writes entries "name" (a file) or "name/" (a folder) with the id
// whose every byte is ids[entry], in git's order.
func tree(ids map[string]byte) []byte {
	var es []Entry
	for _, k := range slices.Sorted(maps.Keys(ids)) {
		e := Entry{Name: k, Mode: filemode.Regular}
		if name, ok := bytes.CutSuffix([]byte(k), []byte("/")); ok {
			e = Entry{Name: string(name), Mode: filemode.Dir}
		}
		copy(e.Hash[:], bytes.Repeat([]byte{ids[k]}, len(plumbing.ZeroHash)))
		es = append(es, e)
	}
	return EncodeTree(es)
}

func id(b byte) string { return fmt.Sprintf("%x", bytes.Repeat([]byte{b}, 20)) }

// TestTreeWalk: the changes between two installs/ trees, by kind.
func TestTreeWalk(t *testing.T) {
	base := map[string]byte{"a.yaml": 1, "b.yaml": 2, "c.yaml": 3}
	with := func(m map[string]byte, set map[string]byte, drop ...string) map[string]byte {
		out := maps.Clone(m)
		maps.Copy(out, set)
		for _, k := range drop {
			delete(out, k)
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		old, cur []byte
		want     []change
	}{
		{"same", tree(base), tree(base), nil},
		{"added", tree(base), tree(with(base, map[string]byte{"bb.yaml": 9})),
			[]change{{"bb.yaml", "", "100644 bb.yaml " + id(9)}}},
		{"added first and last", tree(base), tree(with(base, map[string]byte{"0.yaml": 8, "z.yaml": 9})),
			[]change{{"0.yaml", "", "100644 0.yaml " + id(8)}, {"z.yaml", "", "100644 z.yaml " + id(9)}}},
		{"removed", tree(base), tree(with(base, nil, "b.yaml")),
			[]change{{"b.yaml", "100644 b.yaml " + id(2), ""}}},
		{"renamed", tree(base), tree(with(base, map[string]byte{"d.yaml": 2}, "b.yaml")),
			[]change{{"b.yaml", "100644 b.yaml " + id(2), ""}, {"d.yaml", "", "100644 d.yaml " + id(2)}}},
		{"same name, new blob", tree(base), tree(with(base, map[string]byte{"b.yaml": 7})),
			[]change{{"b.yaml", "100644 b.yaml " + id(2), "100644 b.yaml " + id(7)}}},
		{"not yaml", tree(with(base, map[string]byte{"README.md": 4, ".gitkeep": 5})), tree(with(base, map[string]byte{"README.md": 6, ".gitkeep": 5})),
			[]change{{"README.md", "100644 README.md " + id(4), "100644 README.md " + id(6)}}},
		{"a subtree changed", tree(with(base, map[string]byte{"sub/": 4})), tree(with(base, map[string]byte{"sub/": 5})),
			[]change{{"sub/", "40000 sub " + id(4), "40000 sub " + id(5)}}},
		{"a file becomes a folder", tree(base), tree(with(base, map[string]byte{"b.yaml/": 2}, "b.yaml")),
			[]change{{"b.yaml", "100644 b.yaml " + id(2), ""}, {"b.yaml/", "", "40000 b.yaml " + id(2)}}},
		// "a-" sorts between the file "a" and the folder "a" (as "a/").
		{"folder and file around a dash", tree(map[string]byte{"a": 1, "a-": 2}), tree(map[string]byte{"a/": 1, "a-": 2}),
			[]change{{"a", "100644 a " + id(1), ""}, {"a/", "", "40000 a " + id(1)}}},
		{"nil old", nil, tree(base), []change{
			{"a.yaml", "", "100644 a.yaml " + id(1)}, {"b.yaml", "", "100644 b.yaml " + id(2)}, {"c.yaml", "", "100644 c.yaml " + id(3)}}},
		{"empty old", []byte{}, tree(map[string]byte{"a.yaml": 1}), []change{{"a.yaml", "", "100644 a.yaml " + id(1)}}},
		{"all gone", tree(map[string]byte{"a.yaml": 1}), nil, []change{{"a.yaml", "100644 a.yaml " + id(1), ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := walkDiff(tc.old, tc.cur)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(change{})); diff != "" {
				t.Errorf("walk (-want +got):\n%s", diff)
			}
			// The delta of an index says the same, and indexes cur.
			x, err := IndexTree(tc.old)
			if err != nil {
				t.Fatal(err)
			}
			var delta []change
			idx, _, _, err := x.Delta(tc.cur, func(w *TreeWalk) error {
				if !w.Same() {
					k := keyOf(w.Old)
					if w.Old.IsZero() {
						k = keyOf(w.Cur)
					}
					delta = append(delta, change{k, show(w.Old), show(w.Cur)})
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			slices.SortFunc(delta, func(a, b change) int { return bytes.Compare([]byte(a.key), []byte(b.key)) })
			if diff := cmp.Diff(tc.want, delta, cmp.AllowUnexported(change{})); diff != "" {
				t.Errorf("delta (-want +got):\n%s", diff)
			}
			whole, err := IndexTree(tc.cur)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(idx.Offs, whole.Offs) {
				t.Errorf("delta's offsets %v, a whole index's %v", idx.Offs, whole.Offs)
			}
		})
	}
}

// TestTreeWalkRefuses: entries out of order, twice, or malformed, in
// either tree, stop the walk with an error rather than a wrong diff.
func TestTreeWalkRefuses(t *testing.T) {
	good := tree(map[string]byte{"a.yaml": 1, "b.yaml": 2})
	ba := append(slices.Clone(good[len(good)/2:]), good[:len(good)/2]...)
	twice := append(slices.Clone(good), good[len(good)/2:]...)
	for _, tc := range []struct {
		name     string
		old, cur []byte
		order    bool
	}{
		{"cur out of order", good, ba, true},
		{"old out of order", ba, good, true},
		{"cur twice", good, twice, true},
		{"old twice", twice, good, true},
		{"truncated", good, good[:len(good)-1], false},
		{"no mode", good, []byte(" a\x00" + string(make([]byte, 20))), false},
		{"empty name", good, []byte("100644 \x00" + string(make([]byte, 20))), false},
		{"bad mode", good, []byte("10064x a\x00" + string(make([]byte, 20))), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := walkDiff(tc.old, tc.cur)
			if err == nil {
				t.Fatal("no error")
			}
			if tc.order != errors.Is(err, ErrTreeOrder) {
				t.Errorf("error %v: ErrTreeOrder %v, want %v", err, errors.Is(err, ErrTreeOrder), tc.order)
			}
		})
	}
}

// TestTreeIndexFind finds each entry by name and kind, and no other.
func TestTreeIndexFind(t *testing.T) {
	x, err := IndexTree(tree(map[string]byte{"a": 1, "a-": 2, "a/": 3, "b.yaml": 4, "README.md": 5}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		dir  bool
		want byte
	}{
		{"a", false, 1}, {"a-", false, 2}, {"a", true, 3}, {"b.yaml", false, 4}, {"README.md", false, 5},
		{"b", false, 0}, {"b.yaml", true, 0}, {"", false, 0}, {"zz", false, 0},
	} {
		e, ok := x.Find(tc.name, tc.dir)
		if ok != (tc.want != 0) || ok && e.Hash()[0] != tc.want {
			t.Errorf("Find(%q, %v) = %s, %v", tc.name, tc.dir, show(e), ok)
		}
	}
}

// FuzzTreeWalk compares the merge walk with a diff through maps of both
// trees: for two well-formed trees in git's order they say the same, and
// so does an index's delta (whose index is cur's); for any other input
// the walk and the delta report an error, never a diff.
func FuzzTreeWalk(f *testing.F) {
	base := tree(map[string]byte{"a.yaml": 1, "b.yaml": 2, "c.yaml": 3, "README.md": 4})
	f.Add(base, tree(map[string]byte{"a.yaml": 1, "c.yaml": 3, "README.md": 4}))
	f.Add(base, tree(map[string]byte{"a.yaml": 1, "b.yaml": 9, "c.yaml": 3, "d/": 4}))
	f.Add(tree(map[string]byte{"a": 1, "a-": 2}), tree(map[string]byte{"a/": 1, "a-": 2}))
	f.Add(base, bytes.Replace(base, []byte("b.yaml"), []byte("b.yam\x00"), 1))
	f.Add(base, []byte{})
	f.Add([]byte{}, base)
	f.Fuzz(func(t *testing.T, old, cur []byte) {
		oes, oOK := parseAll(old)
		ces, cOK := parseAll(cur)
		valid := oOK && cOK && ordered(oes) && ordered(ces)
		got, err := walkDiff(old, cur)
		if valid != (err == nil) {
			t.Fatalf("walk error %v for trees that are valid: %v", err, valid)
		}
		if !valid {
			return
		}
		want := mapDiff(oes, ces)
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(change{})); diff != "" {
			t.Fatalf("walk differs from a map diff (-map +walk):\n%s", diff)
		}
		x, err := IndexTree(old)
		if err != nil {
			t.Fatal(err)
		}
		var delta []change
		idx, _, _, err := x.Delta(cur, func(w *TreeWalk) error {
			if !w.Same() {
				k := keyOf(w.Old)
				if w.Old.IsZero() {
					k = keyOf(w.Cur)
				}
				delta = append(delta, change{k, show(w.Old), show(w.Cur)})
			}
			return nil
		})
		if err != nil {
			t.Fatalf("delta of valid trees: %v", err)
		}
		slices.SortFunc(delta, func(a, b change) int { return bytes.Compare([]byte(a.key), []byte(b.key)) })
		if diff := cmp.Diff(want, delta, cmp.AllowUnexported(change{})); diff != "" {
			t.Fatalf("delta differs from a map diff (-map +delta):\n%s", diff)
		}
		whole, _ := IndexTree(cur)
		if !slices.Equal(idx.Offs, whole.Offs) || !bytes.Equal(idx.Raw, cur) {
			t.Fatalf("delta's offsets %v, a whole index's %v", idx.Offs, whole.Offs)
		}
	})
}

// FuzzTreeIndexDelta: for a valid old tree and any cur, the delta
// succeeds exactly when cur is a valid tree.
func FuzzTreeIndexDelta(f *testing.F) {
	base := tree(map[string]byte{"a.yaml": 1, "b.yaml": 2, "c.yaml": 3})
	f.Add(base, bytes.Replace(base, []byte("b.yaml"), []byte("d.yaml"), 1))
	f.Add(base, base[:len(base)-3])
	f.Fuzz(func(t *testing.T, old, cur []byte) {
		x, err := IndexTree(old)
		if err != nil {
			return
		}
		ces, ok := parseAll(cur)
		valid := ok && ordered(ces)
		var steps [2][]string
		step := func(k int) func(w *TreeWalk) error {
			return func(w *TreeWalk) error {
				steps[k] = append(steps[k], fmt.Sprintf("%q %q %d", w.Old.Raw, w.Cur.Raw, w.CurOff))
				return nil
			}
		}
		idx, i, j, err := x.Delta(cur, step(0))
		if valid != (err == nil) {
			t.Fatalf("delta error %v; cur valid: %v", err, valid)
		}
		// Again from another index of the same content: the Delta kept,
		// the same steps and index.
		y, _ := IndexTree(old)
		idx2, i2, j2, err2 := y.Delta(cur, step(1))
		if (err == nil) != (err2 == nil) || i != i2 || j != j2 || !slices.Equal(steps[0], steps[1]) {
			t.Fatalf("again: [%d, %d) %v, %d steps; first [%d, %d) %v, %d steps", i2, j2, err2, len(steps[1]), i, j, err, len(steps[0]))
		}
		if err == nil && !slices.Equal(idx.Offs, idx2.Offs) {
			t.Fatal("again: another index")
		}
	})
}

// TestTreeIndexDeltaKept: a Delta of the same two shared trees
// (ReadTreeShared) from another index of the first takes the Delta kept
// (the same index made) and walks the same steps; of a copy of either
// tree, which its owner may change, it is done again, to the same result.
func TestTreeIndexDeltaKept(t *testing.T) {
	names := map[string]byte{}
	for i := range 40_000 { // over shareAbove
		names[fmt.Sprintf("kept-%05d.yaml", i)] = byte(i)
	}
	st := memory.NewStorage()
	read := func(raw []byte) []byte {
		shared, err := ReadTreeShared(st, storeTree(t, st, raw), 0)
		if err != nil {
			t.Fatal(err)
		}
		return shared
	}
	old := read(tree(names))
	names["kept-01500.yaml"] = 0xee
	names["kept-01501.yaml+"] = 1
	cur := read(tree(names))
	walk := func(x *TreeIndex, cur []byte) (*TreeIndex, []string) {
		t.Helper()
		var steps []string
		idx, _, _, err := x.Delta(cur, func(w *TreeWalk) error {
			if !w.Same() {
				steps = append(steps, string(w.Old.Name)+"|"+string(w.Cur.Name))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return idx, steps
	}
	a, _ := IndexTree(old)
	b, _ := IndexTree(old)
	first, steps := walk(a, cur)
	if want := []string{"kept-01500.yaml|kept-01500.yaml", "|kept-01501.yaml+"}; !slices.Equal(steps, want) {
		t.Fatalf("steps %q, want %q", steps, want)
	}
	again, steps2 := walk(b, cur)
	if again != first || !slices.Equal(steps, steps2) {
		t.Error("a Delta of the same trees from another index was done again, or walked other steps")
	}
	for name, c := range map[string][2][]byte{"old copied": {bytes.Clone(old), cur}, "cur copied": {old, bytes.Clone(cur)}} {
		x, _ := IndexTree(c[0])
		idx, s := walk(x, c[1])
		if idx == first || !slices.Equal(idx.Offs, first.Offs) || !slices.Equal(s, steps) {
			t.Errorf("%s: taken from the Delta kept, or another result", name)
		}
	}
}

// FuzzCompareNames: CompareEntries and CompareRaw order two entries as
// git spells them (a folder's name with a trailing "/"), the same way.
func FuzzCompareNames(f *testing.F) {
	f.Add("a", false, "a-", false)
	f.Add("a", true, "a-", false)
	f.Add("a", true, "a", true)
	f.Add("a.yaml", false, "a", true)
	f.Fuzz(func(t *testing.T, a string, aDir bool, b string, bDir bool) {
		if strings.ContainsAny(a+b, "/\x00") {
			return
		}
		mode := func(dir bool) filemode.FileMode {
			if dir {
				return filemode.Dir
			}
			return filemode.Regular
		}
		spell := func(name string, dir bool) string {
			if dir {
				return name + "/"
			}
			return name
		}
		sign := func(c int) int { return min(max(c, -1), 1) }
		want := strings.Compare(spell(a, aDir), spell(b, bDir))
		got := sign(CompareEntries(Entry{Name: a, Mode: mode(aDir)}, Entry{Name: b, Mode: mode(bDir)}))
		raw := sign(CompareRaw(RawEntry{Name: []byte(a), Mode: mode(aDir)}, RawEntry{Name: []byte(b), Mode: mode(bDir)}))
		if got != want || raw != want {
			t.Fatalf("%q dir %t vs %q dir %t: entries %d, raw %d, git %d", a, aDir, b, bDir, got, raw, want)
		}
	})
}

package renderer

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-cmp/cmp"
)

// rawTreeOf writes entries (name to the byte every id byte is) as a tree
// object's content, in the order given.
func rawTreeOf(names []string, ids map[string]byte) []byte {
	var b bytes.Buffer
	for _, name := range names {
		fmt.Fprintf(&b, "100644 %s\x00", name)
		b.Write(bytes.Repeat([]byte{ids[name]}, len(plumbing.ZeroHash)))
	}
	return b.Bytes()
}

// indexOf indexes raw as a whole walk does, or nil.
func indexOf(raw []byte) *rawIndex {
	offs, _, n, ok := diffRaw(nil, raw, rawEntry{}, rawEntry{}, 0, &sourceChange{changed: map[string]bool{}}, nil)
	if !ok {
		return nil
	}
	return &rawIndex{raw: raw, offs: offs, installs: n}
}

// checkDelta compares what x.delta says of cur with what walking both
// trees whole says: when the delta places the change, both say the same.
func checkDelta(t *testing.T, x *rawIndex, cur []byte) (placed bool) {
	t.Helper()
	got := &sourceChange{changed: map[string]bool{}}
	idx, ok := x.delta(cur, got)
	want := &sourceChange{changed: map[string]bool{}}
	offs, oldCount, curCount, wantOK := diffRaw(x.raw, cur, rawEntry{}, rawEntry{}, 0, want, nil)
	if oldCount != x.installs && wantOK {
		t.Fatalf("whole walk counts %d installs in the old tree, its index %d", oldCount, x.installs)
	}
	if idx == nil {
		return false
	}
	if !ok || !wantOK {
		t.Fatalf("delta placed the change (ok %v), a whole walk says ok %v", ok, wantOK)
	}
	opt := cmp.AllowUnexported(sourceChange{}, treeEntry{})
	if diff := cmp.Diff(want, got, opt); diff != "" {
		t.Fatalf("delta's change differs from a whole walk's (-walk +delta):\n%s", diff)
	}
	if !slices.Equal(offs, idx.offs) || curCount != idx.installs || !bytes.Equal(idx.raw, cur) {
		t.Fatalf("delta's index: %d installs, offsets %v; a whole walk: %d, %v", idx.installs, idx.offs, curCount, offs)
	}
	return true
}

// TestRawIndexDelta changes random trees of install files at random
// places (a file changed, added, removed, several at once, at the start,
// the end, between): the index's delta says what a whole walk says, and
// places every change.
func TestRawIndexDelta(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 500 {
		n := rng.IntN(40)
		ids := map[string]byte{}
		var names []string
		for i := range n {
			name := fmt.Sprintf("i%03d.yaml", 2*i)
			names = append(names, name)
			ids[name] = byte(rng.IntN(3))
		}
		if rng.IntN(4) == 0 {
			names = append([]string{".gitkeep", "README.md"}, names...)
		}
		old := rawTreeOf(names, ids)
		x := indexOf(old)
		if x == nil {
			t.Fatalf("round %d: the tree does not index", round)
		}
		cur := slices.Clone(names)
		curIDs := map[string]byte{}
		for k, v := range ids {
			curIDs[k] = v
		}
		for range 1 + rng.IntN(3) {
			switch k := rng.IntN(3); {
			case k == 0 && len(cur) > 0:
				curIDs[cur[rng.IntN(len(cur))]] = byte(3 + rng.IntN(3))
			case k == 1 && len(cur) > 0:
				i := rng.IntN(len(cur))
				cur = slices.Delete(cur, i, i+1)
			default:
				name := fmt.Sprintf("i%03d.yaml", 2*rng.IntN(45)+1)
				if !slices.Contains(cur, name) {
					cur = append(cur, name)
					slices.Sort(cur)
					curIDs[name] = byte(rng.IntN(3))
				}
			}
		}
		raw := rawTreeOf(cur, curIDs)
		if bytes.Equal(raw, old) {
			continue
		}
		if !checkDelta(t, x, raw) {
			t.Fatalf("round %d: delta did not place a change of %v to %v", round, names, cur)
		}
	}
}

// TestRawIndexDeltaOrder puts an entry out of git's order right beside
// the part two trees share: the delta refuses it, as a whole walk does.
func TestRawIndexDeltaOrder(t *testing.T) {
	ids := map[string]byte{"a.yaml": 1, "b.yaml": 1, "c.yaml": 1, "d.yaml": 1}
	x := indexOf(rawTreeOf([]string{"a.yaml", "b.yaml", "c.yaml"}, ids))
	for _, names := range [][]string{
		{"a.yaml", "a.yaml", "c.yaml"},
		{"a.yaml", "b.yaml", "a.yaml", "c.yaml"},
		{"a.yaml", "d.yaml", "c.yaml"},
		{"b.yaml", "a.yaml", "c.yaml"},
		{"a.yaml", "c.yaml", "b.yaml"},
	} {
		got := &sourceChange{changed: map[string]bool{}}
		if idx, _ := x.delta(rawTreeOf(names, ids), got); idx != nil {
			t.Errorf("%v: delta placed a tree out of order: %+v", names, got)
		}
	}
}

// FuzzRawIndexDelta: for any two tree objects, the index's delta of the
// second against the first never panics and, when it places the change,
// says what walking both whole says.
func FuzzRawIndexDelta(f *testing.F) {
	ids := map[string]byte{"a.yaml": 1, "b.yaml": 2, "c.yaml": 3, "README.md": 4}
	base := rawTreeOf([]string{"README.md", "a.yaml", "b.yaml", "c.yaml"}, ids)
	f.Add(base, rawTreeOf([]string{"README.md", "a.yaml", "c.yaml"}, ids))
	f.Add(base, rawTreeOf([]string{"a.yaml", "b.yaml", "c.yaml"}, map[string]byte{"a.yaml": 1, "b.yaml": 9, "c.yaml": 3}))
	f.Add(base, bytes.Replace(base, []byte("b.yaml"), []byte("b.yam\x00"), 1))
	f.Add(base, []byte{})
	f.Add([]byte{}, base)
	f.Fuzz(func(t *testing.T, old, cur []byte) {
		x := indexOf(old)
		if x == nil || bytes.Equal(old, cur) {
			return
		}
		checkDelta(t, x, cur)
	})
}

package renderer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/gitobj"
)

// TestRefsDigestForms pins both forms of Nuon-Install-Refs: the lines form
// of Format 2 renders (the value their golden rendered commit carried for
// the fixture installs' golden commits), still checked, and the binary
// form renders write now; and that moved refs are applied in place.
func TestRefsDigestForms(t *testing.T) {
	var refs []InstallRef
	for _, id := range []string{"acme", "globex", "initech"} {
		data, err := os.ReadFile(filepath.Join("testdata", "commits", "installs", id))
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, InstallRef{ID: id, Commit: gitobj.Hash(plumbing.CommitObject, data)})
	}
	if got, want := refsDigest(refs, nil, false), "sha256:80cb2faefa67c631dda9d486551a0432f410147e0279d5d51cd5c30870a3e912"; got != want {
		t.Errorf("lines form %s, want %s", got, want)
	}
	if got, want := refsDigest(refs, nil, true), "sha256-bin:25b3139b7b142e9d7264b0464143609b51ff621be12911130d30672fb76c0d8a"; got != want {
		t.Errorf("binary form %s, want %s", got, want)
	}
	// The chunked form of one chunk: the SHA-256 of the binary form's
	// digest, as bytes.
	bin, _ := hex.DecodeString(strings.TrimPrefix(refsDigest(refs, nil, true), digestBinary))
	if got, want := chunkedDigest(refs), digestChunks+fmt.Sprintf("%x", sha256.Sum256(bin)); got != want {
		t.Errorf("chunked form %s, want %s", got, want)
	}
	if got, want := chunkedDigest(refs), "sha256-chunks:c34aefa2716f003c04cd2dd28af413315062522a8da9daaeedd6a04598792b2f"; got != want {
		t.Errorf("chunked form %s, want %s", got, want)
	}
	// Moving globex and adding hooli is the same as listing them so.
	moved := []InstallRef{{ID: "globex", Commit: refs[0].Commit}, {ID: "hooli", Commit: refs[2].Commit}}
	after := []InstallRef{refs[0], {ID: "globex", Commit: refs[0].Commit}, {ID: "hooli", Commit: refs[2].Commit}, refs[2]}
	if got, want := refsDigest(refs, moved, true), refsDigest(after, nil, true); got != want {
		t.Errorf("with moved refs %s, listed %s", got, want)
	}
}

// TestRefListWith: a list with refs moved, made from the list before, is
// the list of the refs after made from nothing (its chunks, their digests
// and the digest), for moves before, at and after chunk boundaries, ids
// added and taken out; the list before is not changed, and the chunks
// with no ref moved are shared.
func TestRefListWith(t *testing.T) {
	h := func(s string) plumbing.Hash { return gitobj.Hash(plumbing.BlobObject, []byte(s)) }
	var refs []InstallRef
	for i := range 3*chunkRefs + 100 {
		id := fmt.Sprintf("i%06d", 2*i)
		refs = append(refs, InstallRef{id, h(id)})
	}
	at := func(i int, v string) InstallRef { return InstallRef{refs[i].ID, h(v)} }
	gone := func(i int) InstallRef { return InstallRef{ID: refs[i].ID} }
	steps := []struct {
		name  string
		moved []InstallRef
	}{
		{"nothing", nil},
		{"the first", []InstallRef{at(0, "a")}},
		{"the last", []InstallRef{at(len(refs)-1, "b")}},
		{"one before a boundary", []InstallRef{at(chunkRefs-1, "c")}},
		{"one at a boundary", []InstallRef{at(2*chunkRefs, "d")}},
		{"one after a boundary", []InstallRef{at(chunkRefs+1, "e")}},
		{"a new id before the first", []InstallRef{{"h", h("f")}}},
		{"a new id in the middle", []InstallRef{{"i001025", h("g")}}},
		{"a new id after the last", []InstallRef{{"z", h("h")}}},
		{"several", []InstallRef{at(5, "i"), {"i002049", h("j")}, at(3*chunkRefs, "k")}},
		{"several in place", []InstallRef{at(7, "l"), at(chunkRefs+7, "m"), at(3*chunkRefs+7, "n")}},
		{"one taken out", []InstallRef{gone(chunkRefs + 9)}},
		{"an id that is not there taken out", []InstallRef{{ID: "i000001"}}},
		{"the last taken out", []InstallRef{gone(len(refs) - 3)}},
	}
	l := NewRefList(refs)
	if want := chunkedDigest(refs); l.Digest() != want {
		t.Fatalf("from nothing: %s, want %s", l.Digest(), want)
	}
	cur := slices.Clone(refs)
	for _, st := range steps {
		before := l.Refs()
		next := l.With(st.moved)
		cur = slices.DeleteFunc(mergeRefs(cur, st.moved), func(r InstallRef) bool { return r.Commit.IsZero() })
		if diff := cmp.Diff(cur, next.Refs()); diff != "" {
			t.Fatalf("%s: refs (-want +got):\n%s", st.name, diff)
		}
		if diff := cmp.Diff(before, l.Refs()); diff != "" {
			t.Fatalf("%s: the list before changed (-was +is):\n%s", st.name, diff)
		}
		full := newRefList(cur)
		if next.Digest() != full.Digest() || next.Digest() != chunkedDigest(cur) || !slices.Equal(next.sums, full.sums) || next.Len() != len(cur) {
			t.Errorf("%s: digest %s, %d chunks, %d refs; from nothing %s, %d, %d", st.name, next.Digest(), len(next.sums), next.Len(), full.Digest(), len(full.sums), len(cur))
		}
		for k, c := range next.chunks {
			if len(c) != chunkRefs && k != len(next.chunks)-1 {
				t.Errorf("%s: chunk %d of %d holds %d refs", st.name, k, len(next.chunks), len(c))
			}
		}
		shared := 0
		for k := range min(len(l.chunks), len(next.chunks)) {
			if &l.chunks[k][0] == &next.chunks[k][0] {
				shared++
			}
		}
		inPlace := true
		for _, m := range st.moved {
			if _, ok := l.Find(m.ID); !ok || m.Commit.IsZero() {
				inPlace = false
			}
		}
		if inPlace && len(next.chunks)-shared > len(st.moved) {
			// Moved in place, the other chunks are shared.
			t.Errorf("%s: %d of %d chunks made again", st.name, len(next.chunks)-shared, len(next.chunks))
		}
		for _, r := range cur {
			if got, ok := next.Find(r.ID); !ok || got != r.Commit {
				t.Fatalf("%s: Find(%s) = %s %v, want %s", st.name, r.ID, got, ok, r.Commit)
			}
		}
		for _, id := range []string{"", "a", "i000001", "zz"} {
			if _, ok := next.Find(id); ok && !slices.ContainsFunc(cur, func(r InstallRef) bool { return r.ID == id }) {
				t.Errorf("%s: Find(%q) found an id not listed", st.name, id)
			}
		}
		l = next
	}
	var empty *RefList
	if empty.Len() != 0 || empty.Digest() != chunkedDigest(nil) || len(empty.Refs()) != 0 {
		t.Error("a nil list is not empty")
	}
	if one := empty.With([]InstallRef{{"a", h("a")}}); one.Len() != 1 || one.Digest() != chunkedDigest([]InstallRef{{"a", h("a")}}) {
		t.Errorf("a ref added to a nil list: %d refs, %s", one.Len(), one.Digest())
	}
}

// FuzzRefListWith: for any refs and any moves (added, moved, taken out),
// the list made from the list before is the list of the refs after made
// from nothing, and the list before is unchanged.
func FuzzRefListWith(f *testing.F) {
	f.Add(uint16(3000), uint16(1500), uint16(0), byte(1), byte(0))
	f.Add(uint16(2048), uint16(1023), uint16(1024), byte(2), byte(1))
	f.Add(uint16(1025), uint16(1024), uint16(1024), byte(2), byte(2))
	f.Add(uint16(0), uint16(0), uint16(0), byte(0), byte(1))
	f.Fuzz(func(t *testing.T, n, a, b uint16, v, op byte) {
		n %= 4 * chunkRefs
		h := func(s string) plumbing.Hash { return gitobj.Hash(plumbing.BlobObject, []byte(s)) }
		refs := make([]InstallRef, n)
		for i := range refs {
			refs[i] = InstallRef{fmt.Sprintf("i%06d", 2*i), h(fmt.Sprint(i))}
		}
		var moved []InstallRef
		for j, i := range []uint16{a, b} {
			id := fmt.Sprintf("i%06d", 2*int(i%(n+1)))
			c := h(fmt.Sprint(v, i))
			switch (op >> (2 * j)) & 3 {
			case 1:
				id += "x" // after its ref, before the next
			case 2:
				c = plumbing.ZeroHash // taken out
			}
			moved = append(moved, InstallRef{id, c})
		}
		slices.SortFunc(moved, compareRefs)
		moved = slices.CompactFunc(moved, func(x, y InstallRef) bool { return x.ID == y.ID })
		l := NewRefList(refs)
		next := l.With(moved)
		want := slices.DeleteFunc(mergeRefs(refs, moved), func(r InstallRef) bool { return r.Commit.IsZero() })
		if next.Digest() != chunkedDigest(want) || !slices.Equal(next.Refs(), want) || next.Len() != len(want) {
			t.Fatalf("with %v: %d refs %s, want %d %s", moved, next.Len(), next.Digest(), len(want), chunkedDigest(want))
		}
		if !slices.Equal(next.sums, newRefList(want).sums) {
			t.Fatal("the chunks' digests are not those of the list made from nothing")
		}
		if !slices.Equal(l.Refs(), refs) {
			t.Fatal("the list before changed")
		}
	})
}

// TestMergeRefs: the refs a render keeps for the next one are those the
// digest it wrote covers.
func TestMergeRefs(t *testing.T) {
	h := func(s string) plumbing.Hash { return gitobj.Hash(plumbing.BlobObject, []byte(s)) }
	refs := []InstallRef{{"acme", h("a")}, {"globex", h("g")}, {"initech", h("i")}}
	moved := []InstallRef{{"aardvark", h("v")}, {"globex", h("x")}, {"zeta", h("z")}}
	got := mergeRefs(refs, moved)
	want := []InstallRef{moved[0], refs[0], moved[1], refs[2], moved[2]}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("merged (-want +got):\n%s", diff)
	}
	if chunkedDigest(got) != chunkedDigest(mergeRefs(refs, moved)) || refsDigest(got, nil, true) != refsDigest(refs, moved, true) {
		t.Error("the merged list's digest is not the one written")
	}
}

// TestRefsDigestAs: a rendered commit of each form the renderer wrote is
// checked in its form, so that the
// first render of a newer renderer trusts an older one's commit; a ref
// moved is seen in every form.
func TestRefsDigestAs(t *testing.T) {
	h := func(s string) plumbing.Hash { return gitobj.Hash(plumbing.BlobObject, []byte(s)) }
	var refs []InstallRef
	for i := range 2*chunkRefs + 7 {
		id := fmt.Sprintf("i%06d", i)
		refs = append(refs, InstallRef{id, h(id)})
	}
	moved := slices.Clone(refs)
	moved[chunkRefs+3].Commit = h("moved")
	for _, form := range []struct {
		name   string
		digest func([]InstallRef) string
	}{
		{"lines", func(refs []InstallRef) string { return refsDigest(refs, nil, false) }},
		{"binary", func(refs []InstallRef) string { return refsDigest(refs, nil, true) }},
		{"chunked", chunkedDigest},
	} {
		t.Run(form.name, func(t *testing.T) {
			written := form.digest(refs)
			if got := (&renderRun{list: NewRefList(refs)}).refsDigestAs(written); got != written {
				t.Errorf("the same refs: %s, written %s", got, written)
			}
			if got := (&renderRun{list: NewRefList(moved)}).refsDigestAs(written); got == written {
				t.Errorf("a ref moved: %s, as written", got)
			}
		})
	}
}

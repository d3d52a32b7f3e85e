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

// TestCacheKnownRefs: a Cache gives what it kept of a list of refs only
// for that very list, entry by entry; for any other list (a commit moved,
// a ref added or gone) nothing, so that the render hashes them.
func TestCacheKnownRefs(t *testing.T) {
	h := func(s string) plumbing.Hash { return gitobj.Hash(plumbing.BlobObject, []byte(s)) }
	kept := []InstallRef{{"acme", h("a")}, {"globex", h("g")}, {"initech", h("i")}}
	c := NewCache()
	if m := c.knownRefs(kept); m != nil {
		t.Errorf("empty cache: %+v", m)
	}
	// Not the refs' digest, so that a list taken for the kept one shows.
	own := slices.Clone(kept)
	c.keepRefs(&refsMemo{refs: own, digest: "kept"})
	tests := []struct {
		name string
		refs []InstallRef
		want bool
	}{
		{"the same refs", slices.Clone(kept), true},
		{"the list kept itself", own, true},
		{"the head of the list kept", own[:2], false},
		{"the list kept and one more", append(own[:3:3], InstallRef{"umbrella", h("u")}), false},
		{"a ref moved", []InstallRef{kept[0], {"globex", h("x")}, kept[2]}, false},
		{"a ref added", append(slices.Clone(kept), InstallRef{"umbrella", h("u")}), false},
		{"a ref gone", kept[:2], false},
		{"no refs", []InstallRef{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := c.knownRefs(tt.refs)
			if got := m != nil && m.digest == "kept"; got != tt.want {
				t.Errorf("known %v (%+v), want %v", got, m, tt.want)
			}
		})
	}
	var nilCache *Cache
	if m := nilCache.knownRefs(kept); m != nil {
		t.Errorf("no cache: %+v", m)
	}
}

// TestHashRefsResumes: the digest a render writes, hashed from the
// previous render's memo, is chunkedDigest's of the refs with the moved
// ones in place, for moves before, at and after chunk boundaries, and new
// ids; and the memo's chunks are those of a hash from the first ref.
func TestHashRefsResumes(t *testing.T) {
	h := func(s string) plumbing.Hash { return gitobj.Hash(plumbing.BlobObject, []byte(s)) }
	var refs []InstallRef
	for i := range 3*chunkRefs + 100 {
		id := fmt.Sprintf("i%06d", 2*i)
		refs = append(refs, InstallRef{id, h(id)})
	}
	at := func(i int, v string) InstallRef { return InstallRef{refs[i].ID, h(v)} }
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
	}
	m := hashRefs(nil, refs, nil)
	if want := chunkedDigest(refs); m.digest != want {
		t.Fatalf("from no memo: %s, want %s", m.digest, want)
	}
	for _, st := range steps {
		want := chunkedDigest(mergeRefs(m.refs, st.moved))
		next := hashRefs(m, m.refs, st.moved)
		if next.digest != want {
			t.Errorf("%s: %s, want %s", st.name, next.digest, want)
		}
		if full := hashRefs(nil, next.refs, nil); !slices.Equal(next.chunks, full.chunks) || full.digest != want {
			t.Errorf("%s: %d chunks, not those of a hash from the first ref (%d)", st.name, len(next.chunks), len(full.chunks))
		}
		m = next
	}
}

// FuzzHashRefs: for any refs and any moves, a digest made from the memo
// of the refs before is the digest of the refs after, made from nothing.
func FuzzHashRefs(f *testing.F) {
	f.Add(uint16(3000), uint16(1500), uint16(0), byte(1), false)
	f.Add(uint16(2048), uint16(1023), uint16(1024), byte(2), true)
	f.Add(uint16(0), uint16(0), uint16(0), byte(0), true)
	f.Fuzz(func(t *testing.T, n, a, b uint16, v byte, add bool) {
		n %= 4 * chunkRefs
		h := func(s string) plumbing.Hash { return gitobj.Hash(plumbing.BlobObject, []byte(s)) }
		refs := make([]InstallRef, n)
		for i := range refs {
			refs[i] = InstallRef{fmt.Sprintf("i%06d", 2*i), h(fmt.Sprint(i))}
		}
		var moved []InstallRef
		for _, i := range []uint16{a, b} {
			id := fmt.Sprintf("i%06d", 2*int(i%(n+1)))
			if add {
				id += "x" // after its ref, before the next
			}
			moved = append(moved, InstallRef{id, h(fmt.Sprint(v, i))})
		}
		slices.SortFunc(moved, compareRefs)
		moved = slices.CompactFunc(moved, func(x, y InstallRef) bool { return x.ID == y.ID })
		m := hashRefs(nil, refs, nil)
		next := hashRefs(m, m.refs, moved)
		want := chunkedDigest(mergeRefs(refs, moved))
		if next.digest != want {
			t.Fatalf("from the memo %s, from nothing %s", next.digest, want)
		}
		if full := hashRefs(nil, next.refs, nil); !slices.Equal(next.chunks, full.chunks) {
			t.Fatal("the memo's chunks are not those of a hash from the first ref")
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
// checked in its form, with or without a memo of the refs, so that the
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
		for _, memo := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/memo=%v", form.name, memo), func(t *testing.T) {
				run := func(refs []InstallRef) *renderRun {
					r := &renderRun{refs: refs}
					if memo {
						r.opts.Cache = NewCache()
						r.opts.Cache.keepRefs(hashRefs(nil, refs, nil))
					}
					return r
				}
				written := form.digest(refs)
				if got := run(slices.Clone(refs)).refsDigestAs(written); got != written {
					t.Errorf("the same refs: %s, written %s", got, written)
				}
				if got := run(moved).refsDigestAs(written); got == written {
					t.Errorf("a ref moved: %s, as written", got)
				}
			})
		}
	}
}

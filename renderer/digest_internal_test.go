package renderer

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// TestHashRefsResumes: the digest a render writes, hashed from a mark of
// the previous render's memo, is refsDigest's of the refs with the moved
// ones in place, for moves before, at and after marks, and new ids; and
// the memo's marks are those of a hash from the first ref.
func TestHashRefsResumes(t *testing.T) {
	h := func(s string) plumbing.Hash { return gitobj.Hash(plumbing.BlobObject, []byte(s)) }
	var refs []InstallRef
	for i := range 3*markEvery + 100 {
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
		{"one before a mark", []InstallRef{at(markEvery-1, "c")}},
		{"one at a mark", []InstallRef{at(2*markEvery, "d")}},
		{"one after a mark", []InstallRef{at(markEvery+1, "e")}},
		{"a new id before the first", []InstallRef{{"h", h("f")}}},
		{"a new id in the middle", []InstallRef{{"i001025", h("g")}}},
		{"a new id after the last", []InstallRef{{"z", h("h")}}},
		{"several", []InstallRef{at(5, "i"), {"i002049", h("j")}, at(3*markEvery, "k")}},
	}
	m := hashRefs(nil, refs, nil)
	if want := refsDigest(refs, nil, true); m.digest != want {
		t.Fatalf("from no memo: %s, want %s", m.digest, want)
	}
	for _, st := range steps {
		want := refsDigest(m.refs, st.moved, true)
		next := hashRefs(m, m.refs, st.moved)
		if next.digest != want {
			t.Errorf("%s: %s, want %s", st.name, next.digest, want)
		}
		if full := hashRefs(nil, next.refs, nil); !slices.EqualFunc(next.marks, full.marks, bytes.Equal) || full.digest != want {
			t.Errorf("%s: %d marks, not those of a hash from the first ref (%d)", st.name, len(next.marks), len(full.marks))
		}
		m = next
	}
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
	if refsDigest(got, nil, true) != refsDigest(refs, moved, true) {
		t.Error("the merged list's digest is not the one written")
	}
}

package renderer

import (
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
	if got, want := refsDigest(refs, nil, false), "sha256:4312e6ca3d5e2b3723d1e34cc07d0eed238cd8d0ddbe6ed4f6b25cb8ed2b8115"; got != want {
		t.Errorf("lines form %s, want %s", got, want)
	}
	if got, want := refsDigest(refs, nil, true), "sha256-bin:b7c51aa21e03cc199e773d2d8289f9c42ff0a03a169c15ac61b12ab2080b3615"; got != want {
		t.Errorf("binary form %s, want %s", got, want)
	}
	// Moving globex and adding hooli is the same as listing them so.
	moved := []InstallRef{{ID: "globex", Commit: refs[0].Commit}, {ID: "hooli", Commit: refs[2].Commit}}
	after := []InstallRef{refs[0], {ID: "globex", Commit: refs[0].Commit}, {ID: "hooli", Commit: refs[2].Commit}, refs[2]}
	if got, want := refsDigest(refs, moved, true), refsDigest(after, nil, true); got != want {
		t.Errorf("with moved refs %s, listed %s", got, want)
	}
}

// TestCacheRefsDigest: a Cache gives the digest it kept only for the very
// list it kept it with; any other list (a commit moved, a ref added or
// gone) is hashed. The kept digest here is deliberately not the refs'
// own, so that a list taken for the kept one shows.
func TestCacheRefsDigest(t *testing.T) {
	h := func(s string) plumbing.Hash { return gitobj.Hash(plumbing.BlobObject, []byte(s)) }
	kept := []InstallRef{{"acme", h("a")}, {"globex", h("g")}, {"initech", h("i")}}
	c := NewCache()
	if got, want := c.refsDigest(kept), refsDigest(kept, nil, true); got != want {
		t.Errorf("empty cache: %s, want %s", got, want)
	}
	c.keepRefs(slices.Clone(kept), "kept")
	tests := []struct {
		name string
		refs []InstallRef
		want string
	}{
		{"the same refs", slices.Clone(kept), "kept"},
		{"a ref moved", []InstallRef{kept[0], {"globex", h("x")}, kept[2]}, ""},
		{"a ref added", append(slices.Clone(kept), InstallRef{"umbrella", h("u")}), ""},
		{"a ref gone", kept[:2], ""},
		{"no refs", []InstallRef{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if want == "" {
				want = refsDigest(tt.refs, nil, true)
			}
			if got := c.refsDigest(tt.refs); got != want {
				t.Errorf("digest %s, want %s", got, want)
			}
		})
	}
	var nilCache *Cache
	if got, want := nilCache.refsDigest(kept), refsDigest(kept, nil, true); got != want {
		t.Errorf("no cache: %s, want %s", got, want)
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

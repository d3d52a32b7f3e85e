package renderer

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

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

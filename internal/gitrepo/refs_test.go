package gitrepo_test

import (
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/gittest"
)

// TestRefs reads refs packed, loose, both, symbolic and tags, and compares
// what Ref and Refs return with what git says.
func TestRefs(t *testing.T) {
	dir, commits := bare(t)
	git := func(args ...string) { gittest.Git(t, dir, args...) }
	git("update-ref", "refs/heads/nuon/installs/a", commits[0].String())
	git("update-ref", "refs/heads/nuon/installs/b", commits[1].String())
	git("update-ref", "refs/heads/nuon/installs-other", commits[1].String())
	git("tag", "-a", "-m", "v1", "v1", commits[0].String())
	git("pack-refs", "--all")
	tests := []struct {
		name  string
		setup func()
	}{
		{"packed", func() {}},
		{"loose over packed", func() { git("update-ref", "--no-deref", "refs/heads/nuon/installs/a", commits[2].String()) }},
		{"loose only", func() { git("update-ref", "refs/heads/nuon/installs/c/d", commits[2].String()) }},
		{"symbolic", func() { git("symbolic-ref", "refs/heads/nuon/installs/s", "refs/heads/main") }},
		{"deleted", func() { git("update-ref", "-d", "refs/heads/nuon/installs/b") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.setup()
			r := open(t, dir)
			for _, prefix := range []string{"refs/heads/nuon/installs/", "refs/heads/nuon/installs", "refs/tags/", "refs/"} {
				want := map[plumbing.ReferenceName]plumbing.Hash{}
				for _, line := range strings.Split(gittest.Git(t, dir, "for-each-ref", "--format=%(refname) %(objectname) %(symref)"), "\n") {
					f := strings.Fields(line)
					// Refs matches names by prefix, for-each-ref by folder.
					if len(f) == 2 && strings.HasPrefix(f[0], prefix) {
						want[plumbing.ReferenceName(f[0])] = plumbing.NewHash(f[1])
					}
				}
				got, err := r.Refs(prefix)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("Refs(%q) (-git +got):\n%s", prefix, diff)
				}
				for name, h := range want {
					if got, err := r.Ref(name); err != nil || got != h {
						t.Errorf("Ref(%s) = %s, %v; want %s", name, got, err, h)
					}
				}
			}
			for _, name := range []plumbing.ReferenceName{"refs/heads/nuon/installs/none", "refs/heads/nuon/install", "refs/heads/nuon"} {
				if got, err := r.Ref(name); err != nil || !got.IsZero() {
					t.Errorf("Ref(%s) = %s, %v; want none", name, got, err)
				}
			}
		})
	}
}

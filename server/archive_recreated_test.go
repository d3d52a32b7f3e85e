package server

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// TestRecreated pins which live refs of an install off main are taken
// for an install created again since the archive's current generation
// (not archived yet), and which are the archived install's own (retired
// into the generation), on a repository with real histories: the
// generation holds desired state d1 and status s1; d2 continues d1 (a
// later render, of either install: the renderer continues the commit it
// last issued for the id), s2 continues s1, and d3, t are histories of
// their own.
func TestRecreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tenant.git")
	gittest.InitBare(t, dir)
	commit := func(msg string, parents ...string) plumbing.Hash {
		args := []string{"-c", "user.name=t", "-c", "user.email=t@nuon.invalid", "commit-tree", "4b825dc642cb6eb9a060e54bf8d69288fbee4904", "-m", msg}
		for _, p := range parents {
			args = append(args, "-p", p)
		}
		return plumbing.NewHash(gittest.Git(t, dir, args...))
	}
	gittest.Git(t, dir, "hash-object", "-t", "tree", "-w", "--stdin")
	d0 := commit("desired 0")
	d1 := commit("desired 1", d0.String())
	d2 := commit("desired 2", d1.String())
	d3 := commit("desired, another history")
	s1 := commit("status 1")
	s2 := commit("status 2", s1.String())
	other := commit("status of a new agent")
	var none plumbing.Hash

	gen := archive{gen: 2, tips: map[string]plumbing.Hash{schemas.InstallRef("acme"): d1, schemas.StatusRef("acme"): s1}}
	noStatus := archive{gen: 2, tips: map[string]plumbing.Hash{schemas.InstallRef("acme"): d1}}
	s := &Server{cfg: Config{Dir: dir}}
	for _, tc := range []struct {
		name            string
		arch            archive
		desired, status plumbing.Hash
		want            bool
	}{
		{"the archived refs", gen, d1, s1, false},
		{"a status accepted after the archive read the refs", gen, d1, s2, false},
		{"a desired state the archive moved past", gen, d0, s1, false},
		{"a status of another history beside the archived desired state", gen, d1, other, false},
		{"a desired state of another history beside the archived status", gen, d3, s1, false},
		{"a later render and a later status", gen, d2, s2, false},
		{"no desired state", gen, none, other, false},
		{"a later render and a new agent's status", gen, d2, other, true},
		{"a new history and a new agent's status", gen, d3, other, true},
		{"a later render and no status yet", gen, d2, none, true},
		{"a later render and a status, where the archive has none", noStatus, d2, other, true},
		{"a later render, no status on either", noStatus, d2, none, true},
	} {
		got, err := s.recreated(context.Background(), "acme", tc.arch, tc.desired, tc.status)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got != tc.want {
			t.Errorf("%s: recreated = %v, want %v", tc.name, got, tc.want)
		}
	}
}

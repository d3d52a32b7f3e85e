package gitrepo

import (
	"bytes"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

// TestPackedRefsSetOrder checks that refs added in any order (sorted, as a
// render's updates are, reversed, or mixed, with a ref set twice and one
// deleted) are found by name and written sorted, each once.
func TestPackedRefsSetOrder(t *testing.T) {
	h := func(n int) plumbing.Hash { return plumbing.NewHash(strings.Repeat(string(rune('0'+n)), 40)) }
	for _, tc := range []struct {
		name  string
		order []string
	}{
		{"sorted", []string{"refs/heads/a", "refs/heads/b", "refs/heads/c", "refs/heads/d"}},
		{"reversed", []string{"refs/heads/d", "refs/heads/c", "refs/heads/b", "refs/heads/a"}},
		{"mixed", []string{"refs/heads/b", "refs/heads/d", "refs/heads/a", "refs/heads/c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &packedRefs{traits: []string{"sorted"}, refs: []packedRef{{name: "refs/heads/bb", hash: h(9).String()}}}
			for i, name := range tc.order {
				p.set(plumbing.ReferenceName(name), h(i+1))
			}
			for i, name := range tc.order {
				if got := p.hash(plumbing.ReferenceName(name)); got != h(i+1) {
					t.Errorf("%s: %s, want %s", name, got, h(i+1))
				}
			}
			// Set again (found, not added twice), and one deleted.
			p.set(plumbing.ReferenceName(tc.order[0]), h(7))
			p.set(plumbing.ReferenceName(tc.order[1]), plumbing.ZeroHash)
			if got := p.hash(plumbing.ReferenceName(tc.order[0])); got != h(7) {
				t.Errorf("%s set again: %s", tc.order[0], got)
			}
			if got := p.hash(plumbing.ReferenceName(tc.order[1])); !got.IsZero() {
				t.Errorf("%s deleted: %s", tc.order[1], got)
			}
			var buf bytes.Buffer
			if err := p.write(&buf); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")[1:]
			var names []string
			for _, l := range lines {
				_, name, _ := strings.Cut(l, " ")
				names = append(names, name)
			}
			want := []string{"refs/heads/a", "refs/heads/b", "refs/heads/bb", "refs/heads/c", "refs/heads/d"}
			var kept []string
			for _, n := range want {
				if n != tc.order[1] {
					kept = append(kept, n)
				}
			}
			if strings.Join(names, ",") != strings.Join(kept, ",") {
				t.Errorf("written %v, want %v", names, kept)
			}
		})
	}
}

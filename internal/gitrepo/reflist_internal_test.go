package gitrepo

import (
	"slices"
	"strings"
	"testing"
)

// FuzzPackedRefList reads any packed-refs text: it never panics, lists
// only refs under the prefix, sorted, each once, the last line of a name
// winning, and agrees with findPackedRef on each.
func FuzzPackedRefList(f *testing.F) {
	h1, h2 := strings.Repeat("a", 40), strings.Repeat("b", 40)
	f.Add("# pack-refs with: peeled fully-peeled sorted \n" + h1 + " refs/heads/main\n" + h2 + " refs/heads/nuon/installs/a\n^" + h1 + "\n")
	f.Add(h1 + " refs/heads/nuon/installs/b\n" + h2 + " refs/heads/nuon/installs/a\n" + h1 + " refs/heads/nuon/installs/a\r\n")
	f.Add(h1 + "refs/heads/nuon/installs/a\n" + strings.Repeat("z", 40) + " refs/heads/nuon/installs/c\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, text string) {
		const prefix = "refs/heads/nuon/installs/"
		refs := packedRefList(text, prefix)
		if !slices.IsSortedFunc(refs, compareRef) {
			t.Fatalf("not sorted: %v", refs)
		}
		for i, r := range refs {
			if !strings.HasPrefix(r.Name, prefix) {
				t.Errorf("%s is not under %s", r.Name, prefix)
			}
			if i > 0 && refs[i-1].Name == r.Name {
				t.Errorf("%s twice", r.Name)
			}
			if h, ok := findPackedRef([]byte(text), r.Name); !ok || h != r.Hash && !strings.Contains(r.Name, "\r") {
				t.Errorf("%s: listed %s, found %s (%v)", r.Name, r.Hash, h, ok)
			}
		}
	})
}

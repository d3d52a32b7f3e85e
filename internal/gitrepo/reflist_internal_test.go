package gitrepo

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-billy/v5/osfs"
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

// TestHolds compares packed-refs with what it held, chunk by chunk: the
// same, a byte changed in a later chunk, longer, shorter, gone.
func TestHolds(t *testing.T) {
	kept := bytes.Repeat([]byte("0123456789abcdef"), 10_000) // 160 KB: three chunks
	changed := bytes.Clone(kept)
	changed[150_000] = 'x'
	tests := []struct {
		name string
		file []byte // nil: no file
		kept []byte
		want bool
	}{
		{"same", kept, kept, true},
		{"a byte changed in the third chunk", changed, kept, false},
		{"longer", append(bytes.Clone(kept), '\n'), kept, false},
		{"shorter", kept[:len(kept)-1], kept, false},
		{"a chunk long, shorter", kept[:64<<10], kept, false},
		{"gone", nil, kept, false},
		{"gone, none kept", nil, []byte{}, true},
		{"empty, none kept", []byte{}, []byte{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.file != nil {
				if err := os.WriteFile(filepath.Join(dir, packedRefsFile), tc.file, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := holds(osfs.New(dir), tc.kept)
			if err != nil || got != tc.want {
				t.Errorf("holds = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

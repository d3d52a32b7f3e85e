package gitrepo

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

// packedText writes names (sorted, each once) as git writes packed-refs
// sorted, every third ref followed by a peeled line, lines ended by eol.
func packedText(names []string, eol string) []byte {
	var b bytes.Buffer
	b.WriteString("# pack-refs with: peeled fully-peeled sorted " + eol)
	for i, name := range names {
		var h plumbing.Hash
		h[0], h[1], h[19] = byte(i>>8), byte(i), 0xab
		fmt.Fprintf(&b, "%s %s%s", h, name, eol)
		if i%3 == 0 {
			h[5] = 0xcd
			fmt.Fprintf(&b, "^%s%s", h, eol)
		}
	}
	return b.Bytes()
}

// checkSearch compares searchPackedRef with findPackedRef, which reads
// the whole file, for every name and each probe, at several windows; it
// may refuse (errNoSearch) only where a name is longer than searchLine.
func checkSearch(t *testing.T, data []byte, names, probes []string) {
	t.Helper()
	long := slices.ContainsFunc(append(slices.Clone(names), probes...), func(n string) bool { return len(n)+43 > searchLine })
	for _, window := range []int64{1, 50, 200, searchWindow} {
		for _, name := range append(slices.Clone(names), probes...) {
			want, wantOK := findPackedRef(data, name)
			got, ok, err := searchPackedRef(bytes.NewReader(data), int64(len(data)), name, window)
			if err == errNoSearch && long {
				continue // the caller reads the file whole
			}
			if err != nil {
				t.Fatalf("window %d: %q: %v", window, name, err)
			}
			if got != want || ok != wantOK {
				t.Fatalf("window %d: %q: got %s %v, want %s %v", window, name, got, ok, want, wantOK)
			}
		}
	}
}

func TestSearchPackedRef(t *testing.T) {
	var many []string
	for i := range 2000 {
		many = append(many, fmt.Sprintf("refs/heads/nuon/installs/i%05d", i*3))
	}
	many = append(many, "refs/heads/nuon/rendered", "refs/heads/nuon/status/x", "refs/tags/v1")
	slices.Sort(many)
	probes := []string{"refs/heads/nuon/installs/i00001", "refs/heads/nuon/installs/i05997", "refs/heads/nuon/installs/i06000",
		"refs/heads/nuon/installs/i", "refs/heads/nuon/installs/i000000", "refs/a", "refs/zzz", "refs/heads/nuon/rendere", "refs/heads/nuon/renderedx"}
	for _, tc := range []struct {
		name  string
		names []string
	}{
		{"none", nil},
		{"one", []string{"refs/heads/main"}},
		{"two", []string{"refs/heads/a", "refs/heads/b"}},
		{"many", many},
	} {
		for _, eol := range []string{"\n", "\r\n"} {
			t.Run(fmt.Sprintf("%s/%q", tc.name, eol), func(t *testing.T) {
				data := packedText(tc.names, eol)
				checkSearch(t, data, tc.names, probes)
				// The last line without its end.
				checkSearch(t, bytes.TrimSuffix(data, []byte(eol)), tc.names, probes)
			})
		}
	}
	// A line the search does not read: the caller reads the file whole.
	long := "refs/heads/" + strings.Repeat("x", 2*searchLine)
	data := packedText([]string{"refs/heads/a", long, "refs/heads/z"}, "\n")
	for _, name := range []string{"refs/heads/a", "refs/heads/y", "refs/heads/z"} {
		if _, _, err := searchPackedRef(bytes.NewReader(data), int64(len(data)), name, 1); err != errNoSearch {
			t.Fatalf("%q past a long line: %v, want errNoSearch", name, err)
		}
	}
	bad := []byte("# pack-refs with: peeled fully-peeled sorted \nnot a ref line at all\n" + strings.Repeat("0", 40) + " refs/heads/z\n")
	// Before it, the search must read it; past it, it may find z.
	if _, _, err := searchPackedRef(bytes.NewReader(bad), int64(len(bad)), "refs/heads/a", 1); err != errNoSearch {
		t.Fatalf("a bad line: %v, want errNoSearch", err)
	}
	if h, ok, err := searchPackedRef(bytes.NewReader(bad), int64(len(bad)), "refs/heads/z", 1); err != errNoSearch && (err != nil || !ok || !h.IsZero()) {
		t.Fatalf("z past a bad line: %s %v %v", h, ok, err)
	}
}

// fuzzRefNames is the sorted set of ref names a fuzz target's list of
// lines names: each line that can be a packed ref's name, under refs/.
func fuzzRefNames(list string) []string {
	var names []string
	for _, name := range strings.Split(list, "\n") {
		if name == "" || strings.ContainsAny(name, " \r\n") || name[0] == '^' || name[0] == '#' {
			continue
		}
		// Ref names start so (checkRefName), and findPackedRef counts
		// on it: such a name is never inside an id.
		names = append(names, "refs/"+name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// FuzzSearchPackedRef: for any set of ref names written sorted, the binary
// search finds what reading the whole file finds, at any window.
func FuzzSearchPackedRef(f *testing.F) {
	f.Add("heads/a\nheads/b\nheads/b/c\nheads/b-c", "heads/b", false)
	f.Add("x\nx/y\nx0", "x/", true)
	f.Fuzz(func(t *testing.T, list, probe string, crlf bool) {
		names := fuzzRefNames(list)
		eol := "\n"
		if crlf {
			eol = "\r\n"
		}
		var probes []string
		// An empty name never reaches either.
		if probe != "" && !strings.ContainsAny(probe, "\r\n") {
			probes = append(probes, "refs/"+probe)
		}
		if len(names) > 200 || strings.Contains(probe, " ") {
			return
		}
		checkSearch(t, packedText(names, eol), names, probes)
	})
}

package renderer

import (
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/go-git/go-git/v5/plumbing"
)

// within says whether s's bytes lie within text's.
func within(s, text string) bool {
	if len(s) == 0 || len(text) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.StringData(text)))
	return p >= lo && p < lo+uintptr(len(text))
}

// TestOwnIDs: the refs a RefList keeps are the refs given, their ids
// copied out of the text they were read from, so that the list does not
// keep it (packed-refs whole), and a list with refs moved keeps ids of
// its own too.
func TestOwnIDs(t *testing.T) {
	var text strings.Builder
	for _, id := range []string{"acme", "globex", "", "initech", "i0000001"} {
		text.WriteString("0000000000000000000000000000000000000000 refs/heads/nuon/installs/" + id + "\n")
	}
	packed := text.String()
	var refs []InstallRef
	for line := range strings.Lines(packed) {
		_, name, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		refs = append(refs, InstallRef{ID: strings.TrimPrefix(name, "refs/heads/nuon/installs/"), Commit: plumbing.NewHash(strings.Repeat("ab", 20))})
	}
	slices.SortFunc(refs, compareRefs)
	own := ownIDs(refs)
	if !slices.Equal(own, refs) {
		t.Fatalf("ownIDs = %v, want %v", own, refs)
	}
	for _, r := range own {
		if within(r.ID, packed) {
			t.Errorf("%q still names its id within the text read", r.ID)
		}
	}
	if len(ownIDs(nil)) != 0 {
		t.Error("ownIDs(nil) is not empty")
	}

	// A list keeps ids of its own, of the refs it was made from and of
	// those moved.
	l := NewRefList(ownIDs(refs))
	name := "refs/heads/nuon/installs/globex"
	moved := []InstallRef{{ID: strings.TrimPrefix(name, "refs/heads/nuon/installs/"), Commit: plumbing.NewHash(strings.Repeat("cd", 20))}}
	next := l.With(moved)
	if want := mergeRefs(refs, moved); !slices.Equal(next.Refs(), want) {
		t.Fatalf("moved %v, want %v", next.Refs(), want)
	}
	for _, r := range next.Refs() {
		if within(r.ID, packed) || within(r.ID, name) {
			t.Errorf("%q names its id within the text read", r.ID)
		}
	}
	// Refs added: the list is made again from the first, ids of its own
	// too, those of the list it was made from (the caller's) included.
	added := "refs/heads/nuon/installs/aardvark"
	grown := NewRefList(refs).With([]InstallRef{{ID: strings.TrimPrefix(added, "refs/heads/nuon/installs/"), Commit: plumbing.NewHash(strings.Repeat("ef", 20))}})
	if grown.Len() != len(refs)+1 {
		t.Fatalf("%d refs, want %d", grown.Len(), len(refs)+1)
	}
	for _, r := range grown.Refs() {
		if within(r.ID, packed) || within(r.ID, added) {
			t.Errorf("%q names its id within the text read", r.ID)
		}
	}
}

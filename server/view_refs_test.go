package server

import (
	"fmt"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-cmp/cmp"
)

// TestRefChanges: the ref table's change log names the refs set since a
// version while it reaches back that far; past that, or after a
// replica's refresh, it says to read every ref.
func TestRefChanges(t *testing.T) {
	tab := newRefTable()
	h := plumbing.NewHash("1111111111111111111111111111111111111111")
	tab.set("refs/heads/nuon/status/acme", h)
	v1 := tab.stamp()
	tab.set("refs/heads/nuon/status/globex", h)
	tab.set("refs/heads/nuon/installs/acme", plumbing.ZeroHash)

	names, v, ok := tab.changes(v1)
	if !ok || v != tab.stamp() {
		t.Fatalf("changes since %d: ok %v, version %d of %d", v1, ok, v, tab.stamp())
	}
	if diff := cmp.Diff([]string{"refs/heads/nuon/status/globex", "refs/heads/nuon/installs/acme"}, names); diff != "" {
		t.Errorf("changes since %d (-want +got):\n%s", v1, diff)
	}
	if names, _, ok := tab.changes(tab.stamp()); !ok || len(names) != 0 {
		t.Errorf("changes since now: %v, ok %v", names, ok)
	}

	for i := range maxRefLog + 1 {
		tab.set(fmt.Sprintf("refs/heads/nuon/status/i%06d", i), h)
	}
	if _, _, ok := tab.changes(v1); ok {
		t.Error("the log still reaches a version it dropped")
	}
	recent := tab.stamp() - 10
	if names, _, ok := tab.changes(recent); !ok || len(names) != 10 {
		t.Errorf("the last 10 changes: %d names, ok %v", len(names), ok)
	}

	before := tab.stamp()
	tab.replace(newRefTable())
	if _, _, ok := tab.changes(before); ok {
		t.Error("changes across a replica's refresh")
	}
	if names, _, ok := tab.changes(tab.stamp()); !ok || len(names) != 0 {
		t.Errorf("changes since the refresh: %v, ok %v", names, ok)
	}
}

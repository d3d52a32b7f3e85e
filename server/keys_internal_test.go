package server

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gittest"
)

// TestKeyTableTake moves a key table to the main another table read: it
// keys from that reading, and its reset to the same main reads nothing
// again. A table that read nothing gives nothing.
func TestKeyTableTake(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tenant.git")
	gittest.InitBare(t, dir)
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "installs"), 0o755); err != nil {
		t.Fatal(err)
	}
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOI093FQc+72WNrTUNkTxXuw9DMb7Qmo+M7BQq0kk/Gv"
	if err := os.WriteFile(filepath.Join(src, "installs", "acme.yaml"), []byte("agentKey: "+key+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	main := plumbing.NewHash(gittest.CommitDir(t, dir, "main", src, "acme"))

	read := newKeyTable(dir)
	read.reset(main)
	if ok, err := read.known("acme"); !ok || err != nil {
		t.Fatalf("known(acme) = %v, %v", ok, err)
	}
	k := newKeyTable(dir)
	k.take(read)
	k.reset(main)
	if got := k.mainCommit(); got != main {
		t.Errorf("main %s, want %s", got, main)
	}
	if reflect.ValueOf(k.entries).Pointer() != reflect.ValueOf(read.entries).Pointer() {
		t.Error("the reset after take read installs/ again")
	}
	if got, ok := k.lookup("acme"); !ok || authorizedKey(got) != key {
		t.Errorf("lookup(acme) = %v, %v; want %s", got, ok, key)
	}

	empty := newKeyTable(dir)
	empty.take(newKeyTable(dir))
	if !empty.mainCommit().IsZero() {
		t.Errorf("take of a table that read nothing moved to %s", empty.mainCommit())
	}
}

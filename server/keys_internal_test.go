package server

import (
	"os"
	"path/filepath"
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
	if k.inst != read.inst {
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

// TestKeyTableResetKeeps: moving to a main that changed one install's
// file keeps every other parsed key (no parse again as each polls) and
// reads the changed one anew; an install removed from main has no key.
// Lookups running beside the move see either table, never a torn one
// (run with -race).
func TestKeyTableResetKeeps(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tenant.git")
	gittest.InitBare(t, dir)
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "installs"), 0o755); err != nil {
		t.Fatal(err)
	}
	keyA := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOI093FQc+72WNrTUNkTxXuw9DMb7Qmo+M7BQq0kk/Gv"
	keyB := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILLAJZAvOoyn5mqGazlrDbIysrLTvQ/yQQcK7bU/Jp6v"
	write := func(id, key string) {
		if err := os.WriteFile(filepath.Join(src, "installs", id+".yaml"), []byte("agentKey: "+key+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("acme", keyA)
	write("globex", keyA)
	write("initech", keyA)
	main1 := plumbing.NewHash(gittest.CommitDir(t, dir, "main", src, "three"))
	k := newKeyTable(dir)
	k.reset(main1)
	for _, id := range []string{"acme", "globex", "initech"} {
		if _, ok := k.lookup(id); !ok {
			t.Fatalf("%s has no key", id)
		}
	}
	write("globex", keyB)
	if err := os.Remove(filepath.Join(src, "installs", "initech.yaml")); err != nil {
		t.Fatal(err)
	}
	main2 := plumbing.NewHash(gittest.CommitDir(t, dir, "main", src, "globex's key; initech gone"))

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				k.lookup("acme")
				k.lookup("globex")
			}
		}
	}()
	k.reset(main2)
	close(stop)
	<-done

	k.mu.RLock()
	_, keptAcme := k.keys["acme"]
	main := k.main
	k.mu.RUnlock()
	if main != main2 || !keptAcme {
		t.Errorf("after the move: main %s (want %s), acme's key kept %v", main, main2, keptAcme)
	}
	if key, ok := k.lookup("globex"); !ok || authorizedKey(key) != keyB {
		t.Errorf("globex's key after the move: %v %v, want the new one", key, ok)
	}
	if _, ok := k.lookup("initech"); ok {
		t.Error("initech, gone from main, still has a key")
	}
	if key, ok := k.lookup("acme"); !ok || authorizedKey(key) != keyA {
		t.Errorf("acme's key after the move: %v %v", key, ok)
	}
}

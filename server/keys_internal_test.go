package server

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"golang.org/x/crypto/ssh"

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

// TestKeyTablePatched moves a key table across several mains (an
// install's key changed, one removed, one added, a file that is not an
// install, a main whose installs/ tree is the same, installs/ gone and
// back, and a hand-over in between): after every move, each install's
// key is what a table reading that main from scratch gives, the tree it
// holds is indexed as a whole read indexes it, and the keys parsed of
// installs whose file did not change are kept, not parsed again.
func TestKeyTablePatched(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tenant.git")
	gittest.InitBare(t, dir)
	src := t.TempDir()
	installs := filepath.Join(src, "installs")
	if err := os.MkdirAll(installs, 0o755); err != nil {
		t.Fatal(err)
	}
	var keys []ssh.PublicKey
	for i := range 4 {
		pub, _, err := ed25519.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{byte(i + 1)}, 64)))
		if err != nil {
			t.Fatal(err)
		}
		k, err := ssh.NewPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	write := func(id string, key int) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(installs, id+".yaml"), []byte("agentKey: "+authorizedKey(keys[key])+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	remove := func(name string) {
		t.Helper()
		if err := os.Remove(filepath.Join(installs, name)); err != nil {
			t.Fatal(err)
		}
	}
	ids := []string{"nobody"}
	for i := range 30 {
		id := fmt.Sprintf("i%02d", 2*i)
		write(id, i%2)
		ids = append(ids, id, fmt.Sprintf("i%02d", 2*i+1))
	}
	if err := os.WriteFile(filepath.Join(installs, "README.md"), []byte("installs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// handed are the hand-overs so far: the process's, not main's.
	handed := map[string]*rotation{}

	k := newKeyTable(dir)
	var prevTree plumbing.Hash
	step := func(msg string) {
		t.Helper()
		main := plumbing.NewHash(gittest.CommitDir(t, dir, "main", src, msg))
		k.mu.RLock()
		before := maps.Clone(k.keys)
		k.mu.RUnlock()
		k.reset(main)
		fresh := newKeyTable(dir)
		for id, r := range handed {
			fresh.handedOver(id, r)
		}
		fresh.reset(main)
		if err := fresh.load(); err != nil {
			t.Fatal(err)
		}
		// Kept: the keys of files that did not change.
		k.mu.RLock()
		tree := k.inst
		for id, key := range before {
			if _, kept := k.keys[id]; !kept {
				continue
			}
			if want := fresh.read(id); want == nil && key != nil || want != nil && (key == nil || authorizedKey(want) != authorizedKey(key)) {
				if handed[id] == nil {
					t.Errorf("%s: kept key %v, its file on main says %v", msg, key, want)
				}
			}
		}
		k.mu.RUnlock()
		if tree != nil && fresh.inst != nil {
			if tree.hash != fresh.inst.hash || (tree.index == nil) != (fresh.inst.index == nil) ||
				tree.index != nil && (!slices.Equal(tree.index.Offs, fresh.inst.index.Offs) || !bytes.Equal(tree.index.Raw, fresh.inst.index.Raw)) {
				t.Errorf("%s: the patched tree differs from one read whole", msg)
			}
			if tree.hash == prevTree && len(before) > 0 {
				k.mu.RLock()
				n := len(k.keys)
				k.mu.RUnlock()
				if n != len(before) {
					t.Errorf("%s: installs/ is the same tree, yet %d keys of %d kept", msg, n, len(before))
				}
			}
			prevTree = tree.hash
		}
		for _, id := range ids {
			got, gotOK := k.lookup(id)
			want, wantOK := fresh.lookup(id)
			if gotOK != wantOK || gotOK && authorizedKey(got) != authorizedKey(want) {
				t.Errorf("%s: %s's key %v (%v), from scratch %v (%v)", msg, id, got, gotOK, want, wantOK)
			}
			gotKnown, err1 := k.known(id)
			wantKnown, err2 := fresh.known(id)
			if gotKnown != wantKnown || err1 != nil || err2 != nil {
				t.Errorf("%s: %s known %v (%v), from scratch %v (%v)", msg, id, gotKnown, err1, wantKnown, err2)
			}
		}
	}
	step("sixty installs")
	write("i04", 2)
	remove("i10.yaml")
	write("i99", 3)
	step("i04's key changed, i10 gone, i99 new")
	// i06 hands its key over to keys[3].
	r := (*rotation)(nil).step(keys[0], keys[3])
	handed["i06"] = r
	k.handedOver("i06", r)
	step("the same installs/ again")
	write("i06", 3)
	if err := os.WriteFile(filepath.Join(installs, "README.md"), []byte("the fleet\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write("i00", 1)
	step("main catches up with i06's hand-over; i00's key; README")
	write("i10", 2)
	remove("i58.yaml")
	remove("i00.yaml")
	step("i10 back, the first and last gone")
	if err := os.RemoveAll(installs); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "nuon.yaml"), []byte("# no installs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	step("no installs/ folder")
	if err := os.MkdirAll(installs, 0o755); err != nil {
		t.Fatal(err)
	}
	write("i02", 1)
	write("i98", 0)
	step("installs/ back with two")
}

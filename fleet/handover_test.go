package fleet

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// step is one status commit: who signs it and, for a hand-over, from and
// to keys.
type step struct {
	key      *signature.Signer
	from, to *signature.Signer
}

func history(t *testing.T, steps ...step) (*memory.Storage, plumbing.Hash) {
	t.Helper()
	st := memory.NewStorage()
	var parent plumbing.Hash
	for i, s := range steps {
		b := gitobj.NewBatch()
		blob := b.Add(plumbing.BlobObject, []byte(fmt.Sprintf(`{"n":%d}`, i)))
		tree := b.Tree([]gitobj.Entry{{Name: schemas.StatusFile, Hash: blob, Mode: 0o100644}})
		var parents []plumbing.Hash
		if !parent.IsZero() {
			parents = []plumbing.Hash{parent}
		}
		msg := fmt.Sprintf("status %d\n\n%s: acme\n", i, schemas.TrailerInstall)
		if s.to != nil {
			msg += trailerKeyHandover + ": " + s.to.AuthorizedKey() + "\n" + trailerKeyRetired + ": " + s.from.AuthorizedKey() + "\n"
		}
		h, err := b.Commit(gitobj.Commit{Tree: tree, Parents: parents, Message: msg,
			Author: object.Signature{Name: "agent", Email: "a@example.com", When: time.Unix(int64(1e9+i*60), 0)}}, s.key)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Flush(st); err != nil {
			t.Fatal(err)
		}
		parent = h
	}
	return st, parent
}

// TestStatusKeys: each status commit is judged by the key in force where
// it sits: the old key before and at its hand-over, the new key after;
// the old key after the hand-over, a hand-over the key in force did not
// sign, and a chain main never named or never endorsed verify nothing.
func TestStatusKeys(t *testing.T) {
	acme, globex, initech := loadKey(t, "acme"), loadKey(t, "globex"), loadKey(t, "render")
	A, B, C := acme.AuthorizedKey(), globex.AuthorizedKey(), initech.AuthorizedKey()
	for _, tc := range []struct {
		name  string
		steps []step
		main  string
		want  []bool // verified, oldest first
	}{
		{"no hand-over", []step{{key: acme}, {key: acme}}, A, []bool{true, true}},
		{"hand-over, main not yet updated", []step{{key: acme}, {key: acme, from: acme, to: globex}, {key: globex}}, A, []bool{true, true, true}},
		{"hand-over, main caught up", []step{{key: acme}, {key: acme, from: acme, to: globex}, {key: globex}}, B, []bool{true, true, true}},
		{"old key after the hand-over", []step{{key: acme}, {key: acme, from: acme, to: globex}, {key: globex}, {key: acme}}, A, []bool{true, true, true, false}},
		{"hand-over signed by another key", []step{{key: acme}, {key: initech, from: acme, to: globex}, {key: globex}}, A, []bool{true, false, true}},
		{"operator re-keyed main to a third key", []step{{key: acme}, {key: acme, from: acme, to: globex}, {key: globex}, {key: initech}}, C, []bool{false, false, false, true}},
		{"a chain to main's key nobody endorsed", []step{{key: initech}, {key: initech, from: initech, to: acme}}, A, []bool{false, false}},
		{"two hand-overs, main names the middle key", []step{{key: acme}, {key: acme, from: acme, to: globex}, {key: globex}, {key: globex, from: globex, to: initech}, {key: initech}}, B, []bool{true, true, true, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, tip := history(t, tc.steps...)
			entries, err := History(st, "acme", tip, tc.main, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != len(tc.want) {
				t.Fatalf("%d entries", len(entries))
			}
			for i, e := range entries {
				want := tc.want[len(tc.want)-1-i]
				if e.Verified != want {
					t.Errorf("commit %d (oldest 0): verified %v, want %v (%s)", len(tc.want)-1-i, e.Verified, want, e.VerifyError)
				}
			}
			// The tip as nuon status reads it.
			c, err := gitobj.ReadCommit(st, tip)
			if err != nil {
				t.Fatal(err)
			}
			if ok, _ := Verify(c, "acme", keyAt(st, c, tc.main)); ok != tc.want[len(tc.want)-1] {
				t.Errorf("tip verified %v", ok)
			}
		})
	}
}

// BenchmarkStatusKeys is the cost of judging one install's status tip by
// the key in force: the walk of a 1,000-commit history with one hand-over
// (what nuon status pays per row).
func BenchmarkStatusKeys(b *testing.B) {
	acme, globex := loadKeyB(b, "acme"), loadKeyB(b, "globex")
	st := memory.NewStorage()
	var parent plumbing.Hash
	for i := range 1000 {
		key, msg := acme, fmt.Sprintf("status %d\n\n%s: acme\n", i, schemas.TrailerInstall)
		switch {
		case i == 500:
			msg += trailerKeyHandover + ": " + globex.AuthorizedKey() + "\n" + trailerKeyRetired + ": " + acme.AuthorizedKey() + "\n"
		case i > 500:
			key = globex
		}
		bt := gitobj.NewBatch()
		var parents []plumbing.Hash
		if !parent.IsZero() {
			parents = []plumbing.Hash{parent}
		}
		h, err := bt.Commit(gitobj.Commit{Tree: bt.Tree(nil), Parents: parents, Message: msg,
			Author: object.Signature{Name: "agent", Email: "a@example.com", When: time.Unix(int64(1e9+i), 0)}}, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := bt.Flush(st); err != nil {
			b.Fatal(err)
		}
		parent = h
	}
	c, err := gitobj.ReadCommit(st, parent)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if ok, why := Verify(c, "acme", keyAt(st, c, acme.AuthorizedKey())); !ok {
			b.Fatal(why)
		}
	}
}

func loadKeyB(b *testing.B, name string) *signature.Signer {
	b.Helper()
	s, err := signature.LoadSigner("../fixtures/keys/" + name)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

package fleet

import (
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/schemas"
)

// FuzzStatusKeys: whatever the messages of a three-commit status history
// say, StatusKeys never panics and names for each commit either main's
// key or a key a hand-over trailer of that history names.
func FuzzStatusKeys(f *testing.F) {
	acme, globex := loadKeyF(f, "acme"), loadKeyF(f, "globex")
	A, B := acme.AuthorizedKey(), globex.AuthorizedKey()
	f.Add("status", trailerKeyHandover+": "+B+"\n"+trailerKeyRetired+": "+A, "status", A)
	f.Add(trailerKeyHandover+": "+A+"\n"+trailerKeyRetired+": "+B, "x", trailerKeyHandover+": "+B+"\n"+trailerKeyRetired+": "+A, B)
	f.Add("", "", "", "")
	f.Fuzz(func(t *testing.T, m1, m2, m3, main string) {
		st := memory.NewStorage()
		var parent plumbing.Hash
		var hashes []plumbing.Hash
		for _, m := range []string{m1, m2, m3} {
			b := gitobj.NewBatch()
			var parents []plumbing.Hash
			if !parent.IsZero() {
				parents = []plumbing.Hash{parent}
			}
			h, err := b.Commit(gitobj.Commit{Tree: b.Tree(nil), Parents: parents, Author: object.Signature{Name: "a", Email: "a@b"},
				Message: "status\n\n" + schemas.TrailerInstall + ": acme\n" + m + "\n"}, acme)
			if err != nil {
				t.Skip()
			}
			if err := b.Flush(st); err != nil {
				t.Fatal(err)
			}
			parent = h
			hashes = append(hashes, h)
		}
		keys := StatusKeys(st, parent, main)
		all := m1 + m2 + m3
		for _, h := range hashes {
			k := keys(h)
			if k != main && !strings.Contains(all, strings.TrimPrefix(k, "ssh-ed25519 ")) {
				t.Fatalf("key %q is neither main's nor named in the history", k)
			}
		}
	})
}

package fleet

import (
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

func TestSummary(t *testing.T) {
	for _, tt := range []struct{ msg, want string }{
		{"status\n\nNuon-Install: acme\nNuon-Generation: 2\n", "status"},
		{"applied api 2.4.0\n\napi: Ready\ndb: Failed: no such host\n\nNuon-Install: acme\n", "applied api 2.4.0\n\napi: Ready\ndb: Failed: no such host"},
		{"one line", "one line"},
		{"subject\n\nnot a trailer block, just words", "subject\n\nnot a trailer block, just words"},
		{"", ""},
	} {
		if diff := cmp.Diff(tt.want, summary(tt.msg)); diff != "" {
			t.Errorf("summary(%q) (-want +got):\n%s", tt.msg, diff)
		}
	}
}

func FuzzSummary(f *testing.F) {
	for _, s := range []string{"status\n\nNuon-Install: acme\n", "a\n\nb: c\nd e: f", "\n\n\n", "x: y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		got := summary(msg)
		if len(got) > len(msg) {
			t.Fatalf("summary longer than the message: %q → %q", msg, got)
		}
	})
}

// TestHistory walks a status ref of three commits, newest first: the
// install's own key's commits are verified and name the signer, another
// key's are not.
func TestHistory(t *testing.T) {
	st := memory.NewStorage()
	acme, globex := loadKey(t, "acme"), loadKey(t, "globex")
	var parent plumbing.Hash
	for i, s := range []*signature.Signer{acme, globex, acme} {
		b := gitobj.NewBatch()
		blob := b.Add(plumbing.BlobObject, []byte("{}"))
		tree := b.Tree([]gitobj.Entry{{Name: schemas.StatusFile, Hash: blob, Mode: 0o100644}})
		var parents []plumbing.Hash
		if !parent.IsZero() {
			parents = []plumbing.Hash{parent}
		}
		who := object.Signature{Name: "agent", Email: "a@example.com", When: time.Unix(int64(1e9+i*60), 0)}
		msg := "status " + string(rune('a'+i)) + "\n\n" + schemas.TrailerInstall + ": acme\n" + schemas.TrailerPhase + ": Ready\n" + schemas.TrailerGeneration + ": 3\n"
		h, err := b.Commit(gitobj.Commit{Tree: tree, Parents: parents, Author: who, Message: msg}, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Flush(st); err != nil {
			t.Fatal(err)
		}
		parent = h
	}
	got, err := History(st, "acme", parent, acme.AuthorizedKey(), 0)
	if err != nil {
		t.Fatal(err)
	}
	pub, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(acme.AuthorizedKey()))
	signer := "acme (" + ssh.FingerprintSHA256(pub) + ")"
	type row struct {
		Summary, Phase, Signer string
		Verified               bool
		Generation             int64
	}
	var rows []row
	for _, e := range got {
		rows = append(rows, row{e.Summary, e.Phase, e.Signer, e.Verified, e.Generation})
		if !e.Verified && !strings.Contains(e.VerifyError, "not trusted") {
			t.Errorf("%s: verify error %q", e.Summary, e.VerifyError)
		}
	}
	want := []row{
		{"status c", "Ready", signer, true, 3},
		{"status b", "Ready", "", false, 3},
		{"status a", "Ready", signer, true, 3},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
	if got, _ := History(st, "acme", parent, acme.AuthorizedKey(), 2); len(got) != 2 {
		t.Errorf("max 2: %d entries", len(got))
	}
}

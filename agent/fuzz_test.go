package agent_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"nuon.dev/nuon/agent"
)

// overlay serves one extra object on top of a repository.
type overlay struct {
	storer.EncodedObjectStorer
	extra plumbing.EncodedObject
}

func (o overlay) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if o.extra.Hash() == h && (t == plumbing.AnyObject || t == o.extra.Type()) {
		return o.extra, nil
	}
	return o.EncodedObjectStorer.EncodedObject(t, h)
}

// FuzzVerify feeds arbitrary commit objects to the agent's verification,
// seeded with a real rendered commit: it must never panic, and it may
// accept a commit only if its signed content is the rendered commit's.
func FuzzVerify(f *testing.F) {
	// The same commits in every fuzz worker: the seeds come from the
	// coordinator, the expected content from each worker's own tenant.
	f.Setenv("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
	f.Setenv("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
	tn := newTenant(f, func(tn *tenant) {
		tn.now = func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
	})
	repo := filesystem.NewStorage(osfs.New(tn.bare), cache.NewObjectLRUDefault())
	good := plumbing.NewHash(tn.git("rev-parse", "refs/heads/nuon/installs/acme"))
	raw := []byte(tn.git("cat-file", "commit", good.String()) + "\n")
	want := payload(f, repo, good)
	f.Add(raw)
	f.Add(bytes.Replace(raw, []byte("acme"), []byte("acmf"), 1))
	f.Add([]byte("tree 0000000000000000000000000000000000000000\n\nNuon-Install: acme\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		o := &plumbing.MemoryObject{}
		o.SetType(plumbing.CommitObject)
		_, _ = o.Write(data)
		st := overlay{repo, o}
		d, err := agent.Verify(st, o.Hash(), "acme", tn.trust, agent.Applied{})
		if err != nil {
			return
		}
		if got := payload(t, st, o.Hash()); !bytes.Equal(got, want) {
			t.Fatalf("accepted a commit whose signed content differs:\n%s", got)
		}
		if d.Install.Install != "acme" {
			t.Fatalf("accepted state for %q", d.Install.Install)
		}
	})
}

func payload(tb testing.TB, st storer.EncodedObjectStorer, h plumbing.Hash) []byte {
	tb.Helper()
	c, err := object.GetCommit(st, h)
	if err != nil {
		tb.Fatal(err)
	}
	var o plumbing.MemoryObject
	if err := c.EncodeWithoutSignature(&o); err != nil {
		tb.Fatal(err)
	}
	r, _ := o.Reader()
	b, _ := io.ReadAll(r)
	return b
}

// FuzzVerifyStatus feeds arbitrary commit objects to the status check,
// seeded with a status commit signed by acme's key and a forged one on top
// of it: it must never panic, may take a commit as acme's own only if its
// signed content is the genuine commit's, and may take a baseline from
// behind a forged tip only from the genuine commit.
func FuzzVerifyStatus(f *testing.F) {
	f.Setenv("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
	f.Setenv("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
	tn := newTenant(f)
	repo := filesystem.NewStorage(osfs.New(tn.bare), cache.NewObjectLRUDefault())
	empty := tn.git("mktree")
	key := keyFileTB(f, fixtureKeys+"/acme")
	own := plumbing.NewHash(tn.git("-c", "gpg.format=ssh", "-c", "user.signingkey="+key, "commit-tree", "-S", empty,
		"-m", "nuon: status acme generation 3: Ready\n\nNuon-Install: acme\nNuon-Generation: 3\nNuon-Desired: none\nNuon-Phase: Ready"))
	forged := tn.git("commit-tree", empty, "-p", own.String(),
		"-m", "nuon: status acme generation 0: Ready\n\nNuon-Install: acme\nNuon-Generation: 0\nNuon-Desired: none\nNuon-Phase: Ready")
	want := payload(f, repo, own)
	raw := []byte(tn.git("cat-file", "commit", own.String()) + "\n")
	f.Add(raw)
	f.Add([]byte(tn.git("cat-file", "commit", forged) + "\n"))
	f.Add(bytes.Replace(raw, []byte("generation 3"), []byte("generation 9"), 1))
	f.Add([]byte("tree " + empty + "\nparent " + own.String() + "\n\nNuon-Install: acme\nNuon-Generation: 99\n"))
	pub := tn.keys["acme"].PublicKey()
	f.Fuzz(func(t *testing.T, data []byte) {
		o := &plumbing.MemoryObject{}
		o.SetType(plumbing.CommitObject)
		_, _ = o.Write(data)
		st := overlay{repo, o}
		if _, err := object.GetCommit(st, o.Hash()); err != nil {
			return
		}
		v, err := agent.VerifyStatus(st, o.Hash(), "acme", pub)
		if err != nil {
			return
		}
		if v.Forged == nil {
			if got := payload(t, st, o.Hash()); !bytes.Equal(got, want) || v.Commit != o.Hash() {
				t.Fatalf("took a commit as acme's own whose signed content differs:\n%s", got)
			}
			return
		}
		if !v.Commit.IsZero() && v.Commit != own {
			t.Fatalf("baseline %s from behind a forged tip, want none or %s", v.Commit, own)
		}
		if !v.Commit.IsZero() && v.Generation != 3 {
			t.Fatalf("baseline generation %d, want 3", v.Generation)
		}
	})
}

// keyFileTB copies a private key to a file only its owner can read.
func keyFileTB(tb testing.TB, src string) string {
	tb.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		tb.Fatal(err)
	}
	dst := filepath.Join(tb.TempDir(), filepath.Base(src))
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	return dst
}

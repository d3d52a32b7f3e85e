package agent_test

import (
	"bytes"
	"io"
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

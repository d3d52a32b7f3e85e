package fleet

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// beat writes a liveness commit as the agent does (parentless, empty
// tree, the Nuon-Install trailer), signed by s, at when.
func beat(t *testing.T, st *memory.Storage, id string, s *signature.Signer, when time.Time, parents ...plumbing.Hash) plumbing.Hash {
	t.Helper()
	b := gitobj.NewBatch()
	who := object.Signature{Name: "nuon agent " + id, Email: id + "@agent.nuon.invalid", When: when}
	var signer gitobj.Signer
	if s != nil {
		signer = s
	}
	h, err := b.Commit(gitobj.Commit{Tree: b.Tree(nil), Parents: parents, Author: who,
		Message: "nuon: heartbeat " + id + "\n\n" + schemas.TrailerInstall + ": " + id + "\n"}, signer)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(st); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestReadLiveness: on a plain git host, the liveness ref's tip keeps an
// install reachable when it is signed by the install's own key, names it
// and has no parents; a beat forged with another key, naming another
// install, or carrying history counts for nothing, and the row says what
// the status commit says.
func TestReadLiveness(t *testing.T) {
	acme, globex := loadKey(t, "acme"), loadKey(t, "globex")
	keys := map[string]string{"acme": acme.AuthorizedKey()}
	seen := time.Unix(1e9, 0).UTC()
	beatAt := seen.Add(time.Hour)
	now := beatAt.Add(5 * time.Minute)
	tests := []struct {
		name  string
		make  func(st *memory.Storage) plumbing.Hash
		state string
		err   error
	}{
		{"own beat", func(st *memory.Storage) plumbing.Hash { return beat(t, st, "acme", acme, beatAt) }, schemas.InstallReady, nil},
		{"another key", func(st *memory.Storage) plumbing.Hash { return beat(t, st, "acme", globex, beatAt) }, StateUnreachable, ErrLiveness},
		{"unsigned", func(st *memory.Storage) plumbing.Hash { return beat(t, st, "acme", nil, beatAt) }, StateUnreachable, ErrLiveness},
		{"names globex", func(st *memory.Storage) plumbing.Hash { return beat(t, st, "globex", acme, beatAt) }, StateUnreachable, ErrLiveness},
		{"with history", func(st *memory.Storage) plumbing.Hash {
			return beat(t, st, "acme", acme, beatAt, beat(t, st, "acme", acme, seen))
		}, StateUnreachable, ErrLiveness},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := memory.NewStorage()
			b, _ := json.Marshal(schemas.Status{APIVersion: schemas.APIVersion, Kind: schemas.KindStatus, Install: "acme",
				Phase: schemas.InstallReady, HeartbeatEvery: "10m0s", Components: map[string]schemas.ComponentStatus{}})
			status := commit(t, st, map[string][]byte{schemas.StatusFile: b}, acme)
			live := tt.make(st)
			for ref, h := range map[string]plumbing.Hash{schemas.StatusRef("acme"): status, schemas.LivenessRef("acme"): live} {
				if err := st.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(ref), h)); err != nil {
					t.Fatal(err)
				}
			}
			_, err := ReadLiveness(st, "acme", live, keys["acme"])
			if !errors.Is(err, tt.err) {
				t.Fatalf("ReadLiveness: %v, want %v", err, tt.err)
			}
			rows, err := ReadAt(memRepo{st}, keys, "", now)
			if err != nil {
				t.Fatal(err)
			}
			r := rows[0]
			if r.State != tt.state {
				t.Fatalf("state %s, want %s (reason %q)", r.State, tt.state, r.Reason())
			}
			if tt.err == nil && (r.Contact == nil || !r.Contact.Equal(beatAt) || r.ContactKind != ContactHeartbeat) {
				t.Fatalf("contact %v %q, want the beat at %s", r.Contact, r.ContactKind, beatAt)
			}
			if tt.err != nil && (r.Contact != nil || !strings.HasPrefix(r.Reason(), "no status commit since")) {
				t.Fatalf("a refused beat left contact %v, reason %q", r.Contact, r.Reason())
			}
		})
	}
}

// TestReasonContact: Unreachable's reason names the later of the last
// signed contact and the status commit.
func TestReasonContact(t *testing.T) {
	seen := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	polled := seen.Add(30 * time.Minute)
	row := Install{Phase: schemas.InstallReady, Time: seen, HeartbeatEvery: "10m0s", Contact: &polled, ContactKind: "poll"}
	if r := row.At(polled.Add(15 * time.Minute)); r.Unreachable {
		t.Fatalf("15m after a poll: %s", r.State)
	}
	r := row.At(polled.Add(25 * time.Minute))
	if want := "no signed contact since 2026-01-01T00:30:00Z (heartbeat 10m0s)"; !r.Unreachable || r.Reason() != want {
		t.Fatalf("25m after a poll: %s %q, want Unreachable %q", r.State, r.Reason(), want)
	}
	old := seen.Add(-time.Hour)
	row.Contact = &old
	if got, want := row.At(seen.Add(25*time.Minute)).Reason(), "no status commit since 2026-01-01T00:00:00Z (heartbeat 10m0s)"; got != want {
		t.Fatalf("contact older than the status: %q, want %q", got, want)
	}
}

// FuzzReadLiveness: whatever bytes a git host serves as the liveness
// commit, ReadLiveness does not panic, and what it accepts is a
// parentless commit naming the install.
func FuzzReadLiveness(f *testing.F) {
	acme := loadKeyF(f, "acme")
	st := memory.NewStorage()
	b := gitobj.NewBatch()
	who := object.Signature{Name: "nuon agent acme", Email: "acme@agent.nuon.invalid", When: time.Unix(1e9, 0)}
	h, err := b.Commit(gitobj.Commit{Tree: b.Tree(nil), Author: who, Message: "nuon: heartbeat acme\n\nNuon-Install: acme\n"}, acme)
	if err != nil || b.Flush(st) != nil {
		f.Fatal(err)
	}
	o, _ := st.EncodedObject(plumbing.CommitObject, h)
	r, _ := o.Reader()
	var raw strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		raw.Write(buf[:n])
		if err != nil {
			break
		}
	}
	f.Add([]byte(raw.String()))
	f.Add([]byte("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nparent 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n\nNuon-Install: acme\n"))
	key := acme.AuthorizedKey()
	f.Fuzz(func(t *testing.T, data []byte) {
		st := memory.NewStorage()
		o := st.NewEncodedObject()
		o.SetType(plumbing.CommitObject)
		w, _ := o.Writer()
		w.Write(data)
		w.Close()
		h, err := st.SetEncodedObject(o)
		if err != nil {
			return
		}
		if _, err := ReadLiveness(st, "acme", h, key); err == nil {
			c, _ := gitobj.ReadCommit(st, h)
			if id, _ := schemas.Trailer(c.Message, schemas.TrailerInstall); len(c.ParentHashes) != 0 || id != "acme" {
				t.Fatalf("accepted %q", data)
			}
		}
	})
}

func loadKeyF(f *testing.F, name string) *signature.Signer {
	s, err := signature.LoadSigner("../fixtures/keys/" + name)
	if err != nil {
		f.Fatal(err)
	}
	return s
}

package fleet

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// memRepo is a Repository over go-git's in-memory storage.
type memRepo struct{ st *memory.Storage }

func (m memRepo) Storer() storer.Storer { return m.st }

func (m memRepo) Refs(prefix string) (map[plumbing.ReferenceName]plumbing.Hash, error) {
	out := map[plumbing.ReferenceName]plumbing.Hash{}
	iter, err := m.st.IterReferences()
	if err != nil {
		return nil, err
	}
	return out, iter.ForEach(func(r *plumbing.Reference) error {
		if strings.HasPrefix(r.Name().String(), prefix) {
			out[r.Name()] = r.Hash()
		}
		return nil
	})
}

func (m memRepo) Ref(name plumbing.ReferenceName) (plumbing.Hash, error) {
	r, err := m.st.Reference(name)
	if err != nil {
		return plumbing.ZeroHash, nil
	}
	return r.Hash(), nil
}

func loadKey(t *testing.T, name string) *signature.Signer {
	t.Helper()
	s, err := signature.LoadSigner("../fixtures/keys/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// commit writes a commit of files, signed by s, and returns it.
func commit(t *testing.T, st storer.Storer, files map[string][]byte, s *signature.Signer) plumbing.Hash {
	t.Helper()
	b := gitobj.NewBatch()
	dirs := map[string][]gitobj.Entry{}
	var root []gitobj.Entry
	for name, data := range files {
		h := b.Add(plumbing.BlobObject, data)
		if dir, base, ok := strings.Cut(name, "/"); ok {
			dirs[dir] = append(dirs[dir], gitobj.Entry{Name: base, Mode: filemode.Regular, Hash: h})
			continue
		}
		root = append(root, gitobj.Entry{Name: name, Mode: filemode.Regular, Hash: h})
	}
	for dir, entries := range dirs {
		root = append(root, gitobj.Entry{Name: dir, Mode: filemode.Dir, Hash: b.Tree(entries)})
	}
	who := object.Signature{Name: "t", Email: "t@example.com", When: time.Unix(1e9, 0)}
	var signer gitobj.Signer
	if s != nil {
		signer = s
	}
	h, err := b.Commit(gitobj.Commit{Tree: b.Tree(root), Author: who, Message: "m\n"}, signer)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(st); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestReadFlagsWrongKey: a status signed by another key than the
// install's own is shown unverified, with the reason.
func TestReadFlagsWrongKey(t *testing.T) {
	st := memory.NewStorage()
	acme, globex := loadKey(t, "acme"), loadKey(t, "globex")
	main := commit(t, st, map[string][]byte{
		"installs/acme.yaml":   []byte("agentKey: " + acme.AuthorizedKey() + "\n"),
		"installs/globex.yaml": []byte("agentKey: " + globex.AuthorizedKey() + "\n"),
	}, nil)
	status := func(id string) []byte {
		b, _ := json.Marshal(schemas.Status{APIVersion: schemas.APIVersion, Kind: schemas.KindStatus, Install: id, Phase: schemas.InstallReady})
		return b
	}
	tests := []struct {
		install  string
		signer   *signature.Signer
		verified bool
		reason   string
	}{
		{"acme", acme, true, ""},
		{"globex", acme, false, "not trusted"},
		{"initech", globex, false, "no agentKey"},
		{"unsigned", nil, false, ""},
	}
	for _, tt := range tests {
		h := commit(t, st, map[string][]byte{schemas.StatusFile: status(tt.install)}, tt.signer)
		if err := st.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(schemas.StatusRef(tt.install)), h)); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := AgentKeys(st, main)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := Read(memRepo{st}, keys, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(tests) {
		t.Fatalf("%d rows, want %d", len(rows), len(tests))
	}
	byID := map[string]Install{}
	for _, r := range rows {
		byID[r.Install] = r
	}
	for _, tt := range tests {
		r := byID[tt.install]
		if r.Verified != tt.verified {
			t.Errorf("%s: verified %v, want %v (%s)", tt.install, r.Verified, tt.verified, r.VerifyError)
		}
		if !tt.verified && (r.VerifyError == "" || !strings.Contains(r.VerifyError, tt.reason)) {
			t.Errorf("%s: verify error %q, want one mentioning %q", tt.install, r.VerifyError, tt.reason)
		}
	}
}

// TestReadHeartbeat: an install whose newest status commit is older than
// twice the heartbeat it announced is Unreachable, distinct from Stale
// desired state; an agent that announces no heartbeat is never judged.
// The test commits are dated time.Unix(1e9, 0).
func TestReadHeartbeat(t *testing.T) {
	seen := time.Unix(1e9, 0)
	tests := []struct {
		name  string
		every string
		stale bool
		now   time.Time
		state string
	}{
		{"on time", "10m0s", false, seen.Add(19 * time.Minute), schemas.InstallReady},
		{"late", "10m0s", false, seen.Add(21 * time.Minute), StateUnreachable},
		{"stale but alive", "10m0s", true, seen.Add(5 * time.Minute), StateStale},
		{"stale and late", "10m0s", true, seen.Add(time.Hour), StateUnreachable},
		{"no heartbeat", "", false, seen.Add(24 * time.Hour), schemas.InstallReady},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := memory.NewStorage()
			b, _ := json.Marshal(schemas.Status{APIVersion: schemas.APIVersion, Kind: schemas.KindStatus, Install: "acme",
				Phase: schemas.InstallReady, Stale: tt.stale, HeartbeatEvery: tt.every, Vetoed: []string{schemas.RequestDebug},
				Components: map[string]schemas.ComponentStatus{
					"api": {Phase: schemas.PhaseApplied, Drift: []schemas.ResourceDrift{{Kind: "ConfigMap", Name: "settings", Action: schemas.DriftChanged}}},
					"db":  {Phase: schemas.PhaseApplied},
				}})
			h := commit(t, st, map[string][]byte{schemas.StatusFile: b}, loadKey(t, "acme"))
			if err := st.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(schemas.StatusRef("acme")), h)); err != nil {
				t.Fatal(err)
			}
			rows, err := ReadAt(memRepo{st}, nil, "", tt.now)
			if err != nil {
				t.Fatal(err)
			}
			r := rows[0]
			if r.State != tt.state || r.Unreachable != (tt.state == StateUnreachable) || !r.Time.Equal(seen) {
				t.Errorf("state %s unreachable %v lastSeen %v, want %s", r.State, r.Unreachable, r.Time, tt.state)
			}
			if r.Drifted != 1 || len(r.Vetoed) != 1 {
				t.Errorf("drifted %d vetoed %v, want 1 and [debug]", r.Drifted, r.Vetoed)
			}
		})
	}
}

// TestAtRecomputesState: a row kept across reads turns Unreachable with
// time alone, and back when a newer read says otherwise.
func TestAtRecomputesState(t *testing.T) {
	seen := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	row := Install{Phase: schemas.InstallReady, Time: seen, HeartbeatEvery: "10m"}
	if got := row.At(seen.Add(15 * time.Minute)); got.State != schemas.InstallReady || got.Unreachable {
		t.Errorf("15m after: %s unreachable %v, want Ready", got.State, got.Unreachable)
	}
	late := row.At(seen.Add(25 * time.Minute))
	if late.State != StateUnreachable || !late.Unreachable {
		t.Errorf("25m after: %s unreachable %v, want Unreachable", late.State, late.Unreachable)
	}
	if got := late.At(seen.Add(5 * time.Minute)); got.State != schemas.InstallReady || got.Unreachable {
		t.Errorf("re-evaluated earlier: %s, want Ready", got.State)
	}
	row.Stale = true
	if got := row.At(seen); got.State != StateStale {
		t.Errorf("stale row: %s, want Stale", got.State)
	}
}

// TestAtDeferred: an install that defers a change for its customer is
// Held or Waiting, not failing; a refusal, an expiry and a late heartbeat
// still say more.
func TestAtDeferred(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	hold := &schemas.Deferred{Reason: schemas.DeferredHold, Message: "held by the customer: audit", Since: now, Commit: strings.Repeat("a", 40)}
	window := &schemas.Deferred{Reason: schemas.DeferredWindow, Message: "outside every allow window", Since: now, Commit: strings.Repeat("a", 40)}
	for _, tc := range []struct {
		name string
		row  Install
		want string
	}{
		{"hold", Install{Phase: schemas.InstallReady, Deferred: hold, Time: now}, StateHeld},
		{"window", Install{Phase: schemas.InstallDegraded, Deferred: window, Time: now}, StateWaiting},
		{"refused", Install{Phase: schemas.InstallRefused, Deferred: hold, Time: now}, schemas.InstallRefused},
		{"stale", Install{Phase: schemas.InstallReady, Deferred: hold, Stale: true, Time: now}, StateStale},
		{"unreachable", Install{Phase: schemas.InstallReady, Deferred: window, HeartbeatEvery: "10m", Time: now.Add(-time.Hour)}, StateUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.row.At(now).State; got != tc.want {
				t.Errorf("State = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestReason: each state that needs one says why, in the words of `nuon
// status`; Unreachable (a late heartbeat) and Stale (an expired desired
// state) never share one.
func TestReason(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	expires := now.Add(-time.Hour)
	until := now.Add(2 * time.Hour)
	commit := strings.Repeat("a", 40)
	for _, tc := range []struct {
		name string
		row  Install
		want string
	}{
		{"ready", Install{Phase: schemas.InstallReady, Time: now}, ""},
		{"unreachable", Install{Phase: schemas.InstallReady, HeartbeatEvery: "10m0s", Time: now.Add(-time.Hour)}, "no status commit since 2029-12-31T23:00:00Z (heartbeat 10m0s)"},
		{"stale", Install{Phase: schemas.InstallReady, Stale: true, Expires: &expires, Time: now}, "desired state expired 2029-12-31T23:00:00Z"},
		{"stale without expiry", Install{Phase: schemas.InstallReady, Stale: true, Time: now}, "desired state expired"},
		{"held", Install{Phase: schemas.InstallReady, Deferred: &schemas.Deferred{Reason: schemas.DeferredHold, Message: "held by the customer", Commit: commit}, Time: now}, "deferred aaaaaaaaaaaa: held by the customer"},
		{"waiting", Install{Phase: schemas.InstallReady, Deferred: &schemas.Deferred{Reason: schemas.DeferredWindow, Message: "outside every allow window", Until: &until, Commit: commit}, Time: now}, "deferred aaaaaaaaaaaa: outside every allow window (window opens at 2030-01-01T02:00:00Z)"},
		{"refused", Install{Phase: schemas.InstallRefused, Refusal: &schemas.Refusal{Commit: commit, Reason: "bad signature"}, Time: now}, "refused aaaaaaaaaaaa: bad signature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.row.At(now).Reason(); got != tc.want {
				t.Errorf("Reason = %q, want %q", got, tc.want)
			}
		})
	}
}

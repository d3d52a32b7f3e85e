package server

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/fleet"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// indexReadRepo is a repository of desired states and status histories
// for the index's readers: desired states with and without components,
// one deleted, one whose install.json does not parse; statuses of several
// kinds, one history with a key hand-over from k0 to k1 (its tip the
// hand-over itself, or the status after it), one status.json that does
// not parse.
type indexReadRepo struct {
	dir      string
	st       *filesystem.Storage
	desired  map[string]plumbing.Hash
	statuses map[string]plumbing.Hash
}

func newIndexReadRepo(t *testing.T, k0, k1 *signature.Signer) *indexReadRepo {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "r.git")
	gittest.InitBare(t, dir)
	st := filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault())
	b := gitobj.NewBatch()
	when := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	who := object.Signature{Name: "nuon", Email: "nuon@nuon.invalid", When: when}
	r := &indexReadRepo{dir: dir, st: st, desired: map[string]plumbing.Hash{}, statuses: map[string]plumbing.Hash{}}
	blob := func(v any) plumbing.Hash {
		if s, ok := v.(string); ok {
			return b.Add(plumbing.BlobObject, []byte(s))
		}
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b.Add(plumbing.BlobObject, data)
	}
	commit := func(tree plumbing.Hash, parent plumbing.Hash, msg string, key *signature.Signer) plumbing.Hash {
		c := gitobj.Commit{Tree: tree, Author: who, Message: msg}
		if !parent.IsZero() {
			c.Parents = []plumbing.Hash{parent}
		}
		var sign gitobj.Signer
		if key != nil {
			sign = key
		}
		h, err := b.Commit(c, sign)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	desired := func(name string, state any, comps map[string]any) {
		var files []gitobj.Entry
		for n, c := range comps {
			files = append(files, gitobj.Entry{Name: n + ".json", Mode: filemode.Regular, Hash: blob(c)})
		}
		root := []gitobj.Entry{
			{Name: schemas.InstallStateFile, Mode: filemode.Regular, Hash: blob(state)},
			{Name: "policies", Mode: filemode.Dir, Hash: b.Tree([]gitobj.Entry{{Name: "p.rego", Mode: filemode.Regular, Hash: blob("package p\n")}})},
		}
		if files != nil {
			root = append(root, gitobj.Entry{Name: schemas.ComponentsDir, Mode: filemode.Dir, Hash: b.Tree(files)})
		}
		r.desired[name] = commit(b.Tree(root), plumbing.ZeroHash, fmt.Sprintf("render %s\n\n%s: 7\n", name, schemas.TrailerGeneration), nil)
	}
	comp := func(name, version string) schemas.ComponentState {
		return schemas.ComponentState{APIVersion: schemas.APIVersion, Kind: "ComponentState", Name: name, Version: version}
	}
	desired("components", schemas.InstallState{APIVersion: schemas.APIVersion, Kind: schemas.KindInstallState, Channel: "beta", Components: []string{"api", "db", "gone"}},
		map[string]any{"api": comp("api", "2.4.0"), "db": comp("db", "1.0.0"), "extra": comp("extra", "9.9.9")})
	desired("bad-component", schemas.InstallState{Channel: "stable", Components: []string{"api"}}, map[string]any{"api": "{not json"})
	desired("no-components", schemas.InstallState{Channel: "stable"}, nil)
	desired("deleted", schemas.InstallState{Channel: "stable", Deleted: true}, nil)
	desired("bad-state", "{\"channel\": 3}", nil)

	status := func(s schemas.Status, parent plumbing.Hash, trailers string, key *signature.Signer) plumbing.Hash {
		tree := b.Tree([]gitobj.Entry{
			{Name: schemas.StatusFile, Mode: filemode.Regular, Hash: blob(s)},
			{Name: "jobs", Mode: filemode.Dir, Hash: b.Tree([]gitobj.Entry{{Name: "j.json", Mode: filemode.Regular, Hash: blob("{}")}})},
		})
		return commit(tree, parent, "status\n\n"+schemas.TrailerInstall+": acme\n"+trailers, key)
	}
	d := r.desired["components"].String()
	ready := schemas.Status{APIVersion: schemas.APIVersion, Kind: schemas.KindStatus, Desired: d, Applied: d, Generation: 7, Phase: schemas.InstallReady,
		HeartbeatEvery: "10m0s", Components: map[string]schemas.ComponentStatus{
			"web": {Phase: schemas.PhaseApplied, Version: "2.4.0", Drift: []schemas.ResourceDrift{{Kind: "Deployment", Name: "web", Action: "update"}}, Corrected: true},
			"api": {Phase: schemas.PhaseFailed, Version: "2.4.0", Error: "boom"},
		}}
	r.statuses["ready"] = status(ready, plumbing.ZeroHash, "", k0)
	behind := ready
	behind.Desired = "0000000000000000000000000000000000000000"
	behind.Refusal = &schemas.Refusal{Commit: d, Reason: "expired"}
	r.statuses["refused"] = status(behind, plumbing.ZeroHash, "", k0)
	held := ready
	held.Deferred = &schemas.Deferred{Reason: schemas.DeferredWindow, Message: "outside", Since: when, Commit: d}
	held.Stale, held.Vetoed, held.Artifacts = true, []string{"delete"}, "Verified"
	r.statuses["held"] = status(held, r.statuses["ready"], "", k0)
	r.statuses["unsigned"] = status(ready, plumbing.ZeroHash, "", nil)
	r.statuses["bad"] = b.Add(plumbing.BlobObject, []byte("not a commit"))
	r.statuses["bad-json"] = commit(b.Tree([]gitobj.Entry{{Name: schemas.StatusFile, Mode: filemode.Regular, Hash: blob("{")}}), plumbing.ZeroHash, "status\n", k0)
	// k0 hands over to k1, then k1 signs.
	hand := fmt.Sprintf("%s: %s\n%s: %s\n", TrailerKeyHandover, k1.AuthorizedKey(), TrailerKeyRetired, k0.AuthorizedKey())
	r.statuses["hand-over"] = status(ready, r.statuses["ready"], hand, k0)
	r.statuses["after-hand-over"] = status(held, r.statuses["hand-over"], "", k1)
	if err := b.Flush(st); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestIndexReadSameAsFleet: the index reads an install's desired state
// and status as fleet.ReadDesired and fleet.ReadInstall do, field for
// field of what it keeps, errors too; a status tip after a key hand-over
// checked against the key in force, and the hand-over itself, verify as
// fleet's walk of the history says.
func TestIndexReadSameAsFleet(t *testing.T) {
	k0, k1, k9 := testKey(t, "acme"), testKey(t, "globex"), testKey(t, "initech")
	r := newIndexReadRepo(t, k0, k1)
	repo, err := gitrepo.Open(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	st := repo.Storer()
	for name, h := range r.desired {
		t.Run("desired/"+name, func(t *testing.T) {
			want, werr := fleet.ReadDesired(st, h)
			want.Commit = ""
			for _, versions := range []bool{true, false} {
				got, gerr := readIndexDesired(st, h, versions)
				if (werr == nil) != (gerr == nil) {
					t.Fatalf("versions %v: error %v, fleet's %v", versions, gerr, werr)
				}
				if werr != nil {
					continue
				}
				w := want
				if !versions {
					w.Versions = nil // read for a page's rows only
				}
				if diff := cmp.Diff(w, got); diff != "" {
					t.Errorf("versions %v: (-fleet +index)\n%s", versions, diff)
				}
			}
		})
	}
	desired := r.desired["components"]
	for _, c := range []struct {
		status string
		key    *signature.Signer // the key in force at the tip; nil: none
	}{
		{"ready", k0}, {"ready", k9}, {"ready", nil},
		{"refused", k0}, {"held", k0}, {"unsigned", k0}, {"bad", k0}, {"bad-json", k0},
		{"hand-over", k1}, {"hand-over", k0},
		{"after-hand-over", k1}, {"after-hand-over", k9},
	} {
		key := ""
		if c.key != nil {
			key = c.key.AuthorizedKey()
		}
		t.Run(fmt.Sprintf("status/%s/%d", c.status, len(key)%7), func(t *testing.T) {
			h := r.statuses[c.status]
			tr := tableRepo{st: st, refs: map[string]installTips{"acme": {desired: desired, status: h}}}
			want, werr := fleet.ReadInstall(tr, "acme", h, key, time.Time{})
			got, gerr := readIndexStatus(st, "acme", h, desired, key)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("error %v, fleet's %v", gerr, werr)
			}
			if werr != nil {
				return
			}
			want.Commit = ""
			got.Commit = ""
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-fleet +index)\n%s", diff)
			}
		})
	}
	// The hand-over's tip, checked against the key it hands over to, is
	// fleet's: judged by the key it retires.
	tr := tableRepo{st: st, refs: map[string]installTips{"acme": {desired: desired, status: r.statuses["after-hand-over"]}}}
	if row, err := readIndexStatus(st, "acme", r.statuses["after-hand-over"], desired, k1.AuthorizedKey()); err != nil || !row.Verified {
		t.Errorf("status after the hand-over, k1 in force: verified %v, %v", row.Verified, err)
	}
	if row, err := fleet.ReadInstall(tr, "acme", r.statuses["after-hand-over"], k0.AuthorizedKey(), time.Time{}); err != nil || !row.Verified {
		t.Errorf("fleet: status after the hand-over, main naming k0: verified %v, %v", row.Verified, err)
	}
}

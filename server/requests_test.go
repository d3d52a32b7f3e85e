package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
)

// TestRenderOnRequest: an operator's request filed upstream (main does not
// change) reaches its install's rendered state after the next sync.
func TestRenderOnRequest(t *testing.T) {
	e := newEnv(t)
	work := filepath.Join(t.TempDir(), "work")
	e.mustGit("", "clone", "--quiet", "--no-local", "--branch", "main", e.upstream, work)
	if err := os.MkdirAll(filepath.Join(work, "trust"), 0o755); err != nil {
		t.Fatal(err)
	}
	op := e.keys["initech"]
	if err := os.WriteFile(filepath.Join(work, requests.TrustFile), []byte("alice "+op.AuthorizedKey()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.mustGit(work, "add", ".")
	e.mustGit(work, "commit", "--quiet", "-m", "trust alice for requests")
	e.mustGit(work, "push", "--quiet", "origin", "main")
	hook := e.hook
	hook()
	acmeRef := schemas.InstallRef("acme")

	up, err := gitrepo.Open(e.upstream)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	b := gitobj.NewBatch()
	h, err := requests.File(b, &schemas.Request{APIVersion: schemas.APIVersion, Kind: schemas.KindRequest, ID: "r-1", Install: "acme",
		Type: schemas.RequestLogs, Component: "network", Requester: "alice", Created: now, Deadline: now.Add(time.Hour)}, plumbing.ZeroHash, op)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(up.Storer()); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, e.upstream, "update-ref", requests.Ref, h.String())
	hook()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := gittest.Run(e.dir, nil, "show", acmeRef+":"+schemas.RequestsFile)
		if err == nil && strings.Contains(string(out), `\"id\": \"r-1\"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acme's requests.json: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

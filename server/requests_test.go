package server_test

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/policy"
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

// TestRenderOnApproval: an approver's approval filed upstream (main does
// not change) reaches its install's rendered state after the next sync,
// as a request does.
func TestRenderOnApproval(t *testing.T) {
	e := newEnv(t)
	work := filepath.Join(t.TempDir(), "work")
	e.mustGit("", "clone", "--quiet", "--no-local", "--branch", "main", e.upstream, work)
	if err := os.MkdirAll(filepath.Join(work, "trust"), 0o755); err != nil {
		t.Fatal(err)
	}
	approver := e.keys["initech"]
	list := "apiVersion: nuon.dev/v1\nkind: Approvers\nthreshold: 1\nkeys:\n  - name: release-manager\n    key: " + approver.AuthorizedKey() + "\n"
	if err := os.WriteFile(filepath.Join(work, schemas.ApproversPath), []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	e.mustGit(work, "add", ".")
	e.mustGit(work, "commit", "--quiet", "-m", "trust the release manager for approvals")
	e.mustGit(work, "push", "--quiet", "origin", "main")
	hook := e.hook
	hook()
	acmeRef := schemas.InstallRef("acme")

	now := time.Now().UTC().Truncate(time.Second)
	a := &schemas.Approval{APIVersion: schemas.APIVersion, Kind: schemas.KindApproval, Install: "acme", Component: "network",
		Plan: "sha256:" + strings.Repeat("ab", 32), Decision: schemas.DecisionApprove, Approver: "release-manager",
		Created: now, Expires: now.Add(time.Hour)}
	file, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	signed, err := policy.SignApproval(file, approver.SSH())
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(signed)
	if err != nil {
		t.Fatal(err)
	}
	up, err := gitrepo.Open(e.upstream)
	if err != nil {
		t.Fatal(err)
	}
	b := gitobj.NewBatch()
	dir, base := path.Split(schemas.ApprovalPath(a))
	_, id := path.Split(strings.TrimSuffix(dir, "/"))
	leaf := b.Tree([]gitobj.Entry{{Name: base, Mode: filemode.Regular, Hash: b.Add(plumbing.BlobObject, data)}})
	installs := b.Tree([]gitobj.Entry{{Name: id, Mode: filemode.Dir, Hash: leaf}})
	root := b.Tree([]gitobj.Entry{{Name: schemas.ApprovalsDir, Mode: filemode.Dir, Hash: installs}})
	h, err := b.Commit(gitobj.Commit{Tree: root, Author: object.Signature{Name: "release-manager", Email: "rm@vendor.example", When: now},
		Message: "nuon: approve acme/network\n"}, approver)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(up.Storer()); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, e.upstream, "update-ref", schemas.ApprovalsRef, h.String())
	hook()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := gittest.Run(e.dir, nil, "show", acmeRef+":approvals.json")
		if err == nil && strings.Contains(string(out), "release-manager") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acme's approvals.json: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

package server_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/policy"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// testPlan is the hash of the plan acme's db waits with (waitingPlan).
var testPlan = "sha256:" + strings.Repeat("3f", 32)

// waitingPlan writes a status for install into the server's repository in
// which component db waits for approval of plan.
func (e *env) waitingPlan(install, plan string) {
	e.t.Helper()
	st := schemas.Status{APIVersion: schemas.APIVersion, Kind: schemas.KindStatus, Install: install, Phase: schemas.InstallAwaitingApproval,
		Components: map[string]schemas.ComponentStatus{"db": {Phase: schemas.PhaseAwaitingApproval, Plan: &schemas.PlanRecord{
			Component: "db", Hash: plan, Needs: "replace requires approval",
			Summary: schemas.PlanSummary{Replace: []string{"terraform_data.db"}, Counts: map[string]int{schemas.ChangeReplace: 1}},
		}}}}
	data, err := json.Marshal(st)
	if err != nil {
		e.t.Fatal(err)
	}
	h := e.statusCommit(e.dir, install, "", e.keyFiles[install], string(data))
	e.mustGit(e.dir, "update-ref", schemas.StatusRef(install), h)
}

// signedApproval is an approval of plan for install's db, signed by key,
// after mut changed it.
func signedApproval(t *testing.T, key *signature.Signer, approver, install, plan string, mut func(*schemas.Approval)) schemas.SignedApproval {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Second)
	a := &schemas.Approval{APIVersion: schemas.APIVersion, Kind: schemas.KindApproval, Install: install, Component: "db",
		Plan: plan, Decision: schemas.DecisionApprove, Approver: approver, Created: now, Expires: now.Add(time.Hour)}
	if mut != nil {
		mut(a)
	}
	data, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	s, err := policy.SignApproval(append(data, '\n'), key.SSH())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// postApproval files s at base (a server's URL) with the HTTP request
// signed by key; it returns the status and the answer.
func postApproval(t *testing.T, base string, key *signature.Signer, s any) (int, string) {
	t.Helper()
	body, _ := json.Marshal(s)
	req, _ := http.NewRequest(http.MethodPost, base+server.ApprovalsPath, bytes.NewReader(body))
	if err := operatorSigner(key).Sign(req); err != nil {
		t.Fatal(err)
	}
	return send(t, req.Method, req.URL.String(), req.Header, body)
}

// TestOperatorApprove: an approver's approval filed through the server is
// on the approvals ref here and upstream, and in the install's desired
// state (approvals.json) when the answer comes; the approver reads the
// branches through the server too.
func TestOperatorApprove(t *testing.T) {
	e := newEnv(t)
	e.keys["approver"], e.keyFiles["approver"] = loadKey(t, "approver")
	e.waitingPlan("acme", testPlan)
	before := e.serverRef(schemas.InstallRef("acme"))

	if out := e.mustGit("", "ls-remote", e.operatorProxy(e.keys["approver"])); !strings.Contains(out, schemas.StatusRef("acme")) {
		t.Errorf("the approver does not read acme's status through the server:\n%s", out)
	}
	s := signedApproval(t, e.keys["approver"], "release-manager", "acme", testPlan, nil)
	code, body := postApproval(t, e.http.URL, e.keys["approver"], s)
	if code != http.StatusOK {
		t.Fatalf("file: %d %s", code, body)
	}
	var res server.ApprovalFiled
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		t.Fatal(err)
	}
	if res.Install != "acme" || res.Component != "db" || res.Plan != testPlan || res.Approver != "release-manager" {
		t.Errorf("answer %+v", res)
	}
	if got := e.serverRef(schemas.ApprovalsRef); got != res.Commit {
		t.Errorf("server's %s = %s, answer says %s", schemas.ApprovalsRef, got, res.Commit)
	}
	if got := strings.TrimSpace(gittest.Git(t, e.upstream, "rev-parse", schemas.ApprovalsRef)); got != res.Commit {
		t.Errorf("upstream's %s = %s, answer says %s", schemas.ApprovalsRef, got, res.Commit)
	}
	after := e.serverRef(schemas.InstallRef("acme"))
	if after == before || res.Desired != after {
		t.Errorf("acme's desired ref %s → %s, answer says %s", before, after, res.Desired)
	}
	out, err := gittest.Run(e.dir, nil, "show", schemas.InstallRef("acme")+":"+schemas.ApprovalsFile)
	if err != nil || !strings.Contains(string(out), testPlan) {
		t.Errorf("acme's approvals.json: %v\n%s", err, out)
	}
	// The file on the ref is the approval as signed: the agent verifies it.
	file, err := gittest.Run(e.dir, nil, "show", res.Commit+":"+res.Path)
	if err != nil {
		t.Fatal(err)
	}
	var got schemas.SignedApproval
	if err := json.Unmarshal([]byte(file), &got); err != nil || got != s {
		t.Errorf("filed %s, want the signed approval as sent (%v)", file, err)
	}
}

// TestOperatorApproveAttacks: what may not file an approval through the
// server. Each is refused and leaves the approvals ref where it was.
func TestOperatorApproveAttacks(t *testing.T) {
	e := newEnv(t)
	approver, _ := loadKey(t, "approver")
	op, _ := loadKey(t, "operator")
	e.waitingPlan("acme", testPlan)
	good := signedApproval(t, approver, "release-manager", "acme", testPlan, nil)
	if code, body := postApproval(t, e.http.URL, approver, good); code != http.StatusOK {
		t.Fatalf("file: %d %s", code, body)
	}
	tip := e.serverRef(schemas.ApprovalsRef)

	other := "sha256:" + strings.Repeat("ab", 32)
	swapped := good
	swapped.File = strings.Replace(good.File, testPlan, other, 1)
	elsewhere := good
	elsewhere.File = strings.Replace(good.File, `"install": "acme"`, `"install": "globex"`, 1)
	for _, c := range []struct {
		name string
		key  *signature.Signer // signs the HTTP request
		body any
		code int
		want string
	}{
		{"untrusted key", e.keys["render"], signedApproval(t, e.keys["render"], "release-manager", "acme", testPlan, nil), http.StatusUnauthorized, "not trusted"},
		{"install key", e.keys["acme"], signedApproval(t, e.keys["acme"], "release-manager", "acme", testPlan, nil), http.StatusUnauthorized, "not trusted"},
		{"request key as approver", op, signedApproval(t, op, "release-manager", "acme", testPlan, nil), http.StatusUnauthorized, "request key never approves"},
		{"approval signed by a request key", approver, signedApproval(t, op, "release-manager", "acme", testPlan, nil), http.StatusForbidden, "request key"},
		{"approval signed by the render key", approver, signedApproval(t, e.keys["render"], "release-manager", "acme", testPlan, nil), http.StatusForbidden, "render key"},
		{"approval signed by an untrusted key", approver, signedApproval(t, e.keys["globex"], "release-manager", "acme", testPlan, nil), http.StatusForbidden, "not in trust/approvals"},
		{"approver name not the signer's", approver, signedApproval(t, approver, "cto", "acme", testPlan, nil), http.StatusForbidden, `approver "cto"`},
		{"replayed approval", approver, good, http.StatusConflict, "filed already"},
		{"plan swapped under the signature", approver, swapped, http.StatusForbidden, "does not match"},
		{"install swapped under the signature", approver, elsewhere, http.StatusForbidden, "does not match"},
		{"another install's plan", approver, signedApproval(t, approver, "release-manager", "globex", testPlan, nil), http.StatusConflict, "no status"},
		{"a plan that does not wait", approver, signedApproval(t, approver, "release-manager", "acme", other, nil), http.StatusConflict, "waits"},
		{"no such install", approver, signedApproval(t, approver, "release-manager", "nobody", testPlan, nil), http.StatusNotFound, "no install nobody"},
		{"expired", approver, signedApproval(t, approver, "release-manager", "acme", testPlan, func(a *schemas.Approval) {
			a.Created, a.Expires = a.Created.Add(-2*time.Hour), a.Created.Add(-time.Hour)
		}), http.StatusForbidden, "expired"},
		{"valid for a month", approver, signedApproval(t, approver, "release-manager", "acme", testPlan, func(a *schemas.Approval) {
			a.Expires = a.Created.Add(30 * 24 * time.Hour)
		}), http.StatusForbidden, "more than 168h"},
		{"not an approval", approver, map[string]string{"file": "{}", "signature": "x", "extra": "y"}, http.StatusBadRequest, "not a signed approval"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := postApproval(t, e.http.URL, c.key, c.body)
			if code != c.code || !strings.Contains(body, c.want) {
				t.Errorf("%d %s, want %d and %q", code, strings.TrimSpace(body), c.code, c.want)
			}
			if got := e.serverRef(schemas.ApprovalsRef); got != tip {
				t.Errorf("%s moved to %s", schemas.ApprovalsRef, got)
			}
		})
	}

	t.Run("replayed HTTP request", func(t *testing.T) {
		s := signedApproval(t, approver, "release-manager", "acme", testPlan, func(a *schemas.Approval) { a.Reason = "again" })
		body, _ := json.Marshal(s)
		req, _ := http.NewRequest(http.MethodPost, e.http.URL+server.ApprovalsPath, bytes.NewReader(body))
		if err := operatorSigner(approver).Sign(req); err != nil {
			t.Fatal(err)
		}
		if code, out := send(t, req.Method, req.URL.String(), req.Header, body); code != http.StatusOK {
			t.Fatalf("first: %d %s", code, out)
		}
		if code, out := send(t, req.Method, req.URL.String(), req.Header, body); code != http.StatusUnauthorized || !strings.Contains(out, request.ErrReplay.Error()) {
			t.Errorf("replay: %d %s", code, out)
		}
	})

	t.Run("approver key at the request endpoints", func(t *testing.T) {
		for _, p := range []string{server.OperatorPath + "/requests", "/operator/rollouts"} {
			req, _ := http.NewRequest(http.MethodPost, e.http.URL+p, strings.NewReader("{}"))
			if err := operatorSigner(approver).Sign(req); err != nil {
				t.Fatal(err)
			}
			if code, out := send(t, req.Method, req.URL.String(), req.Header, []byte("{}")); code != http.StatusUnauthorized || !strings.Contains(out, "not trusted for requests") {
				t.Errorf("%s: %d %s", p, code, out)
			}
		}
	})

	t.Run("key listed as approver and operator", func(t *testing.T) {
		// main lists the operator's request key in trust/approvals too: it
		// still never approves.
		work := filepath.Join(t.TempDir(), "work")
		e.mustGit("", "clone", "--quiet", "--no-local", "--branch", "main", e.upstream, work)
		f := filepath.Join(work, schemas.ApproversPath)
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, []byte("  - name: support\n    key: "+strings.TrimSpace(string(op.AuthorizedKey()))+"\n")...)
		if err := os.WriteFile(f, data, 0o644); err != nil {
			t.Fatal(err)
		}
		e.mustGit(work, "commit", "--quiet", "-am", "support approves too")
		e.mustGit(work, "push", "--quiet", "origin", "main")
		if err := e.srv.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
		s := signedApproval(t, op, "support", "acme", testPlan, nil)
		if code, body := postApproval(t, e.http.URL, op, s); code != http.StatusUnauthorized || !strings.Contains(body, "request key never approves") {
			t.Errorf("signed and sent by the request key: %d %s", code, body)
		}
		if code, body := postApproval(t, e.http.URL, approver, s); code != http.StatusForbidden || !strings.Contains(body, "request key") {
			t.Errorf("signed by the request key, sent by the approver: %d %s", code, body)
		}
	})
}

// TestOperatorApproveThroughReplica: an approval filed through a read
// replica is checked there, forwarded unchanged to the writer, checked
// again and filed; the HTTP request replayed to either is refused.
func TestOperatorApproveThroughReplica(t *testing.T) {
	e := newEnv(t)
	approver, _ := loadKey(t, "approver")
	e.waitingPlan("acme", testPlan)
	w := writer(t, e)
	_, r := replica(t, e, w.URL, time.Hour)
	waitUntil(t, "the replica to be ready", func() bool { c, _ := getStatus(t, r.URL+"/readyz"); return c == 200 })
	s := signedApproval(t, approver, "release-manager", "acme", testPlan, nil)
	body, _ := json.Marshal(s)
	u := r.URL + server.ApprovalsPath
	req, _ := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
	if err := operatorSigner(approver).Sign(req); err != nil {
		t.Fatal(err)
	}
	code, out := send(t, req.Method, u, req.Header, body)
	if code != http.StatusOK {
		t.Fatalf("file through the replica: %d %s", code, out)
	}
	var res server.ApprovalFiled
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if got := e.serverRef(schemas.ApprovalsRef); got == "" || got != res.Commit {
		t.Errorf("the writer's %s = %q, answer says %s", schemas.ApprovalsRef, got, res.Commit)
	}
	for _, target := range []string{u, w.URL + server.ApprovalsPath} {
		if code, out := send(t, req.Method, target, req.Header, body); code != http.StatusUnauthorized {
			t.Errorf("replayed to %s: %d %s", target, code, out)
		}
	}
	// An untrusted key is refused at the replica already.
	if code, out := postApproval(t, r.URL, e.keys["render"], signedApproval(t, e.keys["render"], "release-manager", "acme", testPlan, nil)); code != http.StatusUnauthorized {
		t.Errorf("untrusted key through the replica: %d %s", code, out)
	}
}

// TestOperatorApproveScope: with a trust root on main that defines the
// approvers role, an approver's key approves only for the installs its
// scope names, and the root's operators keys never approve.
func TestOperatorApproveScope(t *testing.T) {
	e := newEnv(t)
	approver, _ := loadKey(t, "approver")
	op, _ := loadKey(t, "operator")
	e.commitScopedRoot(t, func(rs *schemas.TrustRoles, auth func(ssh.PublicKey) string) {
		rs.Approvers = &schemas.TrustRole{Threshold: 1, Keys: []schemas.TrustKey{{Name: "release-manager", Key: auth(approver.PublicKey()), Scope: goldOnly}}}
		rs.Operators = &schemas.TrustRole{Threshold: 1, Keys: []schemas.TrustKey{{Name: "support", Key: auth(op.PublicKey())}}}
	})
	e.waitingPlan("acme", testPlan)
	e.waitingPlan("globex", testPlan)
	code, body := postApproval(t, e.http.URL, approver, signedApproval(t, approver, "release-manager", "acme", testPlan, nil))
	if code != http.StatusForbidden || !strings.Contains(body, "outside the key's scope") {
		t.Errorf("acme: %d %s", code, body)
	}
	if got := e.serverRef(schemas.ApprovalsRef); got != "" {
		t.Errorf("%s moved to %s", schemas.ApprovalsRef, got)
	}
	if code, body := postApproval(t, e.http.URL, approver, signedApproval(t, approver, "release-manager", "globex", testPlan, nil)); code != http.StatusOK {
		t.Errorf("globex: %d %s", code, body)
	}
}

// TestOperatorApproveRaceUpstream: an approval committed on the upstream
// directly (nuon approve --repo) that the server has not fetched: the
// server's push is refused by its lease, it fetches and files again on
// the new tip; both approvals stay.
func TestOperatorApproveRaceUpstream(t *testing.T) {
	e := newEnv(t)
	approver, _ := loadKey(t, "approver")
	e.waitingPlan("acme", testPlan)
	e.waitingPlan("globex", testPlan)
	up, err := gitrepo.Open(e.upstream)
	if err != nil {
		t.Fatal(err)
	}
	direct := signedApproval(t, approver, "release-manager", "globex", testPlan, nil)
	a, err := schemas.DecodeApproval([]byte(direct.File))
	if err != nil {
		t.Fatal(err)
	}
	file, _ := json.MarshalIndent(direct, "", "  ")
	b := gitobj.NewBatch()
	h, err := server.ApprovalCommit(up.Storer(), b, plumbing.ZeroHash, schemas.ApprovalPath(a), append(file, '\n'), a, approver, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(up.Storer()); err != nil {
		t.Fatal(err)
	}
	e.mustGit(e.upstream, "update-ref", schemas.ApprovalsRef, h.String())

	code, body := postApproval(t, e.http.URL, approver, signedApproval(t, approver, "release-manager", "acme", testPlan, nil))
	if code != http.StatusOK {
		t.Fatalf("file: %d %s", code, body)
	}
	files := e.mustGit(e.upstream, "ls-tree", "-r", "--name-only", schemas.ApprovalsRef)
	if !strings.Contains(files, "approvals/acme/") || !strings.Contains(files, "approvals/globex/") {
		t.Errorf("upstream's approvals after the race:\n%s", files)
	}
	if got, want := e.serverRef(schemas.ApprovalsRef), e.mustGit(e.upstream, "rev-parse", schemas.ApprovalsRef); got != want {
		t.Errorf("server's %s %s, upstream's %s", schemas.ApprovalsRef, got, want)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/cmd/internal/cli"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/policy"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// approveRepo is a tenant repository whose main lists the fixture
// approver in trust/approvals and whose acme status has db's plan waiting.
func approveRepo(t *testing.T, plan string) string {
	t.Helper()
	srv := gittest.NewServer(t)
	bare := srv.InitBare(t, "tenant.git")
	src := t.TempDir()
	trust, err := os.ReadFile("../../fixtures/tenant/trust/approvals")
	if err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(src, "trust", "approvals"), trust)
	gittest.CommitDir(t, bare, "main", src, "main")
	status := waitingStatus(t, plan)
	gittest.CommitDir(t, bare, "nuon/status/acme", status, "status")
	return bare
}

// waitingStatus is a folder holding acme's status.json in which db waits
// for approval of plan.
func waitingStatus(t *testing.T, plan string) string {
	t.Helper()
	st := schemas.Status{APIVersion: schemas.APIVersion, Kind: schemas.KindStatus, Install: "acme", Phase: schemas.InstallAwaitingApproval,
		Components: map[string]schemas.ComponentStatus{"db": {Phase: schemas.PhaseAwaitingApproval, Plan: &schemas.PlanRecord{
			Component: "db", Hash: plan, Needs: "replace requires approval", Diff: "-/+ terraform_data.db",
			Summary: schemas.PlanSummary{Replace: []string{"terraform_data.db"}, Counts: map[string]int{schemas.ChangeReplace: 1}},
		}}}}
	data, _ := json.Marshal(st)
	status := t.TempDir()
	writeTestFile(t, filepath.Join(status, schemas.StatusFile), data)
	return status
}

func writeTestFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func runApprove(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRoot(&out, &errOut)
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	err := root.ExecuteContext(context.Background())
	return out.String() + errOut.String(), err
}

func TestApproveFilesASignedApproval(t *testing.T) {
	plan := "sha256:" + strings.Repeat("3f", 32)
	bare := approveRepo(t, plan)
	keys := "../../fixtures/keys/"
	out, err := runApprove(t, "approvals", "--repo", bare, "--diff")
	if err != nil || !strings.Contains(out, plan) || !strings.Contains(out, "1 replace") || !strings.Contains(out, "-/+ terraform_data.db") {
		t.Fatalf("nuon approvals: %v\n%s", err, out)
	}

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"another plan", []string{"approve", "acme", "db", "--plan", "sha256:" + strings.Repeat("00", 32), "--key", keys + "approver"}, "is not the one acme/db waits with"},
		{"no plan waits", []string{"approve", "acme", "api", "--plan", plan, "--key", keys + "approver"}, "no plan of acme/api waits"},
		{"a request key", []string{"approve", "acme", "db", "--plan", plan, "--key", keys + "operator"}, "is not in trust/approvals on main"},
		{"not a hash", []string{"approve", "acme", "db", "--plan", "3f3f", "--key", keys + "approver"}, "is not a plan hash"},
		{"forever", []string{"approve", "acme", "db", "--plan", plan, "--key", keys + "approver", "--expires", "9000h"}, "at most 168h"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runApprove(t, append(tt.args, "--repo", bare)...)
			if err == nil || !strings.Contains(err.Error()+out, tt.want) {
				t.Errorf("error %v, want %q\n%s", err, tt.want, out)
			}
		})
	}
	if got := gittest.Git(t, bare, "for-each-ref", schemas.ApprovalsRef); got != "" {
		t.Fatalf("refused approvals were filed: %s", got)
	}

	out, err = runApprove(t, "approve", "acme", "db", "--plan", plan, "--key", keys+"approver", "--repo", bare, "--reason", "CAB-7", "-o", "json")
	if err != nil {
		t.Fatalf("nuon approve: %v\n%s", err, out)
	}
	var a schemas.Approval
	if err := json.Unmarshal([]byte(out), &a); err != nil || a.Approver != "release-manager" || a.Plan != plan {
		t.Fatalf("approve -o json: %v %+v", err, a)
	}
	path := schemas.ApprovalPath(&a)
	file := gittest.Git(t, bare, "show", schemas.ApprovalsRef+":"+path)
	var s schemas.SignedApproval
	if err := json.Unmarshal([]byte(file), &s); err != nil {
		t.Fatal(err)
	}
	as, err := policy.ParseApprovers("trust/approvals", []byte(gittest.Git(t, bare, "show", "main:trust/approvals")))
	if err != nil {
		t.Fatal(err)
	}
	v := as.Judge([]schemas.SignedApproval{s}, policy.Target{Install: "acme", Component: "db", Plan: plan}, time.Now())
	if !v.Approved || len(v.Refused) > 0 {
		t.Errorf("the filed approval does not approve the plan: %+v", v)
	}
	// The commit itself is signed by the approver too: git history says who.
	signer, err := signature.LoadSigner(keys + "approver")
	if err != nil {
		t.Fatal(err)
	}
	allowed := filepath.Join(t.TempDir(), "allowed")
	writeTestFile(t, allowed, []byte("release-manager "+signer.AuthorizedKey()+"\n"))
	gittest.Git(t, bare, "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+allowed, "verify-commit", schemas.ApprovalsRef)

	if out, err := runApprove(t, "reject", "acme", "db", "--plan", plan, "--key", keys+"approver", "--repo", bare); err != nil || !strings.Contains(out, "rejected acme/db") {
		t.Fatalf("nuon reject: %v\n%s", err, out)
	}
	files := gittest.Git(t, bare, "ls-tree", "-r", "--name-only", schemas.ApprovalsRef)
	if strings.Count(files, "\n") != 1 || !strings.Contains(files, "-approve.json") || !strings.Contains(files, "-reject.json") {
		t.Errorf("approvals tree after a reject:\n%s", files)
	}
}

// TestApproveThroughServer: nuon approvals and nuon approve against a
// real tenant server (--server, or $NUON_SERVER_URL) with the approver's
// key: the server files the approval on the approvals ref upstream and
// renders acme's desired state with it before the command returns; an
// operator's request key reads the plans but cannot approve them.
func TestApproveThroughServer(t *testing.T) {
	plan := "sha256:" + strings.Repeat("3f", 32)
	keys := "../../fixtures/keys/"
	upstream := filepath.Join(t.TempDir(), "tenant.git")
	gittest.InitBare(t, upstream)
	commitTenant(t, upstream, nil)
	status := waitingStatus(t, plan)

	render, err := signature.LoadSigner(keys + "render")
	if err != nil {
		t.Fatal(err)
	}
	served := filepath.Join(t.TempDir(), "served.git")
	gittest.InitBare(t, served)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := server.New(ctx, server.Config{Dir: served, RenderKey: render, Upstream: upstream, PollInterval: time.Hour, MirrorDelay: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// As acme's agent pushes it to the server (the upstream has no status).
	gittest.CommitDir(t, served, "nuon/status/acme", status, "status")
	hs := httptest.NewServer(srv)
	defer hs.Close()
	t.Setenv(cli.EnvServer, hs.URL)
	t.Setenv(cli.EnvOperatorKey, keys+"operator")

	// The operator's key (from the environment) reads the waiting plans.
	out, err := runApprove(t, "approvals", "--diff")
	if err != nil || !strings.Contains(out, plan) || !strings.Contains(out, "1 replace") {
		t.Fatalf("nuon approvals through the server: %v\n%s", err, out)
	}
	// It does not approve them, neither at the CLI nor at the server.
	if out, err := runApprove(t, "approve", "acme", "db", "--plan", plan); err == nil || !strings.Contains(err.Error(), "not in trust/approvals") {
		t.Errorf("approve with the operator key: %v\n%s", err, out)
	}
	if out, err := runApprove(t, "approvals", "--key", keys+"approver", "--install", "acme", "-o", "json"); err != nil || !strings.Contains(out, plan) {
		t.Fatalf("nuon approvals with the approver's key: %v\n%s", err, out)
	}
	before := strings.TrimSpace(gittest.Git(t, served, "rev-parse", schemas.InstallRef("acme")))
	out, err = runApprove(t, "approve", "acme", "db", "--plan", plan, "--key", keys+"approver", "--reason", "CAB-7")
	if err != nil || !strings.Contains(out, "approved acme/db") {
		t.Fatalf("nuon approve through the server: %v\n%s", err, out)
	}
	tip := strings.TrimSpace(gittest.Git(t, upstream, "rev-parse", schemas.ApprovalsRef))
	if got := strings.TrimSpace(gittest.Git(t, served, "rev-parse", schemas.ApprovalsRef)); got != tip {
		t.Errorf("approvals ref: server %s, upstream %s", got, tip)
	}
	after := strings.TrimSpace(gittest.Git(t, served, "rev-parse", schemas.InstallRef("acme")))
	if after == before || !strings.Contains(gittest.Git(t, served, "show", after+":"+schemas.ApprovalsFile), plan) {
		t.Errorf("acme was not rendered with the approval before nuon approve returned (%s → %s)", before, after)
	}
	// --repo wins over $NUON_SERVER_URL, as for the other commands.
	if out, err := runApprove(t, "approvals", "--repo", served, "--install", "acme"); err != nil || !strings.Contains(out, plan) {
		t.Errorf("nuon approvals --repo: %v\n%s", err, out)
	}
}

// TestPrintPlansSaysWhy: the WHY column says what the operator must do:
// approve (the rule that needs it), nothing (a policy denied the plan),
// or a new plan (an approver rejected it).
func TestPrintPlansSaysWhy(t *testing.T) {
	plan := "sha256:" + strings.Repeat("3f", 32)
	for _, tt := range []struct {
		rec  schemas.PlanRecord
		want string
	}{
		{schemas.PlanRecord{Hash: plan, Needs: "replace requires approval"}, "replace requires approval"},
		{schemas.PlanRecord{Hash: plan, Needs: "mode manual", Denied: []string{"local_file.config would be destroyed"}}, "denied by policy: local_file.config would be destroyed"},
		{schemas.PlanRecord{Hash: plan, Needs: "mode manual", Rejected: "release-manager"}, "rejected by release-manager"},
	} {
		var out bytes.Buffer
		rec := tt.rec
		if err := printPlans(&out, []server.PendingPlan{{Install: "globex", Component: "database", Phase: schemas.PhaseRejected, Plan: &rec}}, false); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tt.want) {
			t.Errorf("want %q in\n%s", tt.want, out.String())
		}
	}
}

// TestApproveAsCustomer: the customer signs their own approval inside the
// install with the key their policy pins; the file lands beside the
// policy, where the agent reads it, and the customer's approvers judge it
// approved. A key the policy does not pin, or a --server, is refused.
func TestApproveAsCustomer(t *testing.T) {
	plan := "sha256:" + strings.Repeat("3f", 32)
	dir := t.TempDir()
	pub, err := os.ReadFile("../../fixtures/keys/globex.pub")
	if err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "customer.yaml")
	writeTestFile(t, pol, []byte("apiVersion: nuon.dev/v1\nkind: CustomerPolicy\napprovers:\n  - name: dba\n    key: "+strings.TrimSpace(string(pub))+"\nrequireApproval: {components: [database], changes: [replace]}\n"))
	keys := "../../fixtures/keys/"
	out, err := runApprove(t, "approve", "acme", "database", "--plan", plan, "--key", keys+"globex", "--customer-policy", pol, "--reason", "change window agreed")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.approval.json"))
	if len(files) != 1 || !strings.Contains(out, files[0]) || !strings.Contains(out, "dba: approved acme/database") {
		t.Fatalf("files %v, output %s", files, out)
	}
	var s schemas.SignedApproval
	if err := json.Unmarshal([]byte(readFileT(t, files[0])), &s); err != nil {
		t.Fatal(err)
	}
	c, err := policy.Load(pol)
	if err != nil {
		t.Fatal(err)
	}
	v := c.ApprovalKeys(nil).Judge([]schemas.SignedApproval{s}, policy.Target{Install: "acme", Component: "database", Plan: plan, AnyChannel: true}, time.Now())
	if !v.Approved || !slices.Equal(v.Approvers, []string{"dba"}) {
		t.Fatalf("the customer's approvers judge %+v", v)
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"a key not pinned", []string{"--key", keys + "approver"}, "pins no approver with the key"},
		{"through the server", []string{"--key", keys + "globex", "--server", "http://127.0.0.1:1"}, "give neither --server nor --repo"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"approve", "acme", "database", "--plan", plan, "--customer-policy", pol}, tt.args...)
			if out, err := runApprove(t, args...); err == nil || !strings.Contains(err.Error()+out, tt.want) {
				t.Fatalf("want %q, got %v\n%s", tt.want, err, out)
			}
		})
	}
}

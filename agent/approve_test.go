package agent_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/testenv"
	"nuon.dev/nuon/policy"
	"nuon.dev/nuon/schemas"
)

// dbModule stands in for a database: its size replaces it, as a new
// instance class would. terraform_data is built into terraform: no
// provider to install.
var dbModule = map[string]string{"main.tf": `
variable "size" { type = string }
resource "terraform_data" "db" {
  input            = var.size
  triggers_replace = var.size
}
output "size" { value = terraform_data.db.output }
`}

// approvalApp is a tenant whose app is one terraform component, db, with
// the default approval rules (create and update apply, delete and replace
// wait), its module in an OCI layout the real terraform plugin reads,
// trust/approvals on main listing the fixture approver, and acme's agent
// trusting that approver with the render and request keys excluded.
type approvalApp struct {
	tn        *tenant
	ia        *installAgent
	approvals string // the approvals branch's work tree
	clk       *clock
	layout    string // the modules' OCI layout, for another agent of acme
}

func newApprovalApp(t testing.TB, policies ...string) *approvalApp {
	t.Helper()
	return newApprovalAppOf(t, dbModule, `    inputs: {size: "${install.inputs.size}"}
    approval: {}
`, nil, policies...)
}

// newApprovalAppOf is newApprovalApp with another module for db and other
// settings (component is the YAML after db's repository line), and
// configure, if set, changing the agent's configuration.
func newApprovalAppOf(t testing.TB, module map[string]string, component string, configure func(*agent.Config), policies ...string) *approvalApp {
	t.Helper()
	if _, err := exec.LookPath("terraform"); err != nil {
		testenv.Missing(t, "terraform is not installed")
	}
	layout, digests := moduleLayout(t, map[string]map[string]string{"db": module})
	clk := &clock{now: time.Now().UTC().Truncate(time.Second)}
	tn := newTenant(t, func(tn *tenant) { tn.now = clk.Now })
	for _, c := range []string{"a", "b", "c", "d"} {
		os.Remove(filepath.Join(tn.src, "releases", c+".yaml"))
	}
	tn.write("nuon.yaml", `name: test
components:
  - name: db
    type: terraform
    repository: registry.test/app/db
`+component)
	tn.write("releases/db.yaml", "component: db\nversions:\n  - version: 1.0.0\n    artifacts: {module: {digest: "+digests["db"]+"}}\n")
	tn.write("channels/stable.yaml", "components: {db: 1.0.0}\n")
	tn.write("trust/approvals", readFile(t, "../fixtures/tenant/trust/approvals"))
	for i, p := range policies {
		tn.write("policies/p"+string(rune('a'+i))+".rego", p)
	}
	setSize(tn, "small")
	tn.commit("db with approvals")
	tn.renderMain()

	approvers, err := policy.ParseApprovers("trust/approvals", []byte(readFile(t, "../fixtures/tenant/trust/approvals")))
	if err != nil {
		t.Fatal(err)
	}
	approvers.Exclude("render", tn.render.PublicKey())
	approvers.Exclude("request", loadSSHSigner(t, "operator").PublicKey())
	ia := tn.agent("acme", func(cfg *agent.Config) {
		cfg.Now = clk.Now
		cfg.Heartbeat = -1
		cfg.Approvers = approvers
		l := cfg.Runner.(*jobs.Local)
		l.Env = append(l.Env, "NUON_TEST_LAYOUT="+layout)
		cfg.JobTimeout = 0
		if configure != nil {
			configure(cfg)
		}
	})
	return &approvalApp{tn: tn, ia: ia, approvals: t.TempDir(), clk: clk, layout: layout}
}

func setSize(tn *tenant, size string) {
	tn.write("installs/acme.yaml", `channel: stable
inputs: {size: "`+size+`"}
cloud: {provider: local}
sandbox: {name: local}
registry: 127.0.0.1:5000/acme
agentKey: `+tn.keys["acme"].AuthorizedKey()+"\n")
	os.Remove(filepath.Join(tn.src, "installs", "globex.yaml"))
}

func loadSSHSigner(t testing.TB, name string) ssh.Signer {
	t.Helper()
	s, err := ssh.ParsePrivateKey([]byte(readFile(t, filepath.Join(fixtureKeys, name))))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// file signs an approval with the named fixture key, commits it to
// refs/heads/nuon/approvals as nuon approve does, and renders.
func (app *approvalApp) file(t testing.TB, key string, a schemas.Approval) []string {
	t.Helper()
	a.APIVersion, a.Kind = schemas.APIVersion, schemas.KindApproval
	if a.Install == "" {
		a.Install = "acme"
	}
	if a.Component == "" {
		a.Component = "db"
	}
	if a.Decision == "" {
		a.Decision = schemas.DecisionApprove
	}
	if a.Approver == "" {
		a.Approver = "release-manager"
	}
	a.Created = app.clk.Now().Add(-time.Minute)
	if a.Expires.IsZero() {
		a.Expires = app.clk.Now().Add(24 * time.Hour)
	}
	data, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	s, err := policy.SignApproval(data, loadSSHSigner(t, key))
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(app.approvals, schemas.ApprovalPath(&a))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(out))
	gittest.CommitDir(t, app.tn.bare, "nuon/approvals", app.approvals, "approve")
	return app.tn.renderMain().Warnings
}

// jobKinds lists the plan-bound jobs of a pass: record or apply.
func jobKinds(rep *agent.Report) []string {
	var out []string
	for _, j := range rep.Jobs {
		k := j.Operation
		if j.Plan != nil {
			k = j.Plan.Mode
		}
		out = append(out, k)
	}
	return out
}

// TestApprovalByHash runs db through the approval flow with the real
// terraform: a create applies at once (auto-approved) after its plan; a
// replace waits, AwaitingApproval and deferred with the plan's record in
// the signed status; approvals for another plan, by a request key, for
// another install or expired apply nothing and are recorded as refused;
// the approval of the waiting plan's hash applies exactly that saved plan,
// without planning again.
func TestApprovalByHash(t *testing.T) {
	app := newApprovalApp(t)
	tn, ia := app.tn, app.ia

	rep := ia.reconcile(t)
	if got := jobKinds(rep); !slices.Equal(got, []string{schemas.PlanRecordMode, schemas.PlanApplyMode}) || rep.Status.Phase != schemas.InstallReady {
		t.Fatalf("first pass: jobs %v, phase %s, components %+v", got, rep.Status.Phase, rep.Status.Components)
	}
	if out := rep.Status.Components["db"].Outputs["size"]; out != "small" {
		t.Fatalf("db size %v, want small", out)
	}

	setSize(tn, "large")
	tn.commit("acme: db large")
	tn.renderMain()
	rep = ia.reconcile(t)
	st := serverStatus(t, tn)
	cs := st.Components["db"]
	if got := jobKinds(rep); !slices.Equal(got, []string{schemas.PlanRecordMode}) {
		t.Fatalf("replace: jobs %v, want one plan", got)
	}
	if st.Phase != schemas.InstallAwaitingApproval || cs.Phase != schemas.PhaseAwaitingApproval || cs.Plan == nil ||
		st.Deferred == nil || st.Deferred.Reason != schemas.DeferredApproval {
		t.Fatalf("replace: install %s, db %s, deferred %+v, plan %+v", st.Phase, cs.Phase, st.Deferred, cs.Plan)
	}
	if rep.Outcome == agent.OutcomeFailed {
		t.Errorf("waiting for approval is reported as a failure")
	}
	plan := cs.Plan
	if !slices.Equal(plan.Summary.Replace, []string{"terraform_data.db"}) || !strings.Contains(plan.Diff, "must be replaced") || !strings.Contains(plan.Needs, "replace") {
		t.Errorf("plan record: %+v", plan)
	}
	if cs.Outputs["size"] != "small" {
		t.Errorf("applied before approval: %v", cs.Outputs)
	}

	other := "sha256:" + strings.Repeat("0", 64)
	app.file(t, "approver", schemas.Approval{Plan: other})
	if w := app.file(t, "operator", schemas.Approval{Plan: plan.Hash, Approver: "support"}); !slices.ContainsFunc(w, func(s string) bool {
		return strings.Contains(s, "support-approve.json dropped: approval not signed by a trusted approver")
	}) {
		t.Errorf("the renderer passed on an approval signed by a request key: %q", w)
	}
	app.file(t, "approver", schemas.Approval{Plan: plan.Hash, Install: "globex"})
	rep = ia.reconcile(t)
	st = serverStatus(t, tn)
	if got := jobKinds(rep); len(got) != 0 {
		t.Fatalf("refused approvals ran jobs %v", got)
	}
	if cs := st.Components["db"]; cs.Phase != schemas.PhaseAwaitingApproval || cs.Outputs["size"] != "small" || cs.Plan.Hash != plan.Hash || len(cs.Plan.Refused) != 1 {
		// The request key's approval was dropped by the renderer, and
		// the approval for globex reaches only globex: acme refuses the
		// one for another plan. (policy's tests sign the others as an
		// attacker who reached the desired state would.)
		t.Fatalf("after refused approvals: %s, outputs %v, refused %q", cs.Phase, cs.Outputs, cs.Plan.Refused)
	}

	// The approval expires before the install sees it.
	app.file(t, "approver", schemas.Approval{Plan: plan.Hash, Reason: "late", Expires: app.clk.Now().Add(time.Minute)})
	app.clk.now = app.clk.now.Add(2 * time.Minute)
	rep = ia.reconcile(t)
	if got := jobKinds(rep); len(got) != 0 || serverStatus(t, tn).Components["db"].Phase != schemas.PhaseAwaitingApproval {
		t.Fatalf("an expired approval ran jobs %v", got)
	}

	began := time.Now()
	app.file(t, "approver", schemas.Approval{Plan: plan.Hash, Reason: "reviewed the replace"})
	filed := time.Now()
	rep = ia.reconcile(t)
	// The figures of the "from nuon approve to the apply": filing
	// and rendering, then the agent's pass (fetch, verify, judge, apply).
	approvals := tn.git("show", schemas.InstallRef("acme")+":"+schemas.ApprovalsFile)
	var inTree schemas.InstallApprovals
	if err := json.Unmarshal([]byte(approvals), &inTree); err != nil {
		t.Fatal(err)
	}
	t.Logf("approve→render %s, render→applied %s (pass incl. terraform apply), approvals.json %d bytes for %d approvals",
		filed.Sub(began).Round(time.Millisecond), time.Since(filed).Round(time.Millisecond), len(approvals), len(inTree.Approvals))
	st = serverStatus(t, tn)
	if got := jobKinds(rep); !slices.Equal(got, []string{schemas.PlanApplyMode}) || rep.Jobs[0].Plan.Hash != plan.Hash {
		t.Fatalf("approved: jobs %v, want one apply of %s (no re-plan)", got, plan.Hash)
	}
	if cs := st.Components["db"]; st.Phase != schemas.InstallReady || cs.Phase != schemas.PhaseApplied || cs.Outputs["size"] != "large" || cs.Plan != nil || st.Deferred != nil {
		t.Fatalf("after approval: install %s, db %s %v, plan %+v, deferred %+v", st.Phase, cs.Phase, cs.Outputs, cs.Plan, st.Deferred)
	}
	msg := tn.git("log", "-1", "--format=%B", schemas.StatusRef("acme"))
	if !strings.Contains(msg, "applied plan "+plan.Hash+" of db (approved by release-manager)") {
		t.Errorf("the status commit does not say who approved what:\n%s", msg)
	}
}

// TestApprovalPolicy: the plan policies shipped in the desired state judge
// the saved plan in the install. A warn makes a create (auto-approved by
// the rules) wait for approval; a deny blocks a replace, whoever approves
// it, with the policy's message in the status; nothing is applied.
func TestApprovalPolicy(t *testing.T) {
	app := newApprovalApp(t, `package t

import rego.v1

deny contains msg if {
	some rc in input.plan.resource_changes
	rc.type == "terraform_data"
	"delete" in rc.change.actions
	msg := sprintf("%s: %s would be destroyed", [input.component, rc.address])
}

warn contains msg if {
	some rc in input.plan.resource_changes
	"create" in rc.change.actions
	rc.change.after.input == "small"
	msg := sprintf("%s: a small database", [input.component])
}
`)
	tn, ia := app.tn, app.ia
	rep := ia.reconcile(t)
	st := serverStatus(t, tn)
	cs := st.Components["db"]
	if got := jobKinds(rep); !slices.Equal(got, []string{schemas.PlanRecordMode}) || cs.Phase != schemas.PhaseAwaitingApproval ||
		!slices.Equal(cs.Plan.Warnings, []string{"db: a small database"}) || !strings.Contains(cs.Plan.Needs, "policy warns: db: a small database") {
		t.Fatalf("warned create: jobs %v, %s, plan %+v", got, cs.Phase, cs.Plan)
	}
	app.file(t, "approver", schemas.Approval{Plan: cs.Plan.Hash})
	if rep := ia.reconcile(t); !slices.Equal(jobKinds(rep), []string{schemas.PlanApplyMode}) || rep.Status.Components["db"].Outputs["size"] != "small" {
		t.Fatalf("approved create: jobs %v, %+v", jobKinds(rep), rep.Status.Components["db"])
	}

	setSize(tn, "large")
	tn.commit("acme: db large")
	tn.renderMain()
	rep = ia.reconcile(t)
	st = serverStatus(t, tn)
	cs = st.Components["db"]
	if got := jobKinds(rep); !slices.Equal(got, []string{schemas.PlanRecordMode}) || cs.Phase != schemas.PhaseRejected ||
		!slices.Equal(cs.Plan.Denied, []string{"db: terraform_data.db would be destroyed"}) || !strings.Contains(cs.Error, "denied by policy") {
		t.Fatalf("denied replace: jobs %v, %s %q, plan %+v", got, cs.Phase, cs.Error, cs.Plan)
	}
	// An approval of the denied plan changes nothing.
	app.file(t, "approver", schemas.Approval{Plan: cs.Plan.Hash})
	rep = ia.reconcile(t)
	if got := jobKinds(rep); len(got) != 0 && !slices.Equal(got, []string{schemas.PlanRecordMode}) {
		t.Fatalf("approval of a denied plan ran %v", got)
	}
	if cs := serverStatus(t, tn).Components["db"]; cs.Phase != schemas.PhaseRejected || cs.Outputs["size"] != "small" {
		t.Fatalf("after approving a denied plan: %s %v", cs.Phase, cs.Outputs)
	}
}

// TestApprovalRejected: a rejection of the waiting plan wins over an
// approval of it; nothing is applied and the status names who rejected.
func TestApprovalRejected(t *testing.T) {
	app := newApprovalApp(t)
	tn, ia := app.tn, app.ia
	ia.reconcile(t)
	setSize(tn, "large")
	tn.commit("acme: db large")
	tn.renderMain()
	ia.reconcile(t)
	plan := serverStatus(t, tn).Components["db"].Plan
	app.file(t, "approver", schemas.Approval{Plan: plan.Hash, Decision: schemas.DecisionReject, Reason: "not during the sale"})
	app.file(t, "approver", schemas.Approval{Plan: plan.Hash})
	rep := ia.reconcile(t)
	cs := serverStatus(t, tn).Components["db"]
	if got := jobKinds(rep); len(got) != 0 || cs.Phase != schemas.PhaseRejected || cs.Plan.Rejected != "release-manager" || cs.Outputs["size"] != "small" {
		t.Fatalf("rejected plan: jobs %v, %s %q, plan %+v, outputs %v", got, cs.Phase, cs.Error, cs.Plan, cs.Outputs)
	}
}

package agent_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/policy"
	"nuon.dev/nuon/schemas"
)

// TestCustomerApproval: the customer's policy requires the customer's
// own approval of a replace of db, signed by a key pinned in that policy.
// The vendor's approval alone leaves the plan waiting (deferred for the
// customer's approval, not failed); approvals signed by the vendor's
// approver key (listed on main, not pinned), by a key pinned but also
// trusted by the vendor, expired, for another install or another plan
// count for nothing and are recorded as refused; the customer's approval
// of the waiting hash applies it, without planning again.
func TestCustomerApproval(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	customerKey, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	vendorKey := loadSSHSigner(t, "approver")
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	writeFile(t, policyFile, `apiVersion: nuon.dev/v1
kind: CustomerPolicy
approvers:
  - name: acme-sre
    key: `+strings.TrimSpace(string(ssh.MarshalAuthorizedKey(customerKey.PublicKey())))+`
requireApproval: {components: [db], changes: [delete, replace]}
`)
	app := newApprovalAppOf(t, dbModule, `    inputs: {size: "${install.inputs.size}"}
    approval: {}
`, func(c *agent.Config) { c.CustomerPolicy = policyFile })
	tn, ia := app.tn, app.ia

	// The create needs neither approval.
	if rep := ia.reconcile(t); !slices.Equal(jobKinds(rep), []string{schemas.PlanRecordMode, schemas.PlanApplyMode}) {
		t.Fatalf("create: jobs %v", jobKinds(rep))
	}
	setSize(tn, "large")
	tn.commit("acme: db large")
	tn.renderMain()
	ia.reconcile(t)
	plan := serverStatus(t, tn).Components["db"].Plan
	if plan == nil || !strings.Contains(plan.Customer, "the customer's approval of a replace of db") {
		t.Fatalf("the replace's record does not say the customer must approve it: %+v", plan)
	}

	// The vendor approves: still waiting, now for the customer.
	app.file(t, "approver", schemas.Approval{Plan: plan.Hash})
	rep := ia.reconcile(t)
	st := serverStatus(t, tn)
	cs := st.Components["db"]
	if got := jobKinds(rep); len(got) != 0 {
		t.Fatalf("the vendor's approval alone ran %v", got)
	}
	if cs.Phase != schemas.PhaseAwaitingApproval || cs.Outputs["size"] != "small" || st.Phase != schemas.InstallAwaitingApproval ||
		st.Deferred == nil || st.Deferred.Reason != schemas.DeferredCustomerApproval {
		t.Fatalf("after the vendor's approval: db %s %v, install %s, deferred %+v", cs.Phase, cs.Outputs, st.Phase, st.Deferred)
	}
	if rep.Outcome == agent.OutcomeFailed {
		t.Error("waiting for the customer is reported as a failure")
	}

	customer := func(name string, signer ssh.Signer, mut func(*schemas.Approval)) {
		t.Helper()
		a := schemas.Approval{
			APIVersion: schemas.APIVersion, Kind: schemas.KindApproval, Install: "acme", Component: "db", Plan: plan.Hash,
			Decision: schemas.DecisionApprove, Approver: "acme-sre", Created: app.clk.Now().Add(-time.Minute), Expires: app.clk.Now().Add(time.Hour),
		}
		if mut != nil {
			mut(&a)
		}
		data, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		s, err := policy.SignApproval(data, signer)
		if err != nil {
			t.Fatal(err)
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name+".approval.json"), string(out))
	}
	attacks := []struct {
		name, want string
		file       func()
	}{
		{"the vendor's key", "signed by the vendor's approver (release-manager) key", func() {
			customer("vendor", vendorKey, func(a *schemas.Approval) { a.Approver = "release-manager" })
		}},
		{"the vendor's key under the customer's name", "signed by the vendor's approver", func() { customer("vendor-as-customer", vendorKey, nil) }},
		{"expired", "approval expired", func() {
			customer("expired", customerKey, func(a *schemas.Approval) {
				a.Created, a.Expires = app.clk.Now().Add(-2*time.Hour), app.clk.Now().Add(-time.Hour)
			})
		}},
		{"another install", "globex, not acme", func() {
			customer("globex", customerKey, func(a *schemas.Approval) { a.Install = "globex" })
		}},
		{"another plan", "not the waiting", func() {
			customer("other-plan", customerKey, func(a *schemas.Approval) { a.Plan = "sha256:" + strings.Repeat("2", 64) })
		}},
		{"not a signed approval", "other.approval.json", func() { writeFile(t, filepath.Join(dir, "other.approval.json"), "{\"file\": 1}") }},
	}
	for _, at := range attacks {
		at.file()
		rep := ia.reconcile(t)
		cs := serverStatus(t, tn).Components["db"]
		if got := jobKinds(rep); len(got) != 0 || cs.Phase != schemas.PhaseAwaitingApproval || cs.Outputs["size"] != "small" {
			t.Fatalf("%s: jobs %v, db %s %v", at.name, got, cs.Phase, cs.Outputs)
		}
		if !slices.ContainsFunc(cs.Plan.Refused, func(r string) bool { return strings.HasPrefix(r, "customer: ") && strings.Contains(r, at.want) }) {
			t.Errorf("%s: not recorded as refused (%q): %q", at.name, at.want, cs.Plan.Refused)
		}
	}

	// A key pinned in the customer's policy that the vendor trusts too is
	// not the customer's own.
	writeFile(t, policyFile, strings.Replace(readFile(t, policyFile), "requireApproval", "  - name: release-manager\n    key: "+
		strings.TrimSpace(string(ssh.MarshalAuthorizedKey(vendorKey.PublicKey())))+"\nrequireApproval", 1))
	if got := jobKinds(ia.reconcile(t)); len(got) != 0 {
		t.Fatalf("the vendor's key pinned by the customer ran %v", got)
	}

	customer("acme-sre", customerKey, nil)
	rep = ia.reconcile(t)
	st = serverStatus(t, tn)
	if got := jobKinds(rep); !slices.Equal(got, []string{schemas.PlanApplyMode}) || rep.Jobs[0].Plan.Hash != plan.Hash {
		t.Fatalf("the customer's approval: jobs %v, want one apply of %s", got, plan.Hash)
	}
	if cs := st.Components["db"]; cs.Phase != schemas.PhaseApplied || cs.Outputs["size"] != "large" || st.Deferred != nil || st.Phase != schemas.InstallReady {
		t.Fatalf("after the customer's approval: db %s %v, install %s, deferred %+v", cs.Phase, cs.Outputs, st.Phase, st.Deferred)
	}
	msg := tn.git("log", "-1", "--format=%B", schemas.StatusRef("acme"))
	if !strings.Contains(msg, "approved by release-manager; the customer's approval by acme-sre") {
		t.Errorf("the status commit does not say who approved:\n%s", msg)
	}
}

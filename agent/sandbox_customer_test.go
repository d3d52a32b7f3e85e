package agent_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/policy"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/stack"
)

// TestSandboxUpgradeNeedsCustomerApproval runs the sandbox with the real
// terraform under a customer's policy that requires the customer's own
// approval of a replace of the sandbox (requireApproval names it
// "sandbox", schemas.SandboxComponent). The sandbox is terraform, so its
// upgrade goes the plan-record way: the first apply (only creates) runs
// without waiting; the upgrade to 0.2.0 (a replace) is planned and waits,
// deferred for the customer's approval, with nothing applied and web held
// behind it; an approval of another hash is refused; the customer's
// approval of the waiting hash applies exactly that plan, then web.
func TestSandboxUpgradeNeedsCustomerApproval(t *testing.T) {
	sa := newSandboxApp(t)
	tn, creds := sa.tn, sa.creds
	tn.write("installs/acme.yaml", fmt.Sprintf(`channel: stable
cloud: {provider: aws, region: eu-west-1, accountID: "222222222222"}
sandbox:
  name: local
  inputs: {creds_file: %s}
  role: {arn: %s, externalID: %s}
agentKey: %s
`, creds, maintenance, sandboxExtID, tn.keys["acme"].AuthorizedKey()))
	tn.write("installs/globex.yaml", "channel: stable\ncloud: {provider: local}\nsandbox: {name: local, inputs: {creds_file: /nonexistent}}\nregistry: 127.0.0.1:5000/globex\nagentKey: "+tn.keys["globex"].AuthorizedKey()+"\n")
	tn.commit("a sandbox")
	tn.renderMain()

	customerKey := loadSSHSigner(t, "approver")
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	writeFile(t, policyFile, `apiVersion: nuon.dev/v1
kind: CustomerPolicy
approvers:
  - name: acme-sre
    key: `+strings.TrimSpace(string(ssh.MarshalAuthorizedKey(customerKey.PublicKey())))+`
requireApproval: {components: [sandbox], changes: [replace]}
`)
	a := sa.agent("eu-west-1", func(c *agent.Config) { c.CustomerPolicy = policyFile }, stack.WithSessionName("nuon-agent-acme"))
	approve := func(hash string) {
		t.Helper()
		data, err := json.Marshal(schemas.Approval{
			APIVersion: schemas.APIVersion, Kind: schemas.KindApproval, Install: "acme", Component: schemas.SandboxComponent, Plan: hash,
			Decision: schemas.DecisionApprove, Approver: "acme-sre", Created: time.Now().Add(-time.Minute), Expires: time.Now().Add(time.Hour),
		})
		if err != nil {
			t.Fatal(err)
		}
		s, err := policy.SignApproval(data, customerKey)
		if err != nil {
			t.Fatal(err)
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "acme-sre.approval.json"), string(out))
	}

	// The first apply only creates: not a kind the policy lists.
	rep := a.reconcile(t)
	if st := rep.Status; st.Phase != schemas.InstallReady || st.Components["sandbox"].Version != "0.1.0" {
		t.Fatalf("first apply: install %s, components %+v", st.Phase, st.Components)
	}

	tn.write("channels/stable.yaml", "components: {sandbox: 0.2.0, web: 1.0.0}\n")
	tn.commit("sandbox 0.2.0 on stable")
	tn.renderMain()
	rep = a.reconcile(t)
	st := serverStatus(t, tn)
	sb := st.Components["sandbox"]
	if got := jobKinds(rep); !slices.Equal(got, []string{schemas.PlanRecordMode}) {
		t.Fatalf("the upgrade ran %v, want its plan only", got)
	}
	if sb.Phase != schemas.PhaseAwaitingApproval || sb.Plan == nil || !strings.Contains(sb.Plan.Customer, "replace of sandbox") ||
		st.Phase != schemas.InstallAwaitingApproval || st.Deferred == nil || st.Deferred.Reason != schemas.DeferredCustomerApproval {
		t.Fatalf("the upgrade: sandbox %s (plan %+v), install %s, deferred %+v", sb.Phase, sb.Plan, st.Phase, st.Deferred)
	}
	if _, err := os.Stat(creds + ".0.2.0"); err == nil {
		t.Fatal("the upgrade ran without the customer's approval")
	}
	if got := st.Components["web"].Outputs["registry"]; got != "reg-0-1-0.test:5000" {
		t.Errorf("web moved to %v before the sandbox", got)
	}
	hash := sb.Plan.Hash

	approve("sha256:" + strings.Repeat("3", 64))
	rep = a.reconcile(t)
	sb = serverStatus(t, tn).Components["sandbox"]
	if got := jobKinds(rep); len(got) != 0 || sb.Phase != schemas.PhaseAwaitingApproval {
		t.Fatalf("an approval of another plan: jobs %v, sandbox %s", got, sb.Phase)
	}
	if !slices.ContainsFunc(sb.Plan.Refused, func(r string) bool { return strings.HasPrefix(r, "customer: ") }) {
		t.Errorf("the approval of another plan is not recorded as refused: %q", sb.Plan.Refused)
	}

	approve(hash)
	rep = a.reconcile(t)
	st = serverStatus(t, tn)
	if got := jobKinds(rep); !slices.Equal(got, []string{schemas.PlanApplyMode, schemas.OpUpdate}) || rep.Jobs[0].Plan.Hash != hash {
		t.Fatalf("the customer's approval: jobs %v, want the apply of %s, then web's update", got, hash)
	}
	if st.Phase != schemas.InstallReady || st.Deferred != nil || st.Components["sandbox"].Version != "0.2.0" || st.Components["web"].Outputs["registry"] != "reg-0-2-0.test:5000" {
		t.Fatalf("after the approval: install %s, deferred %+v, components %+v", st.Phase, st.Deferred, st.Components)
	}
	if _, err := os.Stat(creds + ".0.2.0"); err != nil {
		t.Errorf("the approved upgrade did not run: %v", err)
	}
}

package policy_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/policy"
	"nuon.dev/nuon/schemas"
)

// customerPolicy pins keys as the customer's approvers and requires
// their approval of deletes and replaces of database.
func customerPolicy(t *testing.T, keys map[string]string) *policy.Customer {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: nuon.dev/v1\nkind: CustomerPolicy\napprovers:\n")
	for name, key := range keys {
		b.WriteString("  - name: " + name + "\n    key: " + key + "\n")
	}
	b.WriteString("requireApproval: {components: [database], changes: [delete, replace]}\n")
	c, err := policy.Parse("customer.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCustomerNeeds(t *testing.T) {
	c := customerPolicy(t, map[string]string{"acme-sre": authorized(newSigner(t))})
	for _, tc := range []struct {
		component string
		sum       schemas.PlanSummary
		want      bool
	}{
		{"database", schemas.PlanSummary{Counts: map[string]int{schemas.ChangeReplace: 1}}, true},
		{"database", schemas.PlanSummary{Counts: map[string]int{schemas.ChangeUpdate: 2, schemas.ChangeDelete: 1}}, true},
		{"database", schemas.PlanSummary{Counts: map[string]int{schemas.ChangeUpdate: 2}}, false},
		{"database", schemas.PlanSummary{}, false}, // a no-op never waits
		{"api", schemas.PlanSummary{Counts: map[string]int{schemas.ChangeDelete: 1}}, false},
	} {
		got, why := c.Needs(tc.component, tc.sum)
		if got != tc.want || got != (why != "") {
			t.Errorf("Needs(%s, %v) = %v %q, want %v", tc.component, tc.sum.Counts, got, why, tc.want)
		}
	}
	var none *policy.Customer
	if got, _ := none.Needs("database", schemas.PlanSummary{Counts: map[string]int{schemas.ChangeDelete: 1}}); got {
		t.Error("no customer policy needs the customer's approval")
	}
	every, err := policy.Parse("c.yaml", []byte(head+"approvers: [{name: a, key: "+authorized(newSigner(t))+"}]\nrequireApproval: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := every.Needs("anything", schemas.PlanSummary{Counts: map[string]int{schemas.ChangeCreate: 1}}); !got {
		t.Error("requireApproval {} does not cover every change")
	}
	_, err = policy.Parse("c.yaml", []byte(head+"requireApproval: {changes: [delete]}\n"))
	if err == nil || !strings.Contains(err.Error(), "c.yaml:3:18: requireApproval: changes need the customer's approval but no approvers are listed") {
		t.Errorf("requireApproval without approvers: %v", err)
	}
	_, err = policy.Parse("c.yaml", []byte(head+"approvers: [{name: a, key: "+authorized(newSigner(t))+"}]\nrequireApproval: {changes: [destroy]}\n"))
	if err == nil || !strings.Contains(err.Error(), "requireApproval.changes[0]") {
		t.Errorf("an unknown change kind: %v", err)
	}
}

const head = "apiVersion: nuon.dev/v1\nkind: CustomerPolicy\n"

// TestCustomerApprovalKeys signs the customer's approval as attackers
// would: only a key pinned in the customer's policy, and trusted by the
// vendor in no way, approves, for this install and plan, in time.
func TestCustomerApprovalKeys(t *testing.T) {
	customer := newSigner(t)
	approver := loadSigner(t, "../fixtures/keys/approver") // the vendor's, in trust/approvals
	render := loadSigner(t, "../fixtures/keys/render")
	data, err := os.ReadFile("../fixtures/tenant/trust/approvals")
	if err != nil {
		t.Fatal(err)
	}
	vendor, err := policy.ParseApprovers("trust/approvals", data)
	if err != nil {
		t.Fatal(err)
	}
	vendor.Exclude("render", render.PublicKey())
	target := policy.Target{Install: "acme", AnyChannel: true, Component: "database", Plan: planH}
	as := func(c *policy.Customer) *policy.Approvers { return c.ApprovalKeys(vendor) }
	pinned := customerPolicy(t, map[string]string{"acme-sre": authorized(customer)})
	named := func(name string) func(*schemas.Approval) { return func(a *schemas.Approval) { a.Approver = name } }
	for _, tc := range []struct {
		name     string
		policy   *policy.Customer
		signer   ssh.Signer
		mut      func(*schemas.Approval)
		approved bool
		refused  string
	}{
		{"the customer's key", pinned, customer, named("acme-sre"), true, ""},
		{"the vendor's approval only", pinned, approver, nil, false, "signed by the vendor's approver (release-manager) key"},
		{"the vendor's key under the customer's name", pinned, approver, named("acme-sre"), false, "signed by the vendor's approver (release-manager) key"},
		{"a key the customer did not pin", pinned, newSigner(t), named("acme-sre"), false, "is not in the customer's policy"},
		{"a key listed on main, pinned too", customerPolicy(t, map[string]string{"acme-sre": authorized(customer), "release-manager": authorized(approver)}), approver, nil, false, "the vendor's approver"},
		{"the render key pinned", customerPolicy(t, map[string]string{"ops": authorized(render)}), render, named("ops"), false, "the vendor's render"},
		{"expired", pinned, customer, func(a *schemas.Approval) { a.Approver = "acme-sre"; a.Expires = t0.Add(-time.Minute) }, false, "expired"},
		{"another install", pinned, customer, func(a *schemas.Approval) { a.Approver = "acme-sre"; a.Install = "globex" }, false, "globex, not acme"},
		{"another plan", pinned, customer, func(a *schemas.Approval) { a.Approver = "acme-sre"; a.Plan = planG }, false, "not the waiting"},
		{"another name than the key's", pinned, customer, named("ceo"), false, `approver "ceo" but signed by "acme-sre"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := as(tc.policy).Judge([]schemas.SignedApproval{sign(t, tc.signer, approval(tc.mut))}, target, t0)
			if v.Approved != tc.approved {
				t.Fatalf("approved = %v, want %v (refused %q)", v.Approved, tc.approved, v.Refused)
			}
			if tc.refused != "" && (len(v.Refused) != 1 || !strings.Contains(v.Refused[0], tc.refused)) {
				t.Errorf("refused = %q, want one naming %q", v.Refused, tc.refused)
			}
		})
	}
}

package agent_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/internal/trusttest"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// TestApprovalTrustRoot: an agent that follows the trust root and was
// given no approvers file takes its approvers from the root's approvers
// role — the one place for trust — so a plan waits, is approved by a key
// of that role, and applies; with the role gone from a newer version, an
// approval by the same key approves nothing.
func TestApprovalTrustRoot(t *testing.T) {
	app := newApprovalApp(t)
	tn := app.tn
	base := app.clk.Now()
	root := func(v int64, approvers bool) []byte {
		c := trusttest.Version{Version: v, Expires: base.AddDate(1, 0, 0), RootKeys: []string{"root-1", "root-2", "root-3"}, Threshold: 2}.Content(t)
		c.Roles.Render.Keys = []schemas.TrustKey{{Name: "render", Key: tn.render.AuthorizedKey()}}
		if approvers {
			c.Roles.Approvers = &schemas.TrustRole{Threshold: 1, Keys: []schemas.TrustKey{{Name: "release-manager",
				Key: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(loadSSHSigner(t, "approver").PublicKey())))}}}
		}
		return trusttest.Sign(t, c, "root-1", "root-2")
	}
	v1 := root(1, true)
	tn.publishRoot(1, v1)
	if err := os.Remove(filepath.Join(tn.src, "trust", "approvals")); err != nil {
		t.Fatal(err)
	}
	tn.commit("approvers move into the trust root")
	tn.renderMain()
	given, err := trust.Parse(trust.FileName(1), v1)
	if err != nil {
		t.Fatal(err)
	}
	// A second agent of acme, as newApprovalApp's but with the root and
	// no approvers file.
	ia := tn.agent("acme", func(cfg *agent.Config) {
		cfg.Now, cfg.Heartbeat, cfg.JobTimeout = app.clk.Now, -1, 0
		l := cfg.Runner.(*jobs.Local)
		l.Env = append(l.Env, "NUON_TEST_LAYOUT="+app.layout)
		cfg.Trust, cfg.TrustRoot, cfg.Approvers = nil, given, nil
	})
	if st := ia.reconcile(t).Status; st.Phase != schemas.InstallReady {
		t.Fatalf("first pass: %s %+v", st.Phase, st.Refusal)
	}
	setSize(tn, "large")
	tn.commit("acme: db large")
	tn.renderMain()
	ia.reconcile(t)
	cs := serverStatus(t, tn).Components["db"]
	if cs.Phase != schemas.PhaseAwaitingApproval || cs.Plan == nil || strings.Contains(cs.Error, "trusts no approver") {
		t.Fatalf("replace: %s %q", cs.Phase, cs.Error)
	}
	plan := cs.Plan.Hash

	// Version 2 drops the approvers role: the key approves nothing.
	app.clk.now = app.clk.now.Add(time.Minute)
	tn.publishRoot(2, root(2, false))
	tn.renderMain()
	app.file(t, "approver", schemas.Approval{Plan: plan})
	rep := ia.reconcile(t)
	if got := jobKinds(rep); len(got) != 0 || serverStatus(t, tn).Components["db"].Phase != schemas.PhaseAwaitingApproval {
		t.Fatalf("an approver the root no longer names ran jobs %v", got)
	}

	// Version 3 names it again: the same approval applies the plan.
	app.clk.now = app.clk.now.Add(time.Minute)
	tn.publishRoot(3, root(3, true))
	app.file(t, "approver", schemas.Approval{Plan: plan, Reason: "again"})
	rep = ia.reconcile(t)
	if got := jobKinds(rep); !slices.Equal(got, []string{schemas.PlanApplyMode}) {
		t.Fatalf("approved through the root: jobs %v, want one apply", got)
	}
	if cs := serverStatus(t, tn).Components["db"]; cs.Phase != schemas.PhaseApplied || cs.Outputs["size"] != "large" {
		t.Fatalf("after approval: %s %v", cs.Phase, cs.Outputs)
	}
}

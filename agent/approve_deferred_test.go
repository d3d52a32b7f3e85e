package agent_test

import (
	"slices"
	"testing"
	"time"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

// TestApprovalDeferredForRollout: an install whose db waits for approval,
// and whose app waits behind db, is what the rollout controller counts as
// deferred, not failed: app is pending behind the approval, never
// blocked; once db is approved both apply and the install is healthy.
func TestApprovalDeferredForRollout(t *testing.T) {
	layout, digests := moduleLayout(t, map[string]map[string]string{"db": dbModule, "app": dbModule})
	app := newApprovalAppOf(t, dbModule, `    inputs: {size: "${install.inputs.size}"}
    approval: {mode: manual}
`, func(c *agent.Config) {
		l := c.Runner.(*jobs.Local)
		l.Env = append(l.Env, "NUON_TEST_LAYOUT="+layout)
	})
	tn, ia := app.tn, app.ia
	tn.write("nuon.yaml", `name: test
components:
  - name: db
    type: terraform
    repository: registry.test/app/db
    inputs: {size: "${install.inputs.size}"}
    outputs: [size]
    approval: {mode: manual}
  - name: app
    type: terraform
    repository: registry.test/app/app
    dependsOn: [db]
    inputs: {size: "${components.db.outputs.size}"}
`)
	tn.write("releases/db.yaml", "component: db\nversions:\n  - version: 1.0.0\n    artifacts: {module: {digest: "+digests["db"]+"}}\n")
	tn.write("releases/app.yaml", "component: app\nversions:\n  - version: 1.0.0\n    artifacts: {module: {digest: "+digests["app"]+"}}\n")
	tn.write("channels/stable.yaml", "components: {db: 1.0.0, app: 1.0.0}\n")
	tn.commit("app after db")
	tn.renderMain()

	classify := func() schemas.RolloutEvidence {
		st := serverStatus(t, tn)
		current := tn.git("rev-parse", schemas.InstallRef("acme"))
		return rollout.Classify("acme", rollout.Report{Commit: "s", At: time.Now(), Current: current, Status: &st}, true, nil, time.Now())
	}
	ia.reconcile(t)
	st := serverStatus(t, tn)
	if db, a := st.Components["db"], st.Components["app"]; db.Phase != schemas.PhaseAwaitingApproval || a.Phase != schemas.PhasePending {
		t.Fatalf("db %s, app %s (%s): want AwaitingApproval and Pending behind it", db.Phase, a.Phase, a.Error)
	}
	if st.Phase != schemas.InstallAwaitingApproval || st.Deferred == nil || st.Deferred.Reason != schemas.DeferredApproval {
		t.Fatalf("install %s, deferred %+v", st.Phase, st.Deferred)
	}
	if e := classify(); e.Outcome != schemas.OutcomeDeferred {
		t.Fatalf("the rollout counts the waiting install as %s: %s", e.Outcome, e.Reason)
	}

	app.file(t, "approver", schemas.Approval{Plan: st.Components["db"].Plan.Hash})
	rep := ia.reconcile(t)
	if got := jobKinds(rep); !slices.Contains(got, schemas.PlanApplyMode) {
		t.Fatalf("approved: jobs %v", got)
	}
	st = serverStatus(t, tn)
	if st.Phase != schemas.InstallReady || st.Components["app"].Phase != schemas.PhaseApplied || st.Deferred != nil {
		t.Fatalf("after the approval: install %s, app %s, deferred %+v", st.Phase, st.Components["app"].Phase, st.Deferred)
	}
	if e := classify(); e.Outcome != schemas.OutcomeHealthy {
		t.Errorf("after the approval the rollout counts %s: %s", e.Outcome, e.Reason)
	}
}

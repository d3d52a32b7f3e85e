package agent_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/schemas"
)

// configModule writes one file; a change to it on disk is drift the
// terraform plugin finds.
var configModule = map[string]string{"main.tf": `
variable "path" { type = string }
resource "local_file" "config" {
  filename = var.path
  content  = "approved\n"
}
`}

// TestDriftCorrectionNeedsApproval: a component with approval settings in
// drift mode correct is not re-applied unseen. The drift found is planned
// as a record; the component and the install wait for a signed approval
// of that plan's hash (deferred, not failed), nothing is applied however
// many passes run; the approval applies exactly that saved plan.
func TestDriftCorrectionNeedsApproval(t *testing.T) {
	if os.Getenv("NUON_TF_CLI_CONFIG") == "" && os.Getenv("TF_CLI_CONFIG_FILE") == "" {
		t.Skip("the local provider needs the offline terraform providers (make -n test shows TF_CLI_CONFIG_FILE)")
	}
	file := filepath.Join(t.TempDir(), "config")
	app := newApprovalAppOf(t, configModule, `    inputs: {path: "`+file+`"}
    approval: {mode: manual}
    drift: {mode: correct, schedule: 5m}
`, nil)
	tn, ia := app.tn, app.ia
	base := app.clk.Now()

	// The create waits (mode manual), then applies by its hash.
	rep := ia.reconcile(t)
	cs := serverStatus(t, tn).Components["db"]
	if got := jobKinds(rep); !slices.Equal(got, []string{schemas.PlanRecordMode}) || cs.Phase != schemas.PhaseAwaitingApproval {
		t.Fatalf("first pass: jobs %v, db %s", got, cs.Phase)
	}
	app.file(t, "approver", schemas.Approval{Plan: cs.Plan.Hash})
	if got := jobKinds(ia.reconcile(t)); !slices.Equal(got, []string{schemas.PlanApplyMode}) {
		t.Fatalf("approved create: jobs %v", got)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "approved\n" {
		t.Fatalf("after the approved create: %q %v", b, err)
	}
	app.clk.now = base.Add(6 * time.Minute)
	ia.reconcile(t) // the first check, no drift

	// Drift: the correction is a plan that waits.
	if err := os.WriteFile(file, []byte("tampered\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	app.clk.now = base.Add(12 * time.Minute)
	rep = ia.reconcile(t)
	st := serverStatus(t, tn)
	cs = st.Components["db"]
	if got := jobKinds(rep); !slices.Equal(got, []string{schemas.OpDrift, schemas.PlanRecordMode}) {
		t.Fatalf("drift pass: jobs %v, want a drift check and a plan, no apply", got)
	}
	if cs.Phase != schemas.PhaseAwaitingApproval || cs.Plan == nil || cs.Corrected || len(cs.Drift) == 0 {
		t.Fatalf("drift pass: db %s, plan %+v, corrected %v, drift %v", cs.Phase, cs.Plan, cs.Corrected, cs.Drift)
	}
	if st.Phase != schemas.InstallAwaitingApproval || st.Deferred == nil || st.Deferred.Reason != schemas.DeferredApproval {
		t.Fatalf("drift pass: install %s, deferred %+v", st.Phase, st.Deferred)
	}
	if rep.Outcome == "failed" {
		t.Error("a correction waiting for approval is reported as a failure")
	}
	if b, _ := os.ReadFile(file); string(b) != "tampered\n" {
		t.Fatalf("the drift was corrected without approval: %q", b)
	}
	plan := cs.Plan.Hash

	// More passes, later schedules: still nothing applied.
	for _, m := range []time.Duration{13, 19, 25} {
		app.clk.now = base.Add(m * time.Minute)
		rep = ia.reconcile(t)
		for _, j := range rep.Jobs {
			if j.Plan != nil && j.Plan.Mode == schemas.PlanApplyMode || j.Operation == schemas.OpUpdate && j.Plan == nil {
				t.Fatalf("pass at +%dm applied %s without approval", m, j.ID)
			}
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "tampered\n" {
		t.Fatalf("the drift was corrected without approval: %q", b)
	}
	// An approval of another plan does nothing.
	app.file(t, "approver", schemas.Approval{Plan: "sha256:" + strings.Repeat("1", 64)})
	ia.reconcile(t)
	if b, _ := os.ReadFile(file); string(b) != "tampered\n" {
		t.Fatalf("an approval of another plan corrected the drift: %q", b)
	}

	// The approval of the correction's hash applies that plan.
	app.file(t, "approver", schemas.Approval{Plan: plan})
	rep = ia.reconcile(t)
	if got := jobKinds(rep); !slices.Equal(got, []string{schemas.PlanApplyMode}) || rep.Jobs[0].Plan.Hash != plan {
		t.Fatalf("approved correction: jobs %v, want one apply of %s", got, plan)
	}
	if b, _ := os.ReadFile(file); string(b) != "approved\n" {
		t.Fatalf("after the approved correction: %q", b)
	}
	if st := serverStatus(t, tn); st.Phase != schemas.InstallReady || st.Components["db"].Phase != schemas.PhaseApplied || st.Deferred != nil {
		t.Fatalf("after the approved correction: install %s, db %s, deferred %+v", st.Phase, st.Components["db"].Phase, st.Deferred)
	}
}

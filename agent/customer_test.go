package agent_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/schemas"
)

const policyHead = "apiVersion: nuon.dev/v1\nkind: CustomerPolicy\n"

// customerAgent is acme's agent reading the customer's policy from file,
// on clk.
func customerAgent(tn *tenant, clk *clock, file string) *installAgent {
	return tn.agent("acme", func(c *agent.Config) {
		c.Now = clk.Now
		c.Heartbeat = -1
		c.CustomerPolicy = file
	})
}

// promote pins d to 1.1.0 for acme and renders: a change to apply.
func promote(t *testing.T, tn *tenant) string {
	tn.write("installs/acme.yaml", readFile(t, filepath.Join(tn.src, "installs/acme.yaml"))+"versions: {d: 1.1.0}\n")
	tn.commit("acme: d 1.1.0")
	tn.renderMain()
	return tn.git("rev-parse", "refs/heads/nuon/installs/acme")
}

// updates lists the update jobs the plugin saw.
func updates(t *testing.T, file string) []string {
	var out []string
	for _, r := range runs(t, file) {
		if strings.HasSuffix(r, "_update") {
			out = append(out, r)
		}
	}
	return out
}

// serverStatus reads status.json as the tenant's repository has it, and
// checks it against its schema.
func serverStatus(t testing.TB, tn *tenant) schemas.Status {
	t.Helper()
	data := tn.git("show", schemas.StatusRef("acme")+":"+schemas.StatusFile)
	if err := schemas.ValidateJSON(schemas.SchemaStatus, []byte(data)); err != nil {
		t.Fatalf("status.json does not match its schema: %v\n%s", err, data)
	}
	var st schemas.Status
	if err := json.Unmarshal([]byte(data), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestCustomerHold: under the customer's hold a new desired commit is not
// applied, the signed status says deferred (hold) once and not again on
// every pass; a policy file that does not parse holds too and says why,
// with its line; lifting the hold applies the change on the next pass.
func TestCustomerHold(t *testing.T) {
	tn := newTenant(t)
	clk := &clock{now: time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)}
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, policyHead)
	a := customerAgent(tn, clk, file)
	if rep := a.reconcile(t); rep.Status.Phase != schemas.InstallReady || rep.Status.Deferred != nil {
		t.Fatalf("first pass with a policy of no rules: phase %s, deferred %+v", rep.Status.Phase, rep.Status.Deferred)
	}

	writeFile(t, file, policyHead+"hold:\n  reason: quarterly audit\n")
	desired := promote(t, tn)
	rep := a.reconcile(t)
	if rep.Outcome != agent.OutcomeDeferred || len(rep.Jobs) != 0 || !rep.Pushed {
		t.Fatalf("under a hold: outcome %s, %d jobs, pushed %v", rep.Outcome, len(rep.Jobs), rep.Pushed)
	}
	st := serverStatus(t, tn)
	want := &schemas.Deferred{Reason: schemas.DeferredHold, Message: "held by the customer: quarterly audit", Since: clk.Now(), Commit: desired}
	if diff := cmp.Diff(want, st.Deferred); diff != "" {
		t.Fatalf("deferred in the pushed status (-want +got):\n%s", diff)
	}
	if st.Phase != schemas.InstallReady || st.Desired != desired || st.Applied == desired || st.Components["d"].Version != "1.0.0" {
		t.Fatalf("status under a hold: phase %s desired %s applied %s d %s", st.Phase, st.Desired, st.Applied, st.Components["d"].Version)
	}
	if msg := tn.git("log", "-1", "--format=%B", schemas.StatusRef("acme")); !strings.Contains(msg, "(hold): held by the customer: quarterly audit") {
		t.Errorf("status commit message does not say the change is held:\n%s", msg)
	}

	// Held still: nothing runs and nothing is committed.
	clk.Set(clk.Now().Add(time.Hour))
	again := a.reconcile(t)
	if again.Outcome != agent.OutcomeDeferred || again.StatusCommit != rep.StatusCommit || len(again.Jobs) != 0 {
		t.Fatalf("a second pass under the hold: outcome %s, jobs %d, new commit %v", again.Outcome, len(again.Jobs), again.StatusCommit != rep.StatusCommit)
	}

	// A file the agent cannot parse holds, and the status says why.
	writeFile(t, file, policyHead+"hold: {}\nrequests: \"no\"\n")
	broken := a.reconcile(t)
	d := serverStatus(t, tn).Deferred
	if broken.Outcome != agent.OutcomeDeferred || d == nil || d.Reason != schemas.DeferredHold ||
		!strings.Contains(d.Message, "cannot be read") || !strings.Contains(d.Message, file+":3:7: hold: missing required field") ||
		!strings.Contains(d.Message, "; "+file+":4:11: requests: must be true or false") || strings.Contains(d.Message, "\n") {
		t.Fatalf("a broken policy file: outcome %s, deferred %+v", broken.Outcome, d)
	}
	if d.Since != want.Since {
		t.Errorf("still held: since moved from %s to %s", want.Since, d.Since)
	}
	if got := updates(t, a.records); len(got) != 0 {
		t.Fatalf("jobs ran while held: %v", got)
	}

	// The customer lifts the hold: the next pass applies the change.
	writeFile(t, file, policyHead)
	lifted := a.reconcile(t)
	if lifted.Outcome != agent.OutcomeApplied || lifted.Status.Deferred != nil || lifted.Status.Applied != desired {
		t.Fatalf("after the hold was lifted: outcome %s, deferred %+v, applied %s", lifted.Outcome, lifted.Status.Deferred, lifted.Status.Applied)
	}
	if diff := cmp.Diff([]string{"acme_d_1.1.0_update"}, updates(t, a.records)); diff != "" {
		t.Fatalf("jobs after the hold was lifted (-want +got):\n%s", diff)
	}
	if st := serverStatus(t, tn); st.Deferred != nil || st.Components["d"].Version != "1.1.0" {
		t.Fatalf("pushed status after the hold: %+v", st)
	}
}

// TestCustomerWindow: a change that arrives outside the customer's only
// allow window waits for it, the status saying when it opens (22:00 in
// Berlin); the first pass after the injected clock passes the opening
// applies it.
func TestCustomerWindow(t *testing.T) {
	tn := newTenant(t)
	// Wednesday 2 January 2030, 10:00 UTC (11:00 in Berlin).
	base := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	clk := &clock{now: base}
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, policyHead+"allow:\n  - name: nights\n    days: [mon, tue, wed, thu, fri]\n    start: \"22:00\"\n    duration: 4h\n    timezone: Europe/Berlin\n")
	// The first apply happens inside the window.
	clk.Set(time.Date(2030, 1, 1, 22, 0, 0, 0, time.UTC))
	a := customerAgent(tn, clk, file)
	if rep := a.reconcile(t); rep.Outcome != agent.OutcomeApplied {
		t.Fatalf("first pass inside the window: %s", rep.Outcome)
	}

	clk.Set(base)
	desired := promote(t, tn)
	rep := a.reconcile(t)
	opens := time.Date(2030, 1, 2, 21, 0, 0, 0, time.UTC)
	st := serverStatus(t, tn)
	if rep.Outcome != agent.OutcomeDeferred || st.Deferred == nil || st.Deferred.Reason != schemas.DeferredWindow ||
		st.Deferred.Until == nil || !st.Deferred.Until.Equal(opens) || st.Deferred.Commit != desired {
		t.Fatalf("outside the window: outcome %s, deferred %+v", rep.Outcome, st.Deferred)
	}
	if _, off := st.Deferred.Until.Zone(); off != 3600 {
		t.Errorf("the opening is not given in the window's zone: %s", st.Deferred.Until)
	}
	clk.Set(opens.Add(-time.Minute))
	if rep := a.reconcile(t); rep.Outcome != agent.OutcomeDeferred || len(rep.Jobs) != 0 {
		t.Fatalf("a minute before the window: outcome %s, %d jobs", rep.Outcome, len(rep.Jobs))
	}
	clk.Set(opens.Add(30 * time.Second))
	if rep := a.reconcile(t); rep.Outcome != agent.OutcomeApplied || rep.Status.Applied != desired || rep.Status.Deferred != nil {
		t.Fatalf("inside the window: outcome %s, applied %s, deferred %+v", rep.Outcome, rep.Status.Applied, rep.Status.Deferred)
	}
	if diff := cmp.Diff([]string{"acme_d_1.1.0_update"}, updates(t, a.records)); diff != "" {
		t.Fatalf("jobs (-want +got):\n%s", diff)
	}
}

// TestCustomerRequests: under a hold the agent keeps answering the
// vendor's read-only requests; requests: false in the customer's policy
// refuses them, with the reason.
func TestCustomerRequests(t *testing.T) {
	tn := newTenant(t)
	alice, _, trust := operators(t, tn)
	tn.renderMain()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, policyHead)
	a := tn.agent("acme", func(c *agent.Config) {
		c.RequestTrust = trust
		c.CustomerPolicy = file
	})
	a.reconcile(t) // apply everything first

	writeFile(t, file, policyHead+"hold: {reason: change freeze}\n")
	tn.fileRequest(newRequest("r-held", "acme", schemas.RequestLogs, "a"), alice)
	tn.renderMain()
	rep := a.reconcile(t)
	if rep.Outcome != agent.OutcomeDeferred {
		t.Fatalf("under a hold: outcome %s", rep.Outcome)
	}
	if rs, _ := answerOf(t, tn, rep.Status, "r-held"); rs.State != schemas.RequestAnswered {
		t.Fatalf("a logs request under a hold: %+v", rs)
	}

	writeFile(t, file, policyHead+"hold: {reason: change freeze}\nrequests: false\n")
	tn.fileRequest(newRequest("r-off", "acme", schemas.RequestLogs, "a"), alice)
	tn.renderMain()
	rep = a.reconcile(t)
	if rs, _ := answerOf(t, tn, rep.Status, "r-off"); rs.State != schemas.RequestRefused || !strings.Contains(rs.Reason, "requests: false") {
		t.Fatalf("a logs request with requests: false: %+v", rs)
	}
}

// TestCustomerHoldDriftCorrection: under a hold a drift check still runs
// and reports, but the correction waits; once the hold is lifted the next
// pass checks again and corrects, without waiting for the schedule.
func TestCustomerHoldDriftCorrection(t *testing.T) {
	tn, dir := driftTenant(t, "correct", "5m", "")
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &clock{now: base}
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, policyHead)
	a := tn.agent("acme", func(c *agent.Config) {
		c.Now = clk.Now
		c.Heartbeat = -1
		c.CustomerPolicy = file
		r := c.Runner.(*jobs.Local)
		r.Env = append(r.Env, "NUON_TEST_DRIFT="+dir)
	})
	a.reconcile(t)

	writeFile(t, file, policyHead+"hold: {reason: incident 4711}\n")
	writeFile(t, filepath.Join(dir, "d"), "local_file.config\n")
	clk.Set(base.Add(6 * time.Minute))
	d := a.reconcile(t).Status.Components["d"]
	if len(d.Drift) != 1 || d.Corrected {
		t.Fatalf("under a hold: drift %+v, corrected %v", d.Drift, d.Corrected)
	}
	if diff := cmp.Diff([]string{"acme_d_1.0.0_drift"}, driftRuns(t, a.records)); diff != "" {
		t.Fatalf("plugin calls under a hold (-want +got):\n%s", diff)
	}

	writeFile(t, file, policyHead)
	clk.Set(base.Add(7 * time.Minute))
	d = a.reconcile(t).Status.Components["d"]
	if !d.Corrected {
		t.Fatalf("after the hold: d %+v", d)
	}
	if diff := cmp.Diff([]string{"acme_d_1.0.0_drift", "acme_d_1.0.0_drift", "acme_d_1.0.0_update"}, driftRuns(t, a.records)); diff != "" {
		t.Fatalf("plugin calls after the hold (-want +got):\n%s", diff)
	}
}

// TestCustomerHoldFirstPass: an install held from its first pass applies
// nothing, and its first status is valid: Ready with nothing applied,
// deferred, not failed.
func TestCustomerHoldFirstPass(t *testing.T) {
	tn := newTenant(t)
	clk := &clock{now: time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)}
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, file, policyHead+"hold: {reason: not yet}\n")
	a := customerAgent(tn, clk, file)
	rep := a.reconcile(t)
	st := serverStatus(t, tn)
	if rep.Outcome != agent.OutcomeDeferred || len(rep.Jobs) != 0 || st.Phase != schemas.InstallReady || st.Applied != "" ||
		len(st.Components) != 0 || st.Deferred == nil || st.Deferred.Reason != schemas.DeferredHold {
		t.Fatalf("first pass under a hold: outcome %s, %d jobs, status %+v", rep.Outcome, len(rep.Jobs), st)
	}
}

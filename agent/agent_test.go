package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

func TestConvergeThenIdle(t *testing.T) {
	tn := newTenant(t)
	a := tn.agent("acme")

	rep := a.reconcile(t)
	if rep.Status.Phase != schemas.InstallReady {
		t.Fatalf("phase = %s, want Ready; status %+v", rep.Status.Phase, rep.Status)
	}
	got := runs(t, a.records)
	want := []string{
		"acme_a_1.0.0_create", "acme_a_1.0.0_done",
		"acme_b_1.0.0_create", "acme_b_1.0.0_done",
		"acme_c_1.0.0_create", "acme_c_1.0.0_done",
		"acme_d_1.0.0_create", "acme_d_1.0.0_done",
	}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("plugin calls (-want +got):\n%s", diff)
	}
	// Dependencies ran first: a finished before b started, b before c.
	order := strings.Fields(strings.ReplaceAll(readFile(t, a.records), " ", "_"))
	for _, pair := range [][2]string{{"acme_a_1.0.0_done", "acme_b_1.0.0_create"}, {"acme_b_1.0.0_done", "acme_c_1.0.0_create"}} {
		if slices.Index(order, pair[0]) > slices.Index(order, pair[1]) {
			t.Errorf("%s came after %s: %v", pair[0], pair[1], order)
		}
	}
	// Outputs feed inputs: c's job got b's output, b's got a's.
	st := rep.Status
	if got := st.Components["c"].Outputs["in_upstream"]; got != "b-id" {
		t.Errorf("c's upstream input = %v, want b-id", got)
	}
	if got := st.Components["b"].Outputs["in_upstream"]; got != "a-id" {
		t.Errorf("b's upstream input = %v, want a-id", got)
	}
	if _, ok := st.Components["a"].Outputs["token"]; ok || !slices.Contains(st.Components["a"].Sensitive, "token") {
		t.Errorf("a sensitive output: outputs %v, sensitive %v", st.Components["a"].Outputs, st.Components["a"].Sensitive)
	}
	desired := tn.git("rev-parse", "refs/heads/nuon/installs/acme")
	if st.Desired != desired || st.Applied != desired || st.Generation != 1 {
		t.Errorf("desired %s applied %s generation %d, want %s applied, generation 1", st.Desired, st.Applied, st.Generation, desired)
	}
	if !rep.Pushed {
		t.Fatal("status not pushed")
	}
	// The status is on the server, signed with the install's key, and
	// stock git verifies it.
	if got := tn.git("rev-parse", "refs/heads/nuon/status/acme"); got != rep.StatusCommit.String() {
		t.Fatalf("server status ref = %s, want %s", got, rep.StatusCommit)
	}
	signers := filepath.Join(t.TempDir(), "allowed")
	writeFile(t, signers, "acme "+tn.keys["acme"].AuthorizedKey()+"\n")
	gittest.Git(t, tn.bare, "-c", "gpg.ssh.allowedSignersFile="+signers, "verify-commit", "refs/heads/nuon/status/acme")
	// The status commit holds the job manifests it ran and the applied specs.
	files := tn.git("ls-tree", "-r", "--name-only", "refs/heads/nuon/status/acme")
	for _, f := range []string{"status.json", "applied/a.json", "applied/d.json"} {
		if !strings.Contains(files, f) {
			t.Errorf("status tree lacks %s:\n%s", f, files)
		}
	}
	if n := strings.Count(files, "jobs/"); n != 4 {
		t.Errorf("status tree has %d job manifests, want 4:\n%s", n, files)
	}
	var job schemas.Job
	manifest := tn.git("show", "refs/heads/nuon/status/acme:jobs/"+st.Components["c"].Job+".json")
	if err := json.Unmarshal([]byte(manifest), &job); err != nil {
		t.Fatal(err)
	}
	if job.Inputs["upstream"] != "b-id" || job.Artifacts[0].Source != "" || !strings.HasPrefix(job.Artifacts[0].Local, "127.0.0.1:5000/acme/") {
		t.Errorf("job manifest: inputs %v, artifacts %+v", job.Inputs, job.Artifacts)
	}
	if err := schemas.ValidateJSON(schemas.SchemaJob, []byte(manifest)); err != nil {
		t.Errorf("job manifest does not match its schema: %v", err)
	}
	status := tn.git("show", "refs/heads/nuon/status/acme:status.json")
	if err := schemas.ValidateJSON(schemas.SchemaStatus, []byte(status)); err != nil {
		t.Errorf("status.json does not match its schema: %v", err)
	}

	// The audit log says what each job did, in the past tense.
	msg := tn.git("log", "-1", "--format=%B", "refs/heads/nuon/status/acme")
	for _, c := range []string{"a", "b", "c", "d"} {
		if !strings.Contains(msg, "\ncreated "+c+" 1.0.0") {
			t.Errorf("status commit message does not say %s was created:\n%s", c, msg)
		}
	}

	// A poll with nothing new: one request, no job, no commit.
	tn.srv.Reset()
	rep = a.reconcile(t)
	if !rep.Idle || len(rep.Jobs) != 0 {
		t.Fatalf("second reconcile: idle %v, %d jobs", rep.Idle, len(rep.Jobs))
	}
	if n := tn.srv.Requests(); n != 1 {
		t.Errorf("idle poll made %d requests, want 1: %+v", n, tn.srv.Log())
	}
	if got := tn.git("rev-parse", "refs/heads/nuon/status/acme"); got != rep.StatusCommit.String() {
		t.Errorf("idle poll moved the status ref")
	}
}

func TestPromotionUpdatesOnlyThatComponent(t *testing.T) {
	tn := newTenant(t)
	acme, globex := tn.agent("acme"), tn.agent("globex")
	acme.reconcile(t)
	globex.reconcile(t)
	before := len(runs(t, acme.records))

	// A pull request: pin d to 1.1.0 on stable for acme only.
	tn.write("installs/acme.yaml", readFile(t, filepath.Join(tn.src, "installs/acme.yaml"))+"versions: {d: 1.1.0}\n")
	tn.commit("acme: d 1.1.0")
	tn.renderMain()

	rep := acme.reconcile(t)
	if msg := tn.git("log", "-1", "--format=%B", "refs/heads/nuon/status/acme"); !strings.Contains(msg, "\nupdated d 1.1.0") {
		t.Errorf("status commit message does not say d was updated:\n%s", msg)
	}
	got := runs(t, acme.records)[before:]
	if diff := cmp.Diff([]string{"acme_d_1.1.0_update", "acme_d_1.1.0_done"}, got); diff != "" {
		t.Fatalf("jobs after promotion (-want +got):\n%s", diff)
	}
	if rep.Status.Generation != 2 || rep.Status.Components["d"].Version != "1.1.0" || rep.Status.Phase != schemas.InstallReady {
		t.Errorf("status after promotion: %+v", rep.Status)
	}
	if rep := globex.reconcile(t); !rep.Idle {
		t.Errorf("globex reconciled after a change that was not its own: %+v", rep)
	}
}

func TestFailureBlocksDependentsNotSiblings(t *testing.T) {
	tn := newTenant(t)
	tn.setInstall("acme", tn.keys["acme"], "true", "0s")
	tn.commit("b fails on acme")
	tn.renderMain()
	a := tn.agent("acme")
	st := a.reconcile(t).Status
	want := map[string]string{"a": schemas.PhaseApplied, "b": schemas.PhaseFailed, "c": schemas.PhaseBlocked, "d": schemas.PhaseApplied}
	for name, phase := range want {
		if got := st.Components[name].Phase; got != phase {
			t.Errorf("%s: phase %s, want %s (%s)", name, got, phase, st.Components[name].Error)
		}
	}
	if st.Phase != schemas.InstallDegraded || st.Applied != "" {
		t.Errorf("install phase %s applied %q, want Degraded and nothing applied", st.Phase, st.Applied)
	}
	if !strings.Contains(st.Components["b"].Error, "the component says no") || !strings.Contains(st.Components["c"].Error, "waiting for b") {
		t.Errorf("errors: b %q, c %q", st.Components["b"].Error, st.Components["c"].Error)
	}

	// Fixing the input converges, and only b and c run.
	before := len(runs(t, a.records))
	tn.setInstall("acme", tn.keys["acme"], "false", "0s")
	tn.commit("fix b")
	tn.renderMain()
	st = a.reconcile(t).Status
	if st.Phase != schemas.InstallReady {
		t.Fatalf("after the fix: %+v", st)
	}
	got := runs(t, a.records)[before:]
	want2 := []string{"acme_b_1.0.0_update", "acme_b_1.0.0_done", "acme_c_1.0.0_create", "acme_c_1.0.0_done"}
	if diff := cmp.Diff(want2, got); diff != "" {
		t.Errorf("jobs after the fix (-want +got):\n%s", diff)
	}
}

func TestDeleteComponent(t *testing.T) {
	tn := newTenant(t)
	a := tn.agent("acme")
	a.reconcile(t)
	app := readFile(t, filepath.Join(tn.src, "nuon.yaml"))
	app = app[:strings.Index(app, "  - name: d\n")]
	tn.write("nuon.yaml", app)
	tn.write("channels/stable.yaml", "components: {a: 1.0.0, b: 1.0.0, c: 1.0.0}\n")
	os.Remove(filepath.Join(tn.src, "releases/d.yaml"))
	tn.commit("drop d")
	tn.renderMain()
	before := len(runs(t, a.records))
	st := a.reconcile(t).Status
	if diff := cmp.Diff([]string{"acme_d_1.0.0_delete"}, runs(t, a.records)[before:]); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}
	if _, ok := st.Components["d"]; ok || st.Phase != schemas.InstallReady {
		t.Errorf("after delete: phase %s, components %v", st.Phase, st.Components)
	}
	if msg := tn.git("log", "-1", "--format=%B", "refs/heads/nuon/status/acme"); !strings.Contains(msg, "\ndeleted d 1.0.0\n") {
		t.Errorf("status commit message does not say d 1.0.0 was deleted:\n%s", msg)
	}
	if files := tn.git("ls-tree", "-r", "--name-only", "refs/heads/nuon/status/acme"); strings.Contains(files, "applied/d.json") {
		t.Errorf("status still records d as applied")
	}
}

func TestRemoteDownKeepsServingAndCatchesUp(t *testing.T) {
	tn := newTenant(t)
	a := tn.agent("acme")
	a.reconcile(t)
	tn.write("channels/stable.yaml", "components: {a: 1.0.0, b: 1.0.0, c: 1.0.0, d: 1.1.0}\n")
	tn.commit("promote d")
	tn.renderMain()

	tn.srv.Down()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	time.Sleep(400 * time.Millisecond)
	down := tn.srv.Requests()
	if n := len(runs(t, a.records)); n != 8 {
		t.Errorf("jobs ran while the remote was down: %d records", n)
	}
	// Backing off: at a 50ms interval, 400ms of failures without backoff
	// would be ~8 requests; doubling waits make it at most 4.
	if down == 0 || down > 4 {
		t.Errorf("%d requests while down, want 1-4 (backing off)", down)
	}
	tn.srv.Up()
	deadline := time.Now().Add(15 * time.Second)
	for {
		status, _ := gittest.Run(tn.bare, nil, "show", "refs/heads/nuon/status/acme:status.json")
		if strings.Contains(status, `"phase": "Ready"`) && strings.Contains(status, `"generation": 2`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent did not catch up after the remote came back; status:\n%s", status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := runs(t, a.records)[8:]; !slices.Equal(got, []string{"acme_d_1.1.0_update", "acme_d_1.1.0_done"}) {
		t.Errorf("jobs after catching up: %v", got)
	}
}

func TestStatusPushedWhenRemoteReturns(t *testing.T) {
	tn := newTenant(t)
	// The agent polls and fetches, then the server goes down before the
	// status push: the status is kept locally and delivered later.
	a := tn.agent("acme", func(c *agent.Config) {
		c.Remote = &downBeforePush{Remote: c.Remote, srv: tn.srv}
	})
	if _, err := a.Reconcile(context.Background()); err == nil || !strings.Contains(err.Error(), "push status") {
		t.Fatalf("reconcile with the remote down at push: %v", err)
	}
	if _, err := gittest.Run(tn.bare, nil, "rev-parse", "--verify", "refs/heads/nuon/status/acme"); err == nil {
		t.Fatal("status reached the server while it was down")
	}
	n := len(runs(t, a.records))
	tn.srv.Up()
	rep := a.reconcile(t)
	if !rep.Pushed || len(runs(t, a.records)) != n {
		t.Fatalf("after the remote returned: pushed %v, jobs re-run %d", rep.Pushed, len(runs(t, a.records))-n)
	}
	if got := tn.git("rev-parse", "refs/heads/nuon/status/acme"); got != rep.StatusCommit.String() {
		t.Errorf("server status %s, want %s", got, rep.StatusCommit)
	}
}

// downBeforePush takes the server down when the agent starts pushing.
type downBeforePush struct {
	agent.Remote
	srv  *gittest.Server
	done bool
}

func (d *downBeforePush) Push(ctx context.Context, st storage, ref refName, old, new hash) error {
	if !d.done {
		d.done = true
		d.srv.Down()
	}
	return d.Remote.Push(ctx, st, ref, old, new)
}

func readFile(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t testing.TB, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestOldJobDirsArePruned(t *testing.T) {
	tn := newTenant(t)
	a := tn.agent("acme")
	jobs := filepath.Join(a.workdir, "work", "jobs")
	if err := os.MkdirAll(jobs, 0o700); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for i := range 120 {
		d := filepath.Join(jobs, fmt.Sprintf("old-%03d", i))
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		_ = os.Chtimes(d, old, old.Add(time.Duration(i)*time.Second))
	}
	st := a.reconcile(t).Status
	entries, _ := os.ReadDir(jobs)
	if len(entries) != 100 {
		t.Fatalf("%d job directories after pruning, want 100", len(entries))
	}
	for _, e := range entries {
		if e.Name() == "old-000" {
			t.Error("the oldest job directory was kept")
		}
	}
	for _, c := range []string{"a", "b", "c", "d"} {
		if _, err := os.Stat(filepath.Join(jobs, st.Components[c].Job)); err != nil {
			t.Errorf("the job directory of %s's last job was pruned: %v", c, err)
		}
	}
}

// TestFailingJobRetrySchedule: a failing component is retried without a
// new desired commit, but on its own schedule: after 4 intervals, then
// after 8 while it keeps failing, never on every poll.
func TestFailingJobRetrySchedule(t *testing.T) {
	tn := newTenant(t)
	tn.setInstall("acme", tn.keys["acme"], "true", "0s")
	tn.commit("b fails on acme")
	tn.renderMain()
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &clock{now: base}
	a := tn.agent("acme", func(c *agent.Config) { c.Now = clk.Now }) // Interval 50ms
	bRuns := func() int {
		n := 0
		for _, r := range runs(t, a.records) {
			if strings.HasPrefix(r, "acme_b_") {
				n++
			}
		}
		return n
	}
	if st := a.reconcile(t).Status; st.Components["b"].Phase != schemas.PhaseFailed {
		t.Fatalf("b: %+v", st.Components["b"])
	}
	for _, step := range []struct {
		at   time.Duration
		runs int
	}{
		{150 * time.Millisecond, 1}, // 3 intervals: not yet
		{250 * time.Millisecond, 2}, // past 4 intervals: retried, and fails again
		{550 * time.Millisecond, 2}, // 6 intervals after that: not yet (8 now)
		{700 * time.Millisecond, 3}, // past 8: retried
	} {
		clk.Set(base.Add(step.at))
		rep := a.reconcile(t)
		if got := bRuns(); got != step.runs {
			t.Errorf("at +%v: b ran %d times, want %d", step.at, got, step.runs)
		}
		if idle := step.runs == 1 || step.at == 550*time.Millisecond; rep.Idle != idle {
			t.Errorf("at +%v: idle %v, want %v", step.at, rep.Idle, idle)
		}
	}
}

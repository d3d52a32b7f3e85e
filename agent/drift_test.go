package agent_test

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// driftTenant gives component d a drift mode and schedule, and returns
// the directory whose files make the test plugin report drift.
func driftTenant(t *testing.T, mode, schedule, operations string) (*tenant, string) {
	tn := newTenant(t)
	data, err := os.ReadFile(filepath.Join(tn.src, "nuon.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tn.write("nuon.yaml", strings.Replace(string(data), "repository: registry.test/app/d\n",
		"repository: registry.test/app/d\n    drift: {mode: "+mode+", schedule: "+schedule+"}\n", 1))
	if operations != "" {
		inst, err := os.ReadFile(filepath.Join(tn.src, "installs/acme.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		tn.write("installs/acme.yaml", string(inst)+"operations: "+operations+"\n")
	}
	tn.commit("drift settings")
	tn.renderMain()
	return tn, t.TempDir()
}

func driftAgent(tn *tenant, clk *clock, driftDir string) *installAgent {
	return tn.agent("acme", func(c *agent.Config) {
		c.Now = clk.Now
		c.Heartbeat = -1
		r := c.Runner.(*jobs.Local)
		r.Env = append(r.Env, "NUON_TEST_DRIFT="+driftDir)
	})
}

// driftRuns lists the drift checks and re-applies the plugin saw, in order.
func driftRuns(t *testing.T, file string) []string {
	var out []string
	for _, r := range runs(t, file) {
		if strings.HasSuffix(r, "_drift") || strings.HasSuffix(r, "_update") {
			out = append(out, r)
		}
	}
	return out
}

// TestDriftCorrect: a component in mode correct is checked on its
// schedule; a check that finds nothing writes no commit; drift found is
// reported per resource and corrected by re-applying the applied spec,
// once; the next clean check clears it.
func TestDriftCorrect(t *testing.T) {
	tn, dir := driftTenant(t, "correct", "5m", "")
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &clock{now: base}
	a := driftAgent(tn, clk, dir)
	a.reconcile(t) // applies everything; the schedule starts

	clk.Set(base.Add(2 * time.Minute))
	if rep := a.reconcile(t); !rep.Idle {
		t.Fatalf("a poll before the drift schedule was not idle: %s", rep.Outcome)
	}
	clk.Set(base.Add(6 * time.Minute))
	if rep := a.reconcile(t); !rep.Idle {
		t.Fatalf("a drift check that found nothing was not idle (a commit?): %s", rep.Outcome)
	}
	if err := os.WriteFile(filepath.Join(dir, "d"), []byte("local_file.config\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	clk.Set(base.Add(12 * time.Minute))
	rep := a.reconcile(t)
	if rep.Idle {
		t.Fatal("drift found but no status commit")
	}
	d := rep.Status.Components["d"]
	want := []schemas.ResourceDrift{{Address: "local_file.config", Action: schemas.DriftChanged, Fields: []string{"content"}}}
	if diff := cmp.Diff(want, d.Drift); diff != "" || !d.Corrected || d.Phase != schemas.PhaseApplied {
		t.Fatalf("drift of d (-want +got):\n%s\ncorrected %v phase %s", diff, d.Corrected, d.Phase)
	}
	if d.Health == nil || d.Health.Status != schemas.HealthReady {
		t.Fatalf("health of d = %+v, want Ready", d.Health)
	}
	msg := tn.git("log", "-1", "--format=%B", schemas.StatusRef("acme"))
	if !strings.Contains(msg, "drift check d: 1 resources differ: [local_file.config changed]") || !strings.Contains(msg, "drift correction d: re-applied") {
		t.Fatalf("status commit message does not say what drifted and what was done:\n%s", msg)
	}
	if err := os.Remove(filepath.Join(dir, "d")); err != nil {
		t.Fatal(err)
	}
	clk.Set(base.Add(18 * time.Minute))
	if rep := a.reconcile(t); rep.Idle || len(rep.Status.Components["d"].Drift) != 0 || rep.Status.Components["d"].Corrected {
		t.Fatalf("a clean check after a correction: idle %v, d %+v", rep.Idle, rep.Status.Components["d"])
	}
	clk.Set(base.Add(24 * time.Minute))
	if rep := a.reconcile(t); !rep.Idle {
		t.Fatal("a second clean check wrote a commit")
	}
	got := driftRuns(t, a.records)
	wantRuns := []string{"acme_d_1.0.0_drift", "acme_d_1.0.0_drift", "acme_d_1.0.0_update", "acme_d_1.0.0_drift", "acme_d_1.0.0_drift"}
	if diff := cmp.Diff(wantRuns, got); diff != "" {
		t.Fatalf("plugin calls (-want +got):\n%s", diff)
	}
}

// TestDriftReport: mode report says what differs and changes nothing;
// the same drift found again writes no second commit.
func TestDriftReport(t *testing.T) {
	tn, dir := driftTenant(t, "report", "5m", "")
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &clock{now: base}
	a := driftAgent(tn, clk, dir)
	a.reconcile(t)
	if err := os.WriteFile(filepath.Join(dir, "d"), []byte("kubernetes_config_map.settings\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	clk.Set(base.Add(6 * time.Minute))
	rep := a.reconcile(t)
	if d := rep.Status.Components["d"]; rep.Idle || len(d.Drift) != 1 || d.Corrected {
		t.Fatalf("report: idle %v, d %+v", rep.Idle, d)
	}
	clk.Set(base.Add(12 * time.Minute))
	if rep := a.reconcile(t); !rep.Idle || len(rep.Status.Components["d"].Drift) != 1 {
		t.Fatalf("the same drift again: idle %v, d %+v", rep.Idle, rep.Status.Components["d"])
	}
	if got := driftRuns(t, a.records); slices.Contains(got, "acme_d_1.0.0_update") || len(got) != 2 {
		t.Fatalf("plugin calls %v, want two drift checks and no update", got)
	}
}

// TestDriftVetoed: the install's own operations settings turn drift
// checks off; the agent runs none and its status says the customer did.
func TestDriftVetoed(t *testing.T) {
	tn, dir := driftTenant(t, "correct", "5m", "{drift: false}")
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &clock{now: base}
	a := driftAgent(tn, clk, dir)
	if st := a.reconcile(t).Status; !slices.Equal(st.Vetoed, []string{schemas.RequestDrift}) {
		t.Fatalf("vetoed = %v, want [drift]", st.Vetoed)
	}
	if err := os.WriteFile(filepath.Join(dir, "d"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, m := range []time.Duration{6, 12} {
		clk.Set(base.Add(m * time.Minute))
		a.reconcile(t)
	}
	if got := driftRuns(t, a.records); len(got) != 0 {
		t.Fatalf("drift checks ran although the install turned them off: %v", got)
	}
	msg := tn.git("log", "--format=%B", schemas.StatusRef("acme"))
	if !strings.Contains(msg, "drift turned off by the install's operations settings") {
		t.Fatalf("status history does not say drift was turned off:\n%s", msg)
	}
}

// TestHeartbeat: an agent with nothing to do writes no status commit,
// ever. On a git host its heartbeat, when due, replaces the tip of its
// liveness ref with one parentless signed commit, so the ref keeps one
// commit however long the install idles; talking to a tenant server
// (HeartbeatPolls) it writes nothing at all.
func TestHeartbeat(t *testing.T) {
	tn := newTenant(t)
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &clock{now: base}
	a := tn.agent("acme", func(c *agent.Config) { c.Now = clk.Now; c.Heartbeat = 10 * time.Minute })
	if st := a.reconcile(t).Status; st.HeartbeatEvery != "10m0s" || st.Heartbeat != nil {
		t.Fatalf("first status: heartbeatEvery %q heartbeat %v", st.HeartbeatEvery, st.Heartbeat)
	}
	status := tn.git("rev-parse", schemas.StatusRef("acme"))
	live := schemas.LivenessRef("acme")
	clk.Set(base.Add(9 * time.Minute))
	if rep := a.reconcile(t); !rep.Idle || !rep.Heartbeat.IsZero() {
		t.Fatalf("a poll before the heartbeat was due: idle %v heartbeat %s", rep.Idle, rep.Heartbeat)
	}
	var beats []string
	for i := 1; i <= 3; i++ {
		clk.Set(base.Add(time.Duration(i) * 10 * time.Minute))
		rep := a.reconcile(t)
		if !rep.Idle || rep.Heartbeat.IsZero() {
			t.Fatalf("heartbeat %d due: idle %v heartbeat %s", i, rep.Idle, rep.Heartbeat)
		}
		if got := tn.git("rev-parse", live); got != rep.Heartbeat.String() {
			t.Fatalf("liveness ref %s, want the beat %s", got, rep.Heartbeat)
		}
		if n := tn.git("rev-list", "--count", live); n != "1" {
			t.Fatalf("liveness ref holds %s commits after beat %d, want 1", n, i)
		}
		want := base.Add(time.Duration(i) * 10 * time.Minute).Format("2006-01-02T15:04:05+00:00")
		if when := tn.git("log", "-1", "--format=%aI", live); when != want {
			t.Fatalf("beat %d time %s, want %s", i, when, want)
		}
		if msg := tn.git("log", "-1", "--format=%B", live); !strings.Contains(msg, schemas.TrailerInstall+": acme") || !strings.Contains(msg, status) {
			t.Fatalf("beat %d message:\n%s", i, msg)
		}
		beats = append(beats, rep.Heartbeat.String())
	}
	if got := tn.git("rev-parse", schemas.StatusRef("acme")); got != status {
		t.Fatalf("heartbeats moved the status ref: %s → %s", status, got)
	}
	if beats[0] == beats[1] || beats[1] == beats[2] {
		t.Fatalf("beats did not replace the tip: %v", beats)
	}

	// Through a tenant server: no beat, no ref.
	b := tn.agent("globex", func(c *agent.Config) {
		c.Now = clk.Now
		c.Heartbeat = 10 * time.Minute
		c.HeartbeatTo = agent.HeartbeatPolls
	})
	if st := b.reconcile(t).Status; st.HeartbeatEvery != "10m0s" {
		t.Fatalf("globex announces heartbeat %q, want 10m0s", st.HeartbeatEvery)
	}
	gstatus := tn.git("rev-parse", schemas.StatusRef("globex"))
	for i := 1; i <= 3; i++ {
		clk.Set(clk.Now().Add(30 * time.Minute))
		if rep := b.reconcile(t); !rep.Idle || !rep.Heartbeat.IsZero() {
			t.Fatalf("HeartbeatPolls pass %d: idle %v heartbeat %s", i, rep.Idle, rep.Heartbeat)
		}
	}
	if got := tn.git("rev-parse", schemas.StatusRef("globex")); got != gstatus {
		t.Fatalf("an idle install through the server moved its status ref: %s → %s", gstatus, got)
	}
	if out, err := gittest.Run(tn.bare, nil, "rev-parse", "--verify", "--quiet", schemas.LivenessRef("globex")); err == nil {
		t.Fatalf("HeartbeatPolls wrote a liveness ref: %s", out)
	}
}

// TestFreshWorkdirVerifiesCurrent: an agent on a fresh workdir adopts the
// remote status, whose desired commit did not move, so it fetches no
// desired state in the pass; it still gets and verifies that commit for
// what runs between renders (the veto, drift checks, requests).
func TestFreshWorkdirVerifiesCurrent(t *testing.T) {
	tn, dir := driftTenant(t, "report", "5m", "{debug: false}")
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	driftAgent(tn, clk, dir).reconcile(t)
	var log strings.Builder
	b := tn.agent("acme", func(c *agent.Config) {
		c.Now = clk.Now
		c.Heartbeat = -1
		c.Logger = slog.New(slog.NewTextHandler(&syncWriter{w: &log}, nil))
	})
	rep := b.reconcile(t)
	if strings.Contains(log.String(), "does not verify") || !slices.Equal(rep.Status.Vetoed, []string{schemas.RequestDebug}) {
		t.Fatalf("fresh workdir: vetoed %v\n%s", rep.Status.Vetoed, log.String())
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

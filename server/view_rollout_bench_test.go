package server

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

// benchRollout is a running rollout of a channel of n installs: a canary
// of 1 % passed (its decision's evidence one status per install), the
// next wave of half the channel open with a fifth failed, a fifth
// deferred and the rest waiting or healthy, a last wave not opened.
func benchRollout(n int, now time.Time) RolloutView {
	id := func(i int) string { return fmt.Sprintf("i%07d", i) }
	canary, open := n/100, n/2
	ids := func(from, to int) []string {
		out := make([]string, 0, to-from)
		for i := from; i < to; i++ {
			out = append(out, id(i))
		}
		return out
	}
	opened, passed := now.Add(-3*time.Hour), now.Add(-time.Hour)
	st := &schemas.RolloutState{Channel: "stable", Rollout: 7, Phase: schemas.RolloutRunning,
		From: map[string]string{"api": "1.1.0", "database": "1.0.0"}, To: map[string]string{"api": "1.2.0", "database": "1.0.0"},
		Waves: []schemas.RolloutWaveState{
			{Name: "canary", Installs: ids(0, canary), Size: canary, Opened: &opened, Passed: &passed},
			{Name: "half", Installs: ids(canary, canary+open), Size: open, Opened: &passed},
			{Name: "rest", Size: n - canary - open},
		}}
	d := schemas.RolloutDecision{Kind: schemas.DecisionPassed, Wave: 1, At: passed, By: "controller", Reason: "wave canary passed"}
	for _, i := range st.Waves[0].Installs {
		d.Evidence = append(d.Evidence, schemas.RolloutEvidence{Install: i, Status: "3c2f2e02d7ee808132ddd74f53ce5e7c364b3689", Desired: "fd37979ba52d7e693dcffdc1322655fa426e832b", Outcome: schemas.OutcomeHealthy})
	}
	st.Decision = d
	j := rollout.Judgement{HealthySince: passed}
	for k, i := range st.Waves[1].Installs {
		e := schemas.RolloutEvidence{Install: i, Outcome: schemas.OutcomeWaiting}
		switch k % 5 {
		case 0:
			e.Outcome, e.Reason, e.Status = schemas.OutcomeFailed, "api failed: helm upgrade: context deadline exceeded <waiting for rollout>", "3c2f2e02d7ee808132ddd74f53ce5e7c364b3689"
			j.Failed++
		case 1:
			e.Outcome, e.Reason = schemas.OutcomeDeferred, "held by the customer until 2026-12-01"
			j.Deferred++
		case 2, 3:
			e.Outcome, e.Status = schemas.OutcomeHealthy, "3c2f2e02d7ee808132ddd74f53ce5e7c364b3689"
			j.Healthy++
		default:
			j.Waiting++
		}
		j.Evidence = append(j.Evidence, e)
	}
	return RolloutView{State: st, Commit: "46e1676ea961154b4896004d331920c4d8fcfc4a", Open: &j}
}

// countingWriter counts the bytes of a page.
type countingWriter struct{ n int }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += len(p); return len(p), nil }

// BenchmarkRolloutPage measures building and rendering a channel's
// rollout page and the rollouts list for a rollout of 100,000 installs
// (NUON_BENCH_ROLLOUT_INSTALLS for another size): what the page costs on
// top of Server.RolloutStates. It reports the page's bytes and the
// slowest time.
func BenchmarkRolloutPage(b *testing.B) {
	n := 100000
	if s := os.Getenv("NUON_BENCH_ROLLOUT_INSTALLS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 100 {
			b.Fatalf("NUON_BENCH_ROLLOUT_INSTALLS: %q", s)
		}
	}
	now := time.Now()
	s := &Server{cfg: Config{Now: func() time.Time { return now }, ViewStaleAfter: time.Hour}}
	v, err := newView(s, "t")
	if err != nil {
		b.Fatal(err)
	}
	rv := benchRollout(n, now)
	var size, listSize int
	var slowest time.Duration
	for b.Loop() {
		start := time.Now()
		w := &countingWriter{}
		if err := v.tmpl.ExecuteTemplate(w, "rollout.tmpl", rolloutDetail("stable", rv)); err != nil {
			b.Fatal(err)
		}
		l := &countingWriter{}
		if err := v.tmpl.ExecuteTemplate(l, "rollouts.tmpl", map[string]any{"Rollouts": []rolloutSummary{{Channel: "stable", RolloutView: rv, Opened: 2, Waves: 3, Pins: rolloutPins(rv.State)}}}); err != nil {
			b.Fatal(err)
		}
		slowest, size, listSize = max(slowest, time.Since(start)), w.n, l.n
	}
	b.ReportMetric(float64(size), "page-B")
	b.ReportMetric(float64(listSize), "list-B")
	b.ReportMetric(float64(slowest.Microseconds())/1e3, "max-ms")
}

// TestRolloutPageBounded: a rollout of 10,000 installs makes a page
// that lists at most rolloutEvidence installs per list, failed first.
func TestRolloutPageBounded(t *testing.T) {
	now := time.Now()
	s := &Server{cfg: Config{Now: func() time.Time { return now }, ViewStaleAfter: time.Hour}}
	v, err := newView(s, "t")
	if err != nil {
		t.Fatal(err)
	}
	d := rolloutDetail("stable", benchRollout(10000, now))
	if len(d.OpenWave.Items) != rolloutEvidence || d.OpenWave.More != 5000-rolloutEvidence || d.OpenWave.Items[0].Outcome != schemas.OutcomeFailed {
		t.Errorf("open wave: %d listed, %d more, first %s", len(d.OpenWave.Items), d.OpenWave.More, d.OpenWave.Items[0].Outcome)
	}
	if len(d.Evidence.Items) != rolloutEvidence || d.Evidence.More != 100-rolloutEvidence {
		t.Errorf("evidence: %d listed, %d more", len(d.Evidence.Items), d.Evidence.More)
	}
	want := []rolloutWave{{Stand: "passed", Counted: true, Healthy: 100}, {Stand: "open", Counted: true, Healthy: 2000, Failed: 1000, Deferred: 1000, Waiting: 1000}, {Stand: "not opened"}}
	for i, w := range d.Waves {
		if w.Stand != want[i].Stand || w.Counted != want[i].Counted || w.Healthy != want[i].Healthy || w.Failed != want[i].Failed || w.Deferred != want[i].Deferred || w.Waiting != want[i].Waiting {
			t.Errorf("wave %d: %+v, want %+v", i+1, w, want[i])
		}
	}
	w := &countingWriter{}
	if err := v.tmpl.ExecuteTemplate(w, "rollout.tmpl", d); err != nil {
		t.Fatal(err)
	}
	if w.n > 200<<10 {
		t.Errorf("page of %d bytes", w.n)
	}
}

// BenchmarkRolloutPageStates measures the rollout page at 100,000
// installs (NUON_BENCH_ROLLOUT_INSTALLS for another size) end to end from
// the controller's memory: Server.RolloutStates, which judges the open
// wave of 50,000 installs from the tally the controller keeps, then the
// page built and rendered. It reports the page's bytes, the slowest
// time, and the time to make the tally (once per decision).
func BenchmarkRolloutPageStates(b *testing.B) {
	n := 100000
	if s := os.Getenv("NUON_BENCH_ROLLOUT_INSTALLS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 100 {
			b.Fatalf("NUON_BENCH_ROLLOUT_INSTALLS: %q", s)
		}
	}
	now := time.Now()
	s := &Server{cfg: Config{Now: func() time.Time { return now }, ViewStaleAfter: time.Hour}, refs: newRefTable()}
	v, err := newView(s, "t")
	if err != nil {
		b.Fatal(err)
	}
	st := benchRollout(n, now).State
	r := &rollouts{s: s, channels: map[string]*channelRollout{"stable": {state: st}},
		statuses: map[string]statusSeen{}, pins: map[plumbing.Hash]map[string]string{}}
	s.rollouts = r
	for k, id := range st.Waves[1].Installs {
		desired := plumbing.NewHash(fmt.Sprintf("%040x", k+1))
		s.refs.put(schemas.InstallRef(id), desired)
		r.pins[desired] = st.To
		status := &schemas.Status{Install: id, Desired: desired.String(), Applied: desired.String(), Phase: schemas.InstallReady,
			Components: map[string]schemas.ComponentStatus{
				"api":      {Phase: schemas.PhaseApplied, Health: &schemas.Health{Status: schemas.HealthReady}},
				"database": {Phase: schemas.PhaseApplied, Health: &schemas.Health{Status: schemas.HealthReady}},
			}}
		switch k % 5 {
		case 0:
			status.Phase = schemas.InstallDegraded
			status.Components["api"] = schemas.ComponentStatus{Phase: schemas.PhaseFailed, Error: "helm upgrade: context deadline exceeded"}
		case 1:
			status.Deferred = &schemas.Deferred{Reason: schemas.DeferredHold, Message: "held by the customer until 2026-12-01"}
			status.Desired = "0000000000000000000000000000000000000001"
		case 4:
			continue // no status yet
		}
		r.statuses[id] = statusSeen{commit: desired, at: now.Add(-time.Minute), status: status}
	}
	// The first view makes the tally, as the controller's evaluation
	// that found nothing to decide does; views after it read the tally.
	start := time.Now()
	s.RolloutStates()
	first := time.Since(start)
	var size int
	var slowest, states time.Duration
	for b.Loop() {
		start := time.Now()
		rv := s.RolloutStates()["stable"]
		states = max(states, time.Since(start))
		if rv.Open == nil || rv.Open.Failed != len(st.Waves[1].Installs)/5 {
			b.Fatalf("open wave judged %+v", rv.Open)
		}
		w := &countingWriter{}
		if err := v.tmpl.ExecuteTemplate(w, "rollout.tmpl", rolloutDetail("stable", rv)); err != nil {
			b.Fatal(err)
		}
		slowest, size = max(slowest, time.Since(start)), w.n
	}
	b.ReportMetric(float64(size), "page-B")
	b.ReportMetric(float64(states.Microseconds())/1e3, "max-ms-states")
	b.ReportMetric(float64(first.Microseconds())/1e3, "ms-tally")
	b.ReportMetric(float64(slowest.Microseconds())/1e3, "max-ms")
}

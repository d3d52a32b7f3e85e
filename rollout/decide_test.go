package rollout_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

const src1 = "1111111111111111111111111111111111111111"

var (
	v1 = map[string]string{"api": "1.0.0"}
	v2 = map[string]string{"api": "2.0.0"}
	v3 = map[string]string{"api": "3.0.0"}
)

// waveFleet is a policy of waves canary (count 1, bake 1h), tenth (percent
// 10, budget 1, rollback) and rest, over n installs.
func waveFleet(t testing.TB, n int) (*rollout.Policy, *rollout.Waves) {
	t.Helper()
	one := 1
	p, err := rollout.New("channels/stable.yaml", &schemas.Rollout{Waves: []schemas.RolloutWave{
		{Name: "canary", Count: 1, Bake: "1h", MinHealthy: &one},
		{Name: "tenth", Percent: 10, FailureBudget: 1, OnFailure: rollout.Rollback},
		{Name: "rest", Rest: true},
	}, Deferred: &schemas.RolloutDeferred{Wait: "2h", Then: "proceed"}})
	if err != nil {
		t.Fatal(err)
	}
	ins := make([]rollout.Install, n)
	for i := range ins {
		ins[i] = rollout.Install{ID: fmt.Sprintf("i%04d", i)}
	}
	w, err := rollout.Assign(p, ins)
	if err != nil {
		t.Fatal(err)
	}
	return p, w
}

func desired(id string, pins map[string]string) string {
	return fmt.Sprintf("%s-%s", id, pins["api"])
}

// healthy is a status of install id applied and Ready on pins.
func healthy(id string, pins map[string]string, at time.Time) rollout.Report {
	d := desired(id, pins)
	return rollout.Report{Commit: "s-" + d, At: at, Current: d, CurrentPins: pins, Status: &schemas.Status{
		Install: id, Desired: d, Applied: d, Phase: schemas.InstallReady,
		Components: map[string]schemas.ComponentStatus{"api": {Phase: schemas.PhaseApplied, Version: pins["api"], Health: &schemas.Health{Status: schemas.HealthReady}}},
	}}
}

func failed(id string, pins map[string]string, at time.Time) rollout.Report {
	r := healthy(id, pins, at)
	r.Status.Phase = schemas.InstallDegraded
	r.Status.Components = map[string]schemas.ComponentStatus{"api": {Phase: schemas.PhaseFailed, Error: "helm: timed out waiting for api"}}
	return r
}

func deferredReport(id string, pins, had map[string]string, at time.Time) rollout.Report {
	r := healthy(id, had, at)
	r.Current, r.CurrentPins = desired(id, pins), pins
	r.Status.Desired = r.Current
	r.Status.Deferred = &schemas.Deferred{Reason: schemas.DeferredHold, Message: "freeze", Commit: r.Current}
	return r
}

func reportAll(ids []string, f func(string) rollout.Report, into map[string]rollout.Report) {
	for _, id := range ids {
		into[id] = f(id)
	}
}

func TestDecide(t *testing.T) {
	p, w := waveFleet(t, 100)
	canary, tenth, rest := w.Waves[0].Installs, w.Waves[1].Installs, w.Waves[2].Installs
	base, err := rollout.Decide(rollout.Input{Policy: p, Waves: w, Pins: v1, Source: src1, Now: t0})
	if err != nil || base.Decision.Kind != schemas.DecisionBaseline || base.Phase != schemas.RolloutFinished {
		t.Fatalf("baseline: %+v, %v", base, err)
	}
	if d, _ := rollout.Decide(rollout.Input{Policy: p, Waves: w, State: base, Pins: v1, Now: t0}); d != nil {
		t.Fatalf("no change decided %+v", d.Decision)
	}
	started, err := rollout.Decide(rollout.Input{Policy: p, Waves: w, State: base, Pins: v2, Source: src1, Now: t0})
	if err != nil || started.Decision.Kind != schemas.DecisionStarted || rollout.Opened(started) != 1 {
		t.Fatalf("start: %+v, %v", started, err)
	}
	for _, id := range canary {
		if got := rollout.Pins(started, id); got["api"] != "2.0.0" {
			t.Errorf("canary %s pins %v", id, got)
		}
	}
	for _, id := range append(append([]string{}, tenth...), rest...) {
		if got := rollout.Pins(started, id); got["api"] != "1.0.0" {
			t.Errorf("%s outside the open wave pins %v", id, got)
		}
	}

	type step struct {
		name    string
		state   *schemas.RolloutState
		reports func(map[string]rollout.Report)
		now     time.Time
		want    string // decision kind, "" for none
		check   func(t *testing.T, s *schemas.RolloutState)
	}
	healthyAt := func(ids []string, pins map[string]string, at time.Time) func(map[string]rollout.Report) {
		return func(m map[string]rollout.Report) {
			reportAll(ids, func(id string) rollout.Report { return healthy(id, pins, at) }, m)
		}
	}
	// afterCanary is the state once the canary passed.
	afterCanary, _ := rollout.Decide(rollout.Input{Policy: p, Waves: w, State: started, Pins: v2, Now: t0.Add(2 * time.Hour),
		Reports: map[string]rollout.Report{canary[0]: healthy(canary[0], v2, t0.Add(time.Minute))}})
	if afterCanary == nil || afterCanary.Decision.Kind != schemas.DecisionPassed {
		t.Fatalf("canary did not pass: %+v", afterCanary)
	}
	for _, tc := range []step{
		{name: "no status", state: started, reports: func(map[string]rollout.Report) {}, now: t0.Add(3 * time.Hour)},
		{name: "healthy on the old commit never counts", state: started, reports: healthyAt(canary, v1, t0.Add(time.Minute)), now: t0.Add(3 * time.Hour)},
		{name: "healthy, still baking", state: started, reports: healthyAt(canary, v2, t0.Add(30*time.Minute)), now: t0.Add(time.Hour)},
		{name: "healthy and baked", state: started, reports: healthyAt(canary, v2, t0.Add(30*time.Minute)), now: t0.Add(90 * time.Minute), want: schemas.DecisionPassed,
			check: func(t *testing.T, s *schemas.RolloutState) {
				if rollout.Opened(s) != 2 || len(s.Decision.Evidence) != 1 || s.Decision.Evidence[0].Status == "" {
					t.Errorf("opened %d, evidence %+v", rollout.Opened(s), s.Decision.Evidence)
				}
			}},
		{name: "status of new commit, not applied yet", state: started, reports: func(m map[string]rollout.Report) {
			r := healthy(canary[0], v2, t0)
			r.Status.Applied = desired(canary[0], v1)
			m[canary[0]] = r
		}, now: t0.Add(3 * time.Hour)},
		{name: "a failed canary halts", state: started, reports: func(m map[string]rollout.Report) { m[canary[0]] = failed(canary[0], v2, t0) }, now: t0.Add(time.Minute),
			want: schemas.DecisionHalted, check: func(t *testing.T, s *schemas.RolloutState) {
				if len(s.Decision.Evidence) != 1 || !strings.Contains(s.Decision.Evidence[0].Reason, "timed out") {
					t.Errorf("evidence %+v", s.Decision.Evidence)
				}
			}},
		{name: "a failure of the old commit is not the new one's", state: started, reports: func(m map[string]rollout.Report) {
			r := failed(canary[0], v1, t0)
			r.Current, r.CurrentPins = desired(canary[0], v2), v2
			m[canary[0]] = r
		}, now: t0.Add(time.Minute)},
		{name: "deferred is not failed, the wave waits", state: afterCanary, reports: func(m map[string]rollout.Report) {
			healthyAt(tenth[1:], v2, t0.Add(2*time.Hour))(m)
			m[tenth[0]] = deferredReport(tenth[0], v2, v1, t0.Add(2*time.Hour))
		}, now: t0.Add(3 * time.Hour)},
		{name: "deferred past the wait, proceed", state: afterCanary, reports: func(m map[string]rollout.Report) {
			healthyAt(tenth[1:], v2, t0.Add(2*time.Hour))(m)
			m[tenth[0]] = deferredReport(tenth[0], v2, v1, t0.Add(2*time.Hour))
		}, now: t0.Add(5 * time.Hour), want: schemas.DecisionPassed},
		{name: "unreachable counts as deferred", state: afterCanary, reports: func(m map[string]rollout.Report) {
			healthyAt(tenth[1:], v2, t0.Add(2*time.Hour))(m)
			r := healthy(tenth[0], v1, t0)
			r.Status.HeartbeatEvery = "1m"
			m[tenth[0]] = r
		}, now: t0.Add(5 * time.Hour), want: schemas.DecisionPassed, check: func(t *testing.T, s *schemas.RolloutState) {
			for _, e := range s.Decision.Evidence {
				if e.Install == tenth[0] && (e.Outcome != schemas.OutcomeDeferred || !strings.Contains(e.Reason, "unreachable")) {
					t.Errorf("unreachable install: %+v", e)
				}
			}
		}},
		{name: "one failure within the budget of 1", state: afterCanary, reports: func(m map[string]rollout.Report) {
			healthyAt(tenth[1:], v2, t0.Add(2*time.Hour))(m)
			m[tenth[0]] = failed(tenth[0], v2, t0.Add(2*time.Hour))
		}, now: t0.Add(5 * time.Hour), want: schemas.DecisionPassed},
		{name: "two failures roll the wave back", state: afterCanary, reports: func(m map[string]rollout.Report) {
			healthyAt(tenth[2:], v2, t0.Add(2*time.Hour))(m)
			m[tenth[0]] = failed(tenth[0], v2, t0.Add(2*time.Hour))
			m[tenth[1]] = failed(tenth[1], v2, t0.Add(2*time.Hour))
		}, now: t0.Add(5 * time.Hour), want: schemas.DecisionRolledBack, check: func(t *testing.T, s *schemas.RolloutState) {
			for _, id := range tenth {
				if rollout.Pins(s, id)["api"] != "1.0.0" {
					t.Errorf("rolled back %s has %v", id, rollout.Pins(s, id))
				}
			}
			if rollout.Pins(s, canary[0])["api"] != "2.0.0" {
				t.Errorf("canary lost the new version")
			}
			for _, id := range rest {
				if rollout.Pins(s, id)["api"] != "1.0.0" {
					t.Errorf("rest %s has %v", id, rollout.Pins(s, id))
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := map[string]rollout.Report{}
			tc.reports(m)
			got, err := rollout.Decide(rollout.Input{Policy: p, Waves: w, State: tc.state, Pins: v2, Reports: m, Now: tc.now})
			if err != nil {
				t.Fatal(err)
			}
			kind := ""
			if got != nil {
				kind = got.Decision.Kind
				if _, err := roundTrip(got); err != nil {
					t.Fatalf("decision does not parse: %v", err)
				}
			}
			if kind != tc.want {
				t.Fatalf("decision %q, want %q (%+v)", kind, tc.want, got)
			}
			if tc.check != nil {
				tc.check(t, got)
			}
		})
	}

	t.Run("a new pin supersedes a running rollout", func(t *testing.T) {
		s, err := rollout.Decide(rollout.Input{Policy: p, Waves: w, State: afterCanary, Pins: v3, Source: src1, Now: t0.Add(6 * time.Hour)})
		if err != nil || s.Decision.Kind != schemas.DecisionStarted || s.Rollout != 2 {
			t.Fatalf("%+v %v", s, err)
		}
		for _, id := range tenth {
			if rollout.Pins(s, id)["api"] != "2.0.0" {
				t.Errorf("%s of the old open wave starts from %v, want 2.0.0", id, rollout.Pins(s, id))
			}
		}
		for _, id := range rest {
			if rollout.Pins(s, id)["api"] != "1.0.0" {
				t.Errorf("%s starts from %v, want 1.0.0", id, rollout.Pins(s, id))
			}
		}
		if rollout.Pins(s, canary[0])["api"] != "3.0.0" {
			t.Errorf("new canary has %v", rollout.Pins(s, canary[0]))
		}
	})
	t.Run("a pin to an unreleased version is refused", func(t *testing.T) {
		_, err := rollout.Decide(rollout.Input{Policy: p, Waves: w, State: base, Pins: v2, Now: t0,
			Released: func(c, v string) bool { return v != "2.0.0" }})
		if err == nil || !strings.Contains(err.Error(), "channels/stable.yaml: components.api: version 2.0.0 is not released") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("a halted rollout decides nothing more", func(t *testing.T) {
		m := map[string]rollout.Report{}
		reportAll(canary, func(id string) rollout.Report { return failed(id, v2, t0) }, m)
		h, _ := rollout.Decide(rollout.Input{Policy: p, Waves: w, State: started, Pins: v2, Reports: m, Now: t0})
		reportAll(canary, func(id string) rollout.Report { return healthy(id, v2, t0) }, m)
		if d, _ := rollout.Decide(rollout.Input{Policy: p, Waves: w, State: h, Pins: v2, Reports: m, Now: t0.Add(9 * time.Hour)}); d != nil {
			t.Fatalf("halted rollout moved: %+v", d.Decision)
		}
	})
}

func roundTrip(s *schemas.RolloutState) (*schemas.RolloutState, error) {
	b, err := rollout.EncodeState(s)
	if err != nil {
		return nil, err
	}
	return rollout.ParseState("rollout.json", s.Channel, b)
}

// TestDecideRandom drives rollouts over random fleets and random reports
// and checks the invariants every decision keeps: no install outside the
// opened waves has the new pins, a wave opens only after the one before
// it passed with every install not deferred healthy and none failed past
// the budget, a deferred install is never counted failed, and every state
// written parses back.
func TestDecideRandom(t *testing.T) {
	for seed := range 60 {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		n := 5 + rng.IntN(200)
		p, w := waveFleet(t, n)
		s, _ := rollout.Decide(rollout.Input{Policy: p, Waves: w, Pins: v1, Now: t0})
		s, _ = rollout.Decide(rollout.Input{Policy: p, Waves: w, State: s, Pins: v2, Now: t0})
		now := t0
		reports := map[string]rollout.Report{}
		for range 40 {
			now = now.Add(time.Duration(rng.IntN(120)) * time.Minute)
			for _, wave := range s.Waves {
				for _, id := range wave.Installs {
					switch rng.IntN(10) {
					case 0:
						reports[id] = failed(id, v2, now)
					case 1:
						reports[id] = deferredReport(id, v2, v1, now)
					case 2, 3:
						reports[id] = healthy(id, v1, now) // old commit
					default:
						reports[id] = healthy(id, v2, now)
					}
				}
			}
			next, err := rollout.Decide(rollout.Input{Policy: p, Waves: w, State: s, Pins: v2, Reports: reports, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if next == nil {
				continue
			}
			if _, err := roundTrip(next); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			k := next.Decision.Wave
			j := rollout.Judge(s.Waves[k-1].Installs, reports, v2, *s.Waves[k-1].Opened, now)
			for _, e := range j.Evidence {
				if r := reports[e.Install]; r.Status != nil && r.Status.Deferred != nil && e.Outcome == schemas.OutcomeFailed && r.Status.Phase != schemas.InstallDegraded {
					t.Fatalf("seed %d: deferred install %s counted failed", seed, e.Install)
				}
			}
			switch next.Decision.Kind {
			case schemas.DecisionPassed, schemas.DecisionFinished:
				if j.Failed > p.Waves[k-1].FailureBudget || j.Waiting > 0 || j.Healthy < p.Waves[k-1].MinHealthy {
					t.Fatalf("seed %d: wave %d passed with %+v", seed, k, j)
				}
			case schemas.DecisionHalted, schemas.DecisionRolledBack:
				if j.Failed <= p.Waves[k-1].FailureBudget && j.Deferred == 0 {
					t.Fatalf("seed %d: wave %d halted with %+v", seed, k, j)
				}
			}
			for i, wave := range w.Waves {
				for _, id := range wave.Installs {
					got := rollout.Pins(next, id)["api"]
					open := next.Waves[i].Opened != nil
					if got == "2.0.0" && !open && next.Phase != schemas.RolloutFinished {
						t.Fatalf("seed %d: %s of unopened wave %d has the new pins", seed, id, i+1)
					}
				}
			}
			s = next
		}
	}
}

// TestClassifyAnswers: a hold and a plan waiting for approval are
// deferred; a plan a policy denied or an approver rejected is a failure
// of the release on that install, counted against the wave's budget.
func TestClassifyAnswers(t *testing.T) {
	pins := map[string]string{"api": "2.0.0"}
	for _, tc := range []struct {
		name  string
		phase string
		want  string
	}{
		{"awaiting approval", schemas.PhaseAwaitingApproval, schemas.OutcomeDeferred},
		{"rejected by policy", schemas.PhaseRejected, schemas.OutcomeFailed},
		{"failed", schemas.PhaseFailed, schemas.OutcomeFailed},
		{"applied", schemas.PhaseApplied, schemas.OutcomeHealthy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := healthy("acme", pins, t0)
			r.Status.Components = map[string]schemas.ComponentStatus{"api": {Phase: tc.phase, Version: "2.0.0", Error: "policy no-delete: deny"}}
			if tc.phase == schemas.PhaseAwaitingApproval {
				r.Status.Phase = schemas.InstallAwaitingApproval
				r.Status.Deferred = &schemas.Deferred{Reason: schemas.DeferredApproval, Message: "plan waits", Commit: r.Current}
			}
			if tc.phase != schemas.PhaseApplied && tc.phase != schemas.PhaseAwaitingApproval {
				r.Status.Phase = schemas.InstallDegraded
			}
			if got := rollout.Classify("acme", r, true, pins, t0); got.Outcome != tc.want {
				t.Errorf("outcome %s (%s), want %s", got.Outcome, got.Reason, tc.want)
			}
		})
	}
}

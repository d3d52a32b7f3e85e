package rollout_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

// TestTallySettled checks Settled's promise on random fleets: whenever
// the tally, kept up to date with the statuses that changed only, says
// settled, Decide on the whole wave decides nothing. Statuses change a
// few at a time, some failing, some deferred, some for the old commit,
// some with a heartbeat that runs out; the tally's counts, where no
// heartbeat runs out, agree with a tally made afresh.
func TestTallySettled(t *testing.T) {
	var settled, decided int
	kinds := map[string]int{}
	for seed := range 80 {
		rng := rand.New(rand.NewPCG(uint64(seed), 11))
		n := 5 + rng.IntN(150)
		p, w := waveFleet(t, n)
		s, _ := rollout.Decide(rollout.Input{Policy: p, Waves: w, Pins: v1, Now: t0})
		s, _ = rollout.Decide(rollout.Input{Policy: p, Waves: w, State: s, Pins: v2, Now: t0})
		now := t0
		reports := map[string]rollout.Report{}
		tally := rollout.NewTally(s, reports, now)
		for range 300 {
			now = now.Add(time.Duration(rng.IntN(30)) * time.Minute)
			k := rollout.Opened(s)
			if k == 0 || s.Phase != schemas.RolloutRunning {
				break
			}
			wave := s.Waves[k-1].Installs
			for range 1 + rng.IntN(3) {
				id := wave[rng.IntN(len(wave))]
				if r, ok := reports[id]; ok && r.Current == desired(id, v2) && r.Status.Deferred == nil && rng.IntN(10) > 0 {
					continue // an install on the new version mostly stays as it is
				}
				var r rollout.Report
				switch x := rng.IntN(80); {
				case x == 0:
					r = failed(id, v2, now)
				case x < 5:
					r = deferredReport(id, v2, v1, now)
				case x < 15:
					r = healthy(id, v1, now) // old commit
				default:
					r = healthy(id, v2, now)
				}
				if rng.IntN(3) == 0 {
					r.Status.HeartbeatEvery = "10m"
				}
				reports[id] = r
				tally.Update(id, r, true, now)
			}
			next, err := rollout.Decide(rollout.Input{Policy: p, Waves: w, State: s, Pins: v2, Reports: reports, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if tally.Settled(p, s, v2, now) {
				settled++
				if next != nil {
					t.Fatalf("seed %d: settled, but Decide decided %s: %s", seed, next.Decision.Kind, next.Decision.Reason)
				}
			}
			if tally.Settled(p, s, v3, now) {
				t.Fatalf("seed %d: settled although main's pins changed", seed)
			}
			fresh := rollout.NewTally(s, reports, now)
			fw, ff := fresh.Counts()
			tw, tf := tally.Counts()
			stale := false
			for _, id := range wave {
				if r, ok := reports[id]; ok && r.Status.HeartbeatEvery != "" && now.Sub(r.At) > 20*time.Minute {
					stale = true
				}
			}
			if !stale && (fw != tw || ff != tf) {
				t.Fatalf("seed %d: tally waiting %d failed %d, afresh %d and %d", seed, tw, tf, fw, ff)
			}
			if !stale {
				// The page's judgement: Judge's counts, and its evidence
				// problems first, bounded.
				full := rollout.Judge(wave, reports, v2, *s.Waves[k-1].Opened, now)
				j := tally.Judgement(7)
				rank := map[string]int{schemas.OutcomeFailed: 0, schemas.OutcomeDeferred: 1, schemas.OutcomeWaiting: 2, schemas.OutcomeHealthy: 3}
				want := slices.Clone(full.Evidence)
				slices.SortStableFunc(want, func(a, b schemas.RolloutEvidence) int { return rank[a.Outcome] - rank[b.Outcome] })
				want = want[:min(7, len(want))]
				if j.Healthy != full.Healthy || j.Failed != full.Failed || j.Deferred != full.Deferred || j.Waiting != full.Waiting ||
					j.Omitted != len(wave)-len(want) || !slices.EqualFunc(j.Evidence, want, func(a, b schemas.RolloutEvidence) bool { return a == b }) {
					t.Fatalf("seed %d: tally judgement %+v, Judge's %+v", seed, j, want)
				}
			}
			if next != nil {
				decided++
				kinds[next.Decision.Kind]++
				if tally.Settled(p, next, v2, now) {
					t.Fatalf("seed %d: a tally of the previous state settles the next", seed)
				}
				s = next
				tally = rollout.NewTally(s, reports, now)
			}
		}
	}
	if settled == 0 || decided == 0 {
		t.Fatalf("settled %d times, decided %d: the test checks nothing", settled, decided)
	}
	t.Logf("settled %d evaluations, decided %d: %v", settled, decided, kinds)
}

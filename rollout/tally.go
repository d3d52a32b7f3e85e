package rollout

import (
	"time"

	"nuon.dev/nuon/schemas"
)

// Tally is how the installs of a running rollout's open wave stood when
// they were last classified: what the controller keeps between
// evaluations so that one in which a few statuses changed classifies
// those few again, not the wave. Settled then says, from the tally
// alone, that Decide would decide nothing; when it cannot say so, the
// controller calls Decide, which judges the whole wave.
//
// A tally is of one state: the controller drops it when the state, or
// main's pins, change (Settled refuses another state).
type Tally struct {
	of *schemas.RolloutState
	// evidence is each install's classification, by install.
	evidence map[string]schemas.RolloutEvidence
	// counts are the installs of each outcome.
	counts       map[string]int
	healthySince time.Time
	// due is the earliest time an install's latest status gets old
	// enough for it to count as unreachable (Classify): a waiting
	// install may then turn deferred with no new status. It is a lower
	// bound: an install classified again only makes its own later.
	due time.Time
}

// NewTally classifies every install of s's open wave from reports at
// now, as Judge does; nil when s has no open wave.
func NewTally(s *schemas.RolloutState, reports map[string]Report, now time.Time) *Tally {
	k := Opened(s)
	if k == 0 {
		return nil
	}
	t := &Tally{of: s, evidence: make(map[string]schemas.RolloutEvidence, len(s.Waves[k-1].Installs)),
		counts: map[string]int{}, healthySince: *s.Waves[k-1].Opened}
	for _, id := range s.Waves[k-1].Installs {
		r, ok := reports[id]
		t.set(id, r, ok, now)
	}
	return t
}

// Update classifies install id again from its latest report r (ok false:
// it has none). An install outside the open wave is ignored.
func (t *Tally) Update(id string, r Report, ok bool, now time.Time) {
	if t == nil {
		return
	}
	if _, in := t.evidence[id]; !in {
		return
	}
	t.set(id, r, ok, now)
}

func (t *Tally) set(id string, r Report, ok bool, now time.Time) {
	if old, in := t.evidence[id]; in {
		t.counts[old.Outcome]--
	}
	e := Classify(id, r, ok, t.of.To, now)
	t.evidence[id] = e
	t.counts[e.Outcome]++
	if e.Outcome == schemas.OutcomeHealthy && r.At.After(t.healthySince) {
		t.healthySince = r.At
	}
	if ok && r.Status != nil {
		if every, err := time.ParseDuration(r.Status.HeartbeatEvery); err == nil && every > 0 {
			if due := r.At.Add(2 * every); t.due.IsZero() || due.Before(t.due) {
				t.due = due
			}
		}
	}
}

// Settled reports whether Decide, given policy p, state s and main's
// pins, would decide nothing at now, from the tally alone: s is the
// running state the tally is of and its pins are main's, an install of
// the open wave is still waiting (so the wave can neither pass nor halt
// for deferred installs), its failures are within the wave's budget, and
// no install's status has got old enough to turn it unreachable.
func (t *Tally) Settled(p *Policy, s *schemas.RolloutState, pins map[string]string, now time.Time) bool {
	if t == nil || s == nil || t.of != s || s.Phase != schemas.RolloutRunning || !samePins(s.To, pins) {
		return false
	}
	k := Opened(s)
	if k == 0 || len(p.Waves) == 0 {
		return false
	}
	spec := p.Waves[min(k, len(p.Waves))-1]
	return t.counts[schemas.OutcomeWaiting] > 0 && t.counts[schemas.OutcomeFailed] <= spec.FailureBudget && (t.due.IsZero() || !now.After(t.due))
}

// Of reports whether the tally is of state s.
func (t *Tally) Of(s *schemas.RolloutState) bool { return t != nil && t.of == s }

// Counts are the tally's waiting and failed installs.
func (t *Tally) Counts() (waiting, failed int) {
	return t.counts[schemas.OutcomeWaiting], t.counts[schemas.OutcomeFailed]
}

// Judgement is the tally as Judge gives it, with at most limit installs'
// evidence: failed first, then deferred, waiting and healthy, each by
// install; Omitted counts those left out. HealthySince is the latest
// time an install was seen turning healthy, though it may not be healthy
// still: Decide, not the tally, decides on a bake.
func (t *Tally) Judgement(limit int) Judgement {
	j := Judgement{Healthy: t.counts[schemas.OutcomeHealthy], Failed: t.counts[schemas.OutcomeFailed],
		Deferred: t.counts[schemas.OutcomeDeferred], Waiting: t.counts[schemas.OutcomeWaiting], HealthySince: t.healthySince}
	installs := t.of.Waves[Opened(t.of)-1].Installs
	for _, outcome := range []string{schemas.OutcomeFailed, schemas.OutcomeDeferred, schemas.OutcomeWaiting, schemas.OutcomeHealthy} {
		if len(j.Evidence) >= limit || t.counts[outcome] == 0 {
			continue
		}
		for _, id := range installs {
			if e := t.evidence[id]; e.Outcome == outcome {
				j.Evidence = append(j.Evidence, e)
				if len(j.Evidence) >= limit {
					break
				}
			}
		}
	}
	j.Omitted = len(installs) - len(j.Evidence)
	return j
}

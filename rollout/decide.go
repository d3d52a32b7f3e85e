package rollout

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"nuon.dev/nuon/schemas"
)

// Report is what the controller knows of an install's latest status: a
// status commit the server verified as signed by the install's own key,
// summarized.
type Report struct {
	// Commit is the status commit; At its commit time.
	Commit string
	At     time.Time
	// Current is the install's desired commit now (its install ref), and
	// CurrentPins the component versions that commit renders.
	Current     string
	CurrentPins map[string]string
	// Status is the status.json of Commit.
	Status *schemas.Status
}

// Input is everything a decision depends on.
type Input struct {
	// Policy is the channel's rollout policy and Waves its installs'
	// assignment (Assign).
	Policy *Policy
	Waves  *Waves
	// State is the channel's rollout state, nil before the first decision.
	State *schemas.RolloutState
	// Pins are the channel's pins on main, Source that main commit.
	Pins   map[string]string
	Source string
	// Reports are the installs' latest verified statuses, by install; an
	// install without one has not reported.
	Reports map[string]Report
	// Released, when not nil, tells whether a component's version has a
	// release record on main: a rollout to an unreleased version is
	// refused.
	Released func(component, version string) bool
	Now      time.Time
}

// Decide returns the next decision of a channel's rollout as the new
// state, or nil when nothing is to be decided now. It is a pure function
// of in; the controller writes what it returns as a signed commit.
//
//   - No state yet: a baseline of the channel's pins (nothing moves).
//   - The pins on main differ from the state's To: a new rollout starts
//     with its first non-empty wave open; a rollout still running, halted
//     or rolled back is superseded, each install's from-pins being the
//     pins it had under it.
//   - A running rollout's last opened wave: halted (or rolled back) when
//     its failures exceed its budget, or when it waited Deferred.Wait for
//     deferred installs and the policy says halt; passed, opening the
//     next non-empty wave or finishing, when every install not deferred
//     is healthy on the new pins, minHealthy are, the bake time has
//     passed since the last of them turned healthy, and deferred ones, if
//     any, were waited for.
//
// An error says the input cannot be decided on (a pin to an unreleased
// version): nothing moves.
func Decide(in Input) (*schemas.RolloutState, error) {
	s := in.State
	if s == nil {
		return baseline(in), nil
	}
	if !samePins(s.To, in.Pins) {
		return start(in)
	}
	if s.Phase != schemas.RolloutRunning {
		return nil, nil
	}
	return evaluate(in), nil
}

func baseline(in Input) *schemas.RolloutState {
	return &schemas.RolloutState{
		APIVersion: schemas.APIVersion, Kind: schemas.KindRolloutState,
		Channel: in.Policy.Channel, Source: in.Source, Phase: schemas.RolloutFinished,
		From: maps.Clone(in.Pins), To: maps.Clone(in.Pins), Waves: []schemas.RolloutWaveState{},
		Decision: schemas.RolloutDecision{Kind: schemas.DecisionBaseline, At: in.Now, By: By,
			Reason: "the channel's pins when the rollout controller first saw it"},
	}
}

// By is the decider the controller records.
const By = "controller"

func start(in Input) (*schemas.RolloutState, error) {
	old := in.State
	if in.Released != nil {
		for _, c := range slices.Sorted(maps.Keys(in.Pins)) {
			if !in.Released(c, in.Pins[c]) {
				return nil, fmt.Errorf("%s: components.%s: version %s is not released (no releases/%s.yaml record): the rollout does not start",
					in.Policy.File, c, in.Pins[c], c)
			}
		}
	}
	s := &schemas.RolloutState{
		APIVersion: schemas.APIVersion, Kind: schemas.KindRolloutState,
		Channel: in.Policy.Channel, Rollout: old.Rollout + 1, Source: in.Source, Phase: schemas.RolloutRunning,
		From: maps.Clone(Pins(old, "")), To: maps.Clone(in.Pins),
	}
	reason := fmt.Sprintf("the channel's pins changed to %s", pinList(in.Pins))
	if old.Phase != schemas.RolloutFinished {
		// Superseded: each install starts from what it has.
		s.From = maps.Clone(old.From)
		for _, w := range in.Waves.Waves {
			for _, id := range w.Installs {
				if p := Pins(old, id); !samePins(p, s.From) {
					if s.FromInstalls == nil {
						s.FromInstalls = map[string]map[string]string{}
					}
					s.FromInstalls[id] = maps.Clone(p)
				}
			}
		}
		reason += fmt.Sprintf("; supersedes rollout %d (%s), each install starting from the pins it had", old.Rollout, old.Phase)
	}
	for _, w := range in.Waves.Waves {
		s.Waves = append(s.Waves, schemas.RolloutWaveState{Name: w.Name, Size: len(w.Installs)})
	}
	next := openNext(s, in.Waves, 0, in.Now)
	if next == 0 {
		s.Phase = schemas.RolloutFinished
		s.Decision = schemas.RolloutDecision{Kind: schemas.DecisionFinished, At: in.Now, By: By, Reason: reason + "; every wave is empty"}
		return s, nil
	}
	s.Decision = schemas.RolloutDecision{Kind: schemas.DecisionStarted, Wave: next, At: in.Now, By: By,
		Reason: reason + fmt.Sprintf("; wave %s opens", s.Waves[next-1].Name)}
	return s, nil
}

// openNext opens the first non-empty wave after wave number after and
// returns its number, 0 when none is left.
func openNext(s *schemas.RolloutState, waves *Waves, after int, now time.Time) int {
	for i := after; i < len(s.Waves); i++ {
		w := waves.Waves[i]
		at := now
		s.Waves[i].Opened = &at
		s.Waves[i].Installs = slices.Clone(w.Installs)
		if len(w.Installs) > 0 {
			return i + 1
		}
		s.Waves[i].Passed = &at // empty: skipped
	}
	return 0
}

// Judgement is how one wave stands.
type Judgement struct {
	Healthy, Failed, Deferred, Waiting int
	// Evidence has one entry per install of the wave, sorted by install.
	Evidence []schemas.RolloutEvidence
	// HealthySince is when the last of the healthy installs turned
	// healthy (its status commit's time, not before the wave opened).
	HealthySince time.Time
	// Omitted counts the installs whose evidence a bounded judgement
	// (Tally.Judgement) leaves out of Evidence.
	Omitted int `json:",omitempty"`
}

// Judge classifies every install of wave w (opened at opened) on the new
// pins to. See Classify.
func Judge(w []string, reports map[string]Report, to map[string]string, opened, now time.Time) Judgement {
	j := Judgement{HealthySince: opened}
	for _, id := range w {
		r, ok := reports[id]
		e := Classify(id, r, ok, to, now)
		switch e.Outcome {
		case schemas.OutcomeHealthy:
			j.Healthy++
			if r.At.After(j.HealthySince) {
				j.HealthySince = r.At
			}
		case schemas.OutcomeFailed:
			j.Failed++
		case schemas.OutcomeDeferred:
			j.Deferred++
		default:
			j.Waiting++
		}
		j.Evidence = append(j.Evidence, e)
	}
	return j
}

// Classify says how install id stands on the new pins to, from its latest
// verified status r (ok false: none):
//
//   - deferred: its agent holds the change (a customer hold, no window),
//     its desired state is stale, or it is unreachable (no status commit
//     for twice its heartbeat interval) — never failed;
//   - healthy: the status names the install's current desired commit,
//     which renders to, as both desired and applied, the install Ready
//     and every component Applied and, where it reports health, Ready;
//   - failed: the status names that desired commit and the install
//     refused it, or a component failed, is blocked, or is unhealthy;
//   - waiting: anything else — no status, or one about an older desired
//     commit (health reported for an older commit never counts).
func Classify(id string, r Report, ok bool, to map[string]string, now time.Time) schemas.RolloutEvidence {
	e := schemas.RolloutEvidence{Install: id, Outcome: schemas.OutcomeWaiting}
	if !ok || r.Status == nil {
		e.Reason = "no status"
		return e
	}
	st := r.Status
	e.Status, e.Desired = r.Commit, st.Desired
	if every, err := time.ParseDuration(st.HeartbeatEvery); err == nil && every > 0 && now.Sub(r.At) > 2*every {
		e.Outcome, e.Reason = schemas.OutcomeDeferred, fmt.Sprintf("unreachable: no status since %s", r.At.UTC().Format(time.RFC3339))
		return e
	}
	newState := st.Desired != "" && st.Desired == r.Current && covers(r.CurrentPins, to)
	if !newState {
		switch {
		case st.Deferred != nil:
			e.Outcome, e.Reason = schemas.OutcomeDeferred, "deferred ("+st.Deferred.Reason+"): "+st.Deferred.Message
		case st.Stale:
			e.Outcome, e.Reason = schemas.OutcomeDeferred, "stale: its desired state is past its expiry"
		default:
			e.Reason = "its status names an older desired commit"
		}
		return e
	}
	if errs := failures(st); len(errs) > 0 {
		e.Outcome, e.Reason = schemas.OutcomeFailed, strings.Join(errs, "; ")
		return e
	}
	switch {
	case st.Deferred != nil:
		e.Outcome, e.Reason = schemas.OutcomeDeferred, "deferred ("+st.Deferred.Reason+"): "+st.Deferred.Message
	case st.Stale:
		e.Outcome, e.Reason = schemas.OutcomeDeferred, "stale: its desired state is past its expiry"
	case st.Applied != st.Desired:
		e.Reason = "applying"
	case st.Phase != schemas.InstallReady:
		e.Reason = "install phase " + st.Phase
	default:
		for _, c := range slices.Sorted(maps.Keys(st.Components)) {
			cs := st.Components[c]
			if cs.Phase != schemas.PhaseApplied {
				e.Reason = fmt.Sprintf("component %s is %s", c, cs.Phase)
				return e
			}
			if cs.Health != nil && cs.Health.Status != schemas.HealthReady {
				e.Reason = fmt.Sprintf("component %s is %s", c, cs.Health.Status)
				return e
			}
		}
		e.Outcome, e.Reason = schemas.OutcomeHealthy, ""
	}
	return e
}

// failures are a status's errors that fail it: a refusal, failed or
// blocked components, unhealthy ones.
func failures(st *schemas.Status) []string {
	var out []string
	if st.Phase == schemas.InstallRefused {
		msg := "refused"
		if st.Refusal != nil {
			msg = "refused: " + st.Refusal.Reason
		}
		out = append(out, msg)
	}
	for _, c := range slices.Sorted(maps.Keys(st.Components)) {
		cs := st.Components[c]
		switch {
		case cs.Phase == schemas.PhaseFailed || cs.Phase == schemas.PhaseBlocked:
			out = append(out, fmt.Sprintf("%s %s: %s", c, strings.ToLower(cs.Phase), cs.Error))
		case cs.Phase == schemas.PhaseRejected:
			// A plan of the new version that a policy denied or an
			// approver rejected: this release cannot go on here. It
			// counts against the wave's budget (a hold or a wait for
			// approval is deferred; a "no" is an answer).
			out = append(out, fmt.Sprintf("%s rejected: %s", c, cs.Error))
		case cs.Health != nil && cs.Health.Status == schemas.HealthFailed:
			out = append(out, fmt.Sprintf("%s unhealthy: %s", c, cs.Health.Message))
		}
	}
	return out
}

// covers reports whether pins renders every version of to.
func covers(pins, to map[string]string) bool {
	for c, v := range to {
		if pins[c] != v {
			return false
		}
	}
	return true
}

// evaluate judges the last opened wave of a running rollout.
func evaluate(in Input) *schemas.RolloutState {
	s := in.State
	k := Opened(s) // 1-based number of the last opened wave
	if k == 0 {
		return nil
	}
	w := s.Waves[k-1]
	spec := in.Policy.Waves[min(k, len(in.Policy.Waves))-1]
	j := Judge(w.Installs, in.Reports, s.To, *w.Opened, in.Now)
	next := clone(s)
	next.Decision = schemas.RolloutDecision{Wave: k, At: in.Now, By: By}
	waited := in.Now.Sub(*w.Opened) >= in.Policy.DeferredWait
	switch {
	case j.Failed > spec.FailureBudget:
		failed := only(j.Evidence, schemas.OutcomeFailed)
		next.Decision.Evidence = failed
		next.Decision.Reason = fmt.Sprintf("wave %s: %d of %d installs failed, over its failure budget of %d", w.Name, j.Failed, len(w.Installs), spec.FailureBudget)
		next.Phase, next.Decision.Kind = schemas.RolloutHalted, schemas.DecisionHalted
		if spec.OnFailure == Rollback {
			next.Phase, next.Decision.Kind = schemas.RolloutRolledBack, schemas.DecisionRolledBack
			next.Rollback = map[string]map[string]string{}
			for _, id := range w.Installs {
				p := s.From
				if fp, ok := s.FromInstalls[id]; ok {
					p = fp
				}
				next.Rollback[id] = maps.Clone(p)
			}
			next.Decision.Reason += "; its installs go back to the pins they had"
		}
		return next
	case j.Deferred > 0 && waited && in.Policy.DeferredThen == HaltDeferred && j.Waiting == 0:
		next.Decision.Evidence = only(j.Evidence, schemas.OutcomeDeferred)
		next.Decision.Reason = fmt.Sprintf("wave %s: %d installs deferred for %s, and deferred.then is halt", w.Name, j.Deferred, in.Policy.DeferredWait)
		next.Phase, next.Decision.Kind = schemas.RolloutHalted, schemas.DecisionHalted
		return next
	}
	if j.Waiting > 0 || j.Healthy < spec.MinHealthy || (j.Deferred > 0 && !waited) || in.Now.Before(j.HealthySince.Add(spec.Bake)) {
		return nil
	}
	passed := in.Now
	next.Waves[k-1].Passed = &passed
	next.Decision.Evidence = j.Evidence
	reason := fmt.Sprintf("wave %s: %d of %d installs healthy on %s for %s", w.Name, j.Healthy, len(w.Installs), pinList(s.To), spec.Bake)
	if j.Deferred > 0 {
		reason += fmt.Sprintf(", %d deferred past the %s wait", j.Deferred, in.Policy.DeferredWait)
	}
	if n := openNext(next, in.Waves, k, in.Now); n > 0 {
		next.Decision.Kind, next.Decision.Reason = schemas.DecisionPassed, reason+fmt.Sprintf("; wave %s opens", next.Waves[n-1].Name)
		return next
	}
	next.Phase = schemas.RolloutFinished
	next.Decision.Kind, next.Decision.Reason = schemas.DecisionFinished, reason+"; the rollout is finished"
	return next
}

func only(es []schemas.RolloutEvidence, outcome string) []schemas.RolloutEvidence {
	var out []schemas.RolloutEvidence
	for _, e := range es {
		if e.Outcome == outcome {
			out = append(out, e)
		}
	}
	return out
}

// clone copies s deep enough for a decision to change it.
func clone(s *schemas.RolloutState) *schemas.RolloutState {
	c := *s
	c.Waves = slices.Clone(s.Waves)
	c.Decision = schemas.RolloutDecision{}
	return &c
}

func pinList(p map[string]string) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "@" + p[k]
	}
	return strings.Join(keys, ",")
}

package rollout

import (
	"fmt"
	"time"

	"nuon.dev/nuon/schemas"
)

// Control carries out an operator's rollout request on state s at now and
// returns the next state, whose decision names the request (by): it is a
// pure function, like Decide, and the controller writes what it returns.
//
//   - pause: a running rollout stops where it stands — no wave is judged
//     or opened; the installs of opened waves keep the new pins.
//   - resume: a paused rollout runs again from where it stood: its open
//     wave is judged as before, its bake time counted from the wave's
//     healthy statuses as before.
//   - abort: a running, paused, halted or rolled-back rollout stops for
//     good; every install keeps the pins it has. Only a new pin on main
//     starts a new rollout (Decide), from each install's pins.
//
// An error says the request does not apply to the rollout as it stands
// (pause of a paused rollout, resume of a running one, anything on a
// finished one): nothing moves.
func Control(s *schemas.RolloutState, action, reason string, by schemas.RolloutRequestRef, now time.Time) (*schemas.RolloutState, error) {
	if s == nil {
		return nil, fmt.Errorf("the channel has no rollout yet")
	}
	name := fmt.Sprintf("rollout %d of channel %s", s.Rollout, s.Channel)
	next := clone(s)
	var kind string
	switch action {
	case schemas.RolloutPause:
		if s.Phase != schemas.RolloutRunning {
			return nil, fmt.Errorf("%s is %s: only a running rollout pauses", name, s.Phase)
		}
		next.Phase, kind = schemas.RolloutPaused, schemas.DecisionPaused
	case schemas.RolloutResume:
		if s.Phase != schemas.RolloutPaused {
			return nil, fmt.Errorf("%s is %s: only a paused rollout resumes (a halted one resumes by a new pin on main)", name, s.Phase)
		}
		next.Phase, kind = schemas.RolloutRunning, schemas.DecisionResumed
	case schemas.RolloutAbort:
		switch s.Phase {
		case schemas.RolloutRunning, schemas.RolloutPaused, schemas.RolloutHalted, schemas.RolloutRolledBack:
		default:
			return nil, fmt.Errorf("%s is %s: there is nothing to abort", name, s.Phase)
		}
		next.Phase, kind = schemas.RolloutAborted, schemas.DecisionAborted
	default:
		return nil, fmt.Errorf("action %q is not pause, resume or abort", action)
	}
	text := fmt.Sprintf("%s %s the rollout (was %s)", by.Principal, kind, s.Phase)
	if reason != "" {
		text += ": " + reason
	}
	req := by
	next.Decision = schemas.RolloutDecision{Kind: kind, Wave: Opened(s), At: now, By: by.Principal + " (" + by.Key + ")",
		Reason: text, Request: &req}
	return next, nil
}

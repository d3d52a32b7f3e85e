package rollout

import (
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/schemas"
)

// TestControl: which actions apply in which phase, what they leave of the
// state, and that the pins each install gets do not change.
func TestControl(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	opened := at
	base := &schemas.RolloutState{APIVersion: schemas.APIVersion, Kind: schemas.KindRolloutState, Channel: "stable", Rollout: 2,
		From: map[string]string{"db": "1"}, To: map[string]string{"db": "2"},
		Waves: []schemas.RolloutWaveState{{Name: "canary", Size: 1, Installs: []string{"acme"}, Opened: &opened}, {Name: "rest", Size: 1}}}
	phase := func(p string) *schemas.RolloutState {
		s := *base
		s.Phase = p
		if p == schemas.RolloutRolledBack {
			s.Rollback = map[string]map[string]string{"acme": {"db": "1"}}
		}
		return &s
	}
	by := schemas.RolloutRequestRef{ID: "r-1", Principal: "support", Key: "opkey", Commit: strings.Repeat("c", 40)}
	for _, tc := range []struct {
		phase, action, want, err string
	}{
		{schemas.RolloutRunning, schemas.RolloutPause, schemas.RolloutPaused, ""},
		{schemas.RolloutPaused, schemas.RolloutPause, "", "only a running rollout pauses"},
		{schemas.RolloutHalted, schemas.RolloutPause, "", "only a running rollout pauses"},
		{schemas.RolloutPaused, schemas.RolloutResume, schemas.RolloutRunning, ""},
		{schemas.RolloutRunning, schemas.RolloutResume, "", "only a paused rollout resumes"},
		{schemas.RolloutHalted, schemas.RolloutResume, "", "a halted one resumes by a new pin"},
		{schemas.RolloutAborted, schemas.RolloutResume, "", "only a paused rollout resumes"},
		{schemas.RolloutRunning, schemas.RolloutAbort, schemas.RolloutAborted, ""},
		{schemas.RolloutPaused, schemas.RolloutAbort, schemas.RolloutAborted, ""},
		{schemas.RolloutHalted, schemas.RolloutAbort, schemas.RolloutAborted, ""},
		{schemas.RolloutRolledBack, schemas.RolloutAbort, schemas.RolloutAborted, ""},
		{schemas.RolloutFinished, schemas.RolloutAbort, "", "nothing to abort"},
		{schemas.RolloutAborted, schemas.RolloutAbort, "", "nothing to abort"},
		{schemas.RolloutRunning, "rollback", "", "not pause, resume or abort"},
	} {
		s := phase(tc.phase)
		next, err := Control(s, tc.action, "why", by, at.Add(time.Hour))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || next != nil {
				t.Errorf("%s of %s: %v, want %q", tc.action, tc.phase, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s of %s: %v", tc.action, tc.phase, err)
			continue
		}
		if next.Phase != tc.want || next.Decision.Request == nil || next.Decision.Request.Commit != by.Commit || next.Decision.Wave != 1 ||
			!strings.Contains(next.Decision.Reason, "support") || !strings.Contains(next.Decision.Reason, "why") {
			t.Errorf("%s of %s: %+v", tc.action, tc.phase, next)
		}
		if s.Phase != tc.phase || s.Decision.Request != nil {
			t.Errorf("%s of %s changed its input", tc.action, tc.phase)
		}
		for _, id := range []string{"acme", "initech"} {
			if a, b := Pins(s, id), Pins(next, id); !samePins(a, b) {
				t.Errorf("%s of %s: %s's pins %v → %v", tc.action, tc.phase, id, a, b)
			}
		}
		data, err := EncodeState(next)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseState("rollout.json", "stable", data); err != nil {
			t.Errorf("%s of %s: the state does not parse back: %v", tc.action, tc.phase, err)
		}
		// Nothing decides on a paused or aborted rollout until the pins
		// change; a pin change starts a new rollout.
		if next.Phase != schemas.RolloutRunning {
			p := &Policy{Channel: "stable", File: "channels/stable.yaml", Waves: []WaveSpec{{Name: "canary"}, {Name: "rest"}}}
			w := &Waves{Channel: "stable", Waves: []Wave{{Name: "canary", Installs: []string{"acme"}}, {Name: "rest", Installs: []string{"initech"}}}}
			if d, err := Decide(Input{Policy: p, Waves: w, State: next, Pins: next.To, Now: at.Add(48 * time.Hour)}); d != nil || err != nil {
				t.Errorf("%s: decided %+v %v", next.Phase, d, err)
			}
			d, err := Decide(Input{Policy: p, Waves: w, State: next, Pins: map[string]string{"db": "3"}, Now: at.Add(48 * time.Hour)})
			if err != nil || d == nil || d.Decision.Kind != schemas.DecisionStarted || d.Rollout != 3 || Pins(d, "initech")["db"] != Pins(next, "initech")["db"] {
				t.Errorf("%s: a new pin: %+v %v", next.Phase, d, err)
			}
		}
	}
	if _, err := Control(nil, schemas.RolloutPause, "", by, at); err == nil {
		t.Error("control of no state")
	}
}

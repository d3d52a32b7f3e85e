package rollout_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

// FuzzParseState feeds rollout.json files to ParseState: it never panics,
// refuses with a problem naming the file, and what it accepts encodes to
// a state it accepts again, with every install in one wave at most.
func FuzzParseState(f *testing.F) {
	p, w := waveFleet(f, 30)
	base, _ := rollout.Decide(rollout.Input{Policy: p, Waves: w, Pins: v1, Source: src1, Now: t0})
	started, _ := rollout.Decide(rollout.Input{Policy: p, Waves: w, State: base, Pins: v2, Source: src1, Now: t0})
	m := map[string]rollout.Report{}
	for _, id := range started.Waves[0].Installs {
		m[id] = failed(id, v2, t0)
	}
	halted, _ := rollout.Decide(rollout.Input{Policy: p, Waves: w, State: started, Pins: v2, Reports: m, Now: t0.Add(time.Hour)})
	for _, s := range []*schemas.RolloutState{base, started, halted} {
		b, err := rollout.EncodeState(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"apiVersion":"nuon.dev/v1","kind":"RolloutState","channel":"stable","rollout":1,"source":"","phase":"running","from":{},"to":{},"waves":[{"name":"a","size":1,"installs":["x"]}],"decision":{"kind":"started","wave":1,"at":"2030-01-01T00:00:00Z","by":"controller","reason":""}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := rollout.ParseState("rollouts/stable/rollout.json", "stable", data)
		if err != nil {
			var ps schemas.Problems
			if errors.As(err, &ps) {
				for _, p := range ps {
					if p.File != "rollouts/stable/rollout.json" {
						t.Fatalf("problem names %q: %v", p.File, p)
					}
				}
			} else if !strings.HasPrefix(err.Error(), "rollouts/stable/rollout.json") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, w := range s.Waves {
			for _, id := range w.Installs {
				if seen[id] {
					t.Fatalf("install %s in two waves", id)
				}
				seen[id] = true
			}
		}
		b, err := rollout.EncodeState(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rollout.ParseState("rollouts/stable/rollout.json", "stable", b); err != nil {
			t.Fatalf("re-encoded state refused: %v\n%s", err, b)
		}
	})
}

func TestParseStateBad(t *testing.T) {
	p, w := waveFleet(t, 30)
	base, _ := rollout.Decide(rollout.Input{Policy: p, Waves: w, Pins: v1, Source: src1, Now: t0})
	started, _ := rollout.Decide(rollout.Input{Policy: p, Waves: w, State: base, Pins: v2, Source: src1, Now: t0})
	for _, tc := range []struct {
		name, want string
		edit       func(s *schemas.RolloutState)
	}{
		{"other channel", `channel: is "beta" on the rollout ref of channel "stable"`, func(s *schemas.RolloutState) { s.Channel = "beta" }},
		{"install twice", "is in waves[0] too", func(s *schemas.RolloutState) {
			at := t0
			s.Waves[1].Opened, s.Waves[1].Installs = &at, s.Waves[0].Installs
		}},
		{"gap in opened waves", "opened after a wave that did not", func(s *schemas.RolloutState) {
			at := t0
			s.Waves[2].Opened = &at
		}},
		{"unknown phase", "phase", func(s *schemas.RolloutState) { s.Phase = "paused-forever" }},
		{"rollback while running", "only a rolled back rollout", func(s *schemas.RolloutState) {
			s.Rollback = map[string]map[string]string{"x": v1}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := rollout.EncodeState(started)
			s, _ := rollout.ParseState("f", "stable", b)
			tc.edit(s)
			b, _ = rollout.EncodeState(s)
			_, err := rollout.ParseState("rollouts/stable/rollout.json", "stable", b)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "rollouts/stable/rollout.json") {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

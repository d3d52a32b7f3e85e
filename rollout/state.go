package rollout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"nuon.dev/nuon/schemas"
)

// ParseState reads rollout.json from a rollout commit of channel's ref
// (file names it in errors): it checks the file against its schema and
// what the schema cannot say — the opened waves come first, each install
// is in one wave at most and its list is sorted, and the phase agrees with
// the waves. A state that fails any check moves nothing: the renderer and
// the controller refuse it.
func ParseState(file, channel string, data []byte) (*schemas.RolloutState, error) {
	if err := schemas.ValidateJSON(schemas.SchemaRolloutState, data); err != nil {
		if ps, ok := err.(schemas.Problems); ok {
			for i := range ps {
				ps[i].File = file
			}
			return nil, ps
		}
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var s schemas.RolloutState
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&s); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	bad := func(field, format string, args ...any) error {
		return schemas.Problems{{File: file, Field: field, Message: fmt.Sprintf(format, args...)}}
	}
	if s.Channel != channel {
		return nil, bad("channel", "is %q on the rollout ref of channel %q", s.Channel, channel)
	}
	seen := map[string]int{}
	closed := false
	for i, w := range s.Waves {
		field := fmt.Sprintf("waves[%d]", i)
		if w.Opened == nil {
			if len(w.Installs) > 0 || w.Passed != nil {
				return nil, bad(field, "lists installs or a pass but never opened")
			}
			closed = true
			continue
		}
		if closed {
			return nil, bad(field, "opened after a wave that did not")
		}
		if w.Passed != nil && w.Passed.Before(*w.Opened) {
			return nil, bad(field+".passed", "is before the wave opened")
		}
		if !slices.IsSorted(w.Installs) {
			return nil, bad(field+".installs", "are not sorted")
		}
		for _, id := range w.Installs {
			if j, dup := seen[id]; dup {
				return nil, bad(field+".installs", "install %s is in waves[%d] too", id, j)
			}
			seen[id] = i
		}
	}
	opened := Opened(&s)
	switch s.Phase {
	case schemas.RolloutFinished:
		for i, w := range s.Waves {
			if w.Passed == nil && w.Size > 0 {
				return nil, bad(fmt.Sprintf("waves[%d]", i), "has not passed, but the rollout is finished")
			}
		}
	case schemas.RolloutRunning:
		if opened == 0 && len(s.Waves) > 0 {
			return nil, bad("waves", "a running rollout has an open wave")
		}
	}
	if len(s.Rollback) > 0 && s.Phase != schemas.RolloutRolledBack && s.Phase != schemas.RolloutAborted {
		return nil, bad("rollback", "only a rolled back rollout rolls installs back, not a %s one", s.Phase)
	}
	return &s, nil
}

// EncodeState writes s as rollout.json: indented JSON, keys sorted, ending
// in a newline; the same state gives the same bytes.
func EncodeState(s *schemas.RolloutState) ([]byte, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Opened returns the number of s's opened waves.
func Opened(s *schemas.RolloutState) int {
	n := 0
	for _, w := range s.Waves {
		if w.Opened != nil {
			n++
		}
	}
	return n
}

// Pins returns the pins install id of s's channel runs under s: nil when s
// leaves it the channel's pins on main. In order: a rolled back install
// has its Rollback pins; an install of an opened wave, or any install once
// the rollout finished, To; any other install its FromInstalls pins, or
// From. The pins cover the components s names; an install's own versions
// (installs/<id>.yaml) and components s does not name keep main's.
func Pins(s *schemas.RolloutState, id string) map[string]string {
	if s == nil {
		return nil
	}
	if p, ok := s.Rollback[id]; ok {
		return p
	}
	if s.Phase == schemas.RolloutFinished || InOpenWave(s, id) {
		return s.To
	}
	if p, ok := s.FromInstalls[id]; ok {
		return p
	}
	return s.From
}

// InOpenWave reports whether id is in an opened wave of s.
func InOpenWave(s *schemas.RolloutState, id string) bool {
	for _, w := range s.Waves {
		if w.Opened == nil {
			return false
		}
		if _, ok := slices.BinarySearch(w.Installs, id); ok {
			return true
		}
	}
	return false
}

// samePins reports whether a and b pin the same versions.
func samePins(a, b map[string]string) bool { return maps.Equal(a, b) }

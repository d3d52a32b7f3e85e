package renderer

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

// TrailerRollouts records, on a rendered commit, the rollout refs the
// render read (Options.Rollouts) as "channel=commit" words, sorted: the
// next render compares them with its own to know whether the installs of
// a channel need rendering again although main did not change.
const TrailerRollouts = "Nuon-Rollouts"

// loadRollouts reads the rollout state of each channel in
// Options.Rollouts, each commit verified as signed by a key of
// Options.Trust (the server's render key): a state that does not verify
// or parse fails the render, and nothing moves. A state applies only to a
// channel that declares a rollout on main; a channel without one renders
// as if no rollout ref existed.
//
// When the rollout refs differ from those the previous render read, an
// incremental render also renders the installs whose pins the decisions
// changed although their files did not (rolloutDelta).
func (r *renderRun) loadRollouts(context.Context) error {
	if len(r.opts.Rollouts) == 0 {
		return nil
	}
	r.rollouts = map[string]*schemas.RolloutState{}
	for _, ch := range slices.Sorted(maps.Keys(r.opts.Rollouts)) {
		tip := r.opts.Rollouts[ch]
		c, ok := r.src.Channels[ch]
		if tip.IsZero() || !ok || c.Rollout == nil {
			continue
		}
		s := r.read[ch]
		if s == nil {
			var err error
			if s, err = rollout.Read(r.st, ch, tip, r.opts.Trust); err != nil {
				return err
			}
		}
		r.rollouts[ch] = s
		r.rolloutWords = append(r.rolloutWords, ch+"="+tip.String())
	}
	if r.changed == nil || r.rolloutTrailer() == r.prevRollouts() {
		return nil
	}
	affected, finished, ok := r.rolloutDelta()
	if !ok {
		return r.openSource()
	}
	return r.openAlso(affected, finished)
}

// rolloutDelta returns the installs whose pins differ between the rollout
// states the previous render read and this render's. An install a state
// does not name (in an opened wave, rolled back, or with from-pins of its
// own) has the state's default pins: the to-pins once it finished, the
// from-pins before. When the default pins of a channel's two states are
// the same — a wave opened, a wave rolled back, a rollout started or
// superseded — only the installs either names can differ, and those whose
// pins do are returned. When they differ — a rollout finished — the
// installs the new state does not name differ too (those added to main
// while it ran, and those of other channels, which render as they were):
// that state is returned in finished, and openAlso takes them. A
// channel's first state is compared with the channel's pins, which every
// install had before it: a baseline of them moves none. ok is false when
// a state the previous render read cannot be read again, or a channel's
// state went: every install is rendered.
func (r *renderRun) rolloutDelta() (affected []string, finished []*schemas.RolloutState, ok bool) {
	prev := map[string]plumbing.Hash{}
	for _, w := range strings.Fields(r.prevRollouts()) {
		ch, tip, found := strings.Cut(w, "=")
		if !found || !plumbing.IsHash(tip) {
			return nil, nil, false
		}
		prev[ch] = plumbing.NewHash(tip)
	}
	channels := map[string]bool{}
	for ch := range prev {
		channels[ch] = true
	}
	for ch := range r.rollouts {
		channels[ch] = true
	}
	set := map[string]bool{}
	for ch := range channels {
		cur := r.rollouts[ch]
		tip, had := prev[ch]
		if cur != nil && had && r.opts.Rollouts[ch] == tip {
			continue
		}
		if cur == nil {
			return nil, nil, false
		}
		var old *schemas.RolloutState
		if had {
			var err error
			if old, err = rollout.Read(r.st, ch, tip, r.opts.Trust); err != nil {
				return nil, nil, false
			}
		} else {
			// The channel's first state: before it, every install had
			// the channel's pins, as after a finished rollout to them.
			pins := r.src.Channels[ch].Components
			old = &schemas.RolloutState{Phase: schemas.RolloutFinished, From: pins, To: pins}
		}
		if !maps.Equal(defaultPins(old), defaultPins(cur)) {
			finished = append(finished, cur)
		}
		for _, s := range []*schemas.RolloutState{old, cur} {
			for _, id := range named(s) {
				if !maps.Equal(rollout.Pins(old, id), rollout.Pins(cur, id)) {
					set[id] = true
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(set)), finished, true
}

// pinsCovered reports whether the channels whose pins alone changed on
// main since the previous render (r.pinsOnly) leave every install as it
// was rendered, so that an incremental render renders none for them.
// That holds for a channel when this render reads a rollout state for it
// (loadRollouts), the previous render read one too (its installs took
// their pins from it, and rolloutDelta compares the two states without
// the channel's pins), and every set of pins the state may give an
// install (rollout.Pins: from-pins, to-pins, an install's from-pins, a
// rollback's) pins each changed component: rolloutInstall then gives
// each install the state's version, finished rollouts included, and the
// channel's pin is never read. A change of the sandbox's pin is not
// covered: the load judges an install's sandbox against its channel's
// pin (schemas' checkInstallSandbox), and only a full render judges them
// all.
func (r *renderRun) pinsCovered() bool {
	if len(r.pinsOnly) == 0 {
		return true
	}
	prev := map[string]bool{}
	for _, w := range strings.Fields(r.prevRollouts()) {
		ch, _, _ := strings.Cut(w, "=")
		prev[ch] = true
	}
	r.read = map[string]*schemas.RolloutState{}
	for ch, comps := range r.pinsOnly {
		c, ok := r.src.Channels[ch]
		tip := r.opts.Rollouts[ch]
		if !ok || c.Rollout == nil || tip.IsZero() || !prev[ch] || comps[schemas.SandboxComponent] {
			return false
		}
		s, err := rollout.Read(r.st, ch, tip, r.opts.Trust)
		if err != nil {
			// A full render reads it again and says why.
			return false
		}
		r.read[ch] = s
		sets := []map[string]string{s.From, s.To}
		for _, p := range s.Rollback {
			sets = append(sets, p)
		}
		for _, p := range s.FromInstalls {
			sets = append(sets, p)
		}
		for _, p := range sets {
			for comp := range comps {
				if _, ok := p[comp]; !ok {
					return false
				}
			}
		}
	}
	return true
}

// defaultPins are the pins of an install s does not name.
func defaultPins(s *schemas.RolloutState) map[string]string {
	if s.Phase == schemas.RolloutFinished {
		return s.To
	}
	return s.From
}

// named are the installs s names: in its opened waves, rolled back, or
// with from-pins of their own.
func named(s *schemas.RolloutState) []string {
	var out []string
	for _, w := range s.Waves {
		out = append(out, w.Installs...)
	}
	for id := range s.Rollback {
		out = append(out, id)
	}
	for id := range s.FromInstalls {
		out = append(out, id)
	}
	return out
}

// openAlso adds installs to an incremental render: the source is opened
// again with their files beside those of the installs whose file changed.
// An id main has no file for is left out. So are added every install
// that one of the states unnamed does not name (rolloutDelta).
func (r *renderRun) openAlso(ids []string, unnamed []*schemas.RolloutState) error {
	if len(ids) == 0 && len(unnamed) == 0 {
		return nil
	}
	cur, err := commitTree(r.st, r.source)
	if err != nil {
		return err
	}
	dir := entryOf(cur, schemas.InstallsDir)
	if dir.hash.IsZero() {
		return nil
	}
	es, err := parseTree(r.st, dir.hash, maxSourceTree)
	if err != nil {
		return err
	}
	want := maps.Clone(r.changed)
	for _, id := range ids {
		want[id] = true
	}
	var names []map[string]bool
	for _, s := range unnamed {
		m := map[string]bool{}
		for _, id := range named(s) {
			m[id] = true
		}
		names = append(names, m)
	}
	var only []treeEntry
	for _, e := range es {
		id, ok := strings.CutSuffix(e.name, ".yaml")
		for _, m := range names {
			if ok && !m[id] {
				want[id] = true
			}
		}
		if ok && want[id] {
			only = append(only, e)
			r.changed[id] = true
		}
	}
	fsys, err := sourceFS(r.st, r.source, true, only)
	if err != nil {
		return err
	}
	fsys.cache = r.opts.Cache
	if err := r.open(fsys); err != nil {
		return err
	}
	r.ids = slices.Sorted(maps.Keys(r.changed))
	return nil
}

// rolloutTrailer is this render's TrailerRollouts value.
func (r *renderRun) rolloutTrailer() string { return strings.Join(r.rolloutWords, " ") }

// prevRollouts is the previous rendered commit's TrailerRollouts value.
func (r *renderRun) prevRollouts() string {
	if r.prevCommit == nil {
		return ""
	}
	v, _ := schemas.Trailer(r.prevCommit.Message, TrailerRollouts)
	return v
}

// rolloutInstall returns in with the pins its channel's rollout gives
// install id (rollout.Pins): versions the install's own file pins keep
// theirs.
func (r *renderRun) rolloutInstall(id string, in schemas.Install) schemas.Install {
	s := r.rollouts[in.Channel]
	if s == nil {
		return in
	}
	pins := rollout.Pins(s, id)
	if len(pins) == 0 {
		return in
	}
	versions := maps.Clone(in.Versions)
	if versions == nil {
		versions = map[string]string{}
	}
	for c, v := range pins {
		if c == schemas.SandboxComponent {
			if in.Sandbox.Version == "" {
				in.Sandbox.Version = v
			}
			continue
		}
		if _, own := versions[c]; !own {
			versions[c] = v
		}
	}
	in.Versions = versions
	return in
}

// RolloutRefs are the rollout refs of a repository's refs, by channel:
// what Options.Rollouts takes.
func RolloutRefs(refs map[string]plumbing.Hash) map[string]plumbing.Hash {
	out := map[string]plumbing.Hash{}
	for name, h := range refs {
		if ch, ok := strings.CutPrefix(name, schemas.RolloutRefPrefix); ok && ch != "" && !strings.Contains(ch, "/") {
			out[ch] = h
		}
	}
	return out
}

// rolloutNote is the line of an install commit's message that says which
// rollout decision gave the install its pins; empty for an install whose
// channel has no rollout state.
func (r *renderRun) rolloutNote(id string, in schemas.Install) string {
	s := r.rollouts[in.Channel]
	if s == nil {
		return ""
	}
	d := s.Decision
	what := "from-pins"
	switch {
	case s.Rollback[id] != nil:
		what = "rolled back"
	case s.Phase == schemas.RolloutFinished || rollout.InOpenWave(s, id):
		what = "new pins"
	}
	return fmt.Sprintf("Pins of rollout %d of channel %s (%s), after decision %s at %s: %s.\n",
		s.Rollout, s.Channel, s.Phase, d.Kind, d.At.UTC().Format(time.RFC3339), what)
}

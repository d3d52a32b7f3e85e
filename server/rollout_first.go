package server

import (
	"context"
	"io/fs"
	"maps"
	"path"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

// baselineFirstRollouts runs before main is rendered. A channel that
// declares a rollout on main but has no rollout ref yet gets its baseline
// now, from the pins the channel had on the main rendered before,
// when they differ from main's: the render then keeps every install on
// those pins, and the controller's next decision starts a rollout of
// main's pins from wave 1. Without it, a commit that adds a channel's
// first rollout policy and changes its pins would reach every install at
// once. A channel new on main, or a first render, baselines as before
// (the controller records main's pins).
//
// It takes no controller lock (the controller renders under its own), and
// writes the ref only if it still does not exist: if the controller wrote
// a baseline first, that one stands.
func (s *Server) baselineFirstRollouts(ctx context.Context, main plumbing.Hash) {
	// renderMu is held: the main this server rendered before is its own.
	prev := s.rollouts.syncMain
	s.rollouts.syncMain = main
	if s.cfg.RenderKey == nil || s.writer != nil || prev.IsZero() || main == prev {
		return
	}
	repo, err := gitrepo.Open(s.cfg.Dir)
	if err != nil {
		s.log.Error("first rollouts", "error", err)
		return
	}
	st := repo.Storer()
	mainFS, err := renderer.SourceFS(st, main)
	if err != nil {
		return
	}
	prevFS, err := renderer.SourceFS(st, prev)
	if err != nil {
		return
	}
	entries, err := fs.ReadDir(mainFS, schemas.ChannelsDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		file := path.Join(schemas.ChannelsDir, e.Name())
		data, err := fs.ReadFile(mainFS, file)
		if err != nil {
			continue
		}
		p, err := rollout.Parse(file, data)
		if err != nil || p == nil {
			continue // main's own load reports a bad policy
		}
		ref := plumbing.ReferenceName(schemas.RolloutRef(p.Channel))
		if tip, err := repo.Ref(ref); err != nil || !tip.IsZero() {
			continue
		}
		before, err := fs.ReadFile(prevFS, file)
		if err != nil {
			continue // a new channel: nothing had its pins before
		}
		pins, prevPins := channelPins(file, data), channelPins(file, before)
		if pins == nil || prevPins == nil || maps.Equal(pins, prevPins) {
			continue
		}
		base, err := rollout.Decide(rollout.Input{Policy: p, Pins: prevPins, Source: prev.String(), Now: s.cfg.Now()})
		if err != nil || base == nil {
			continue
		}
		base.Decision.Reason = "the channel's pins before its first rollout policy (main " + prev.String()[:12] + "): the change that came with the policy rolls out from wave 1"
		b := gitobj.NewBatch()
		who := object.Signature{Name: "nuon rollout controller", Email: "rollouts@nuon.invalid", When: base.Decision.At.UTC().Truncate(time.Second)}
		h, err := rollout.Commit(b, plumbing.ZeroHash, base, s.cfg.RenderKey, who)
		if err == nil {
			err = b.Flush(st)
		}
		if err == nil {
			err = repo.Apply(ctx, []gitrepo.Update{{Name: ref, Old: plumbing.ZeroHash, New: h}})
		}
		if err != nil {
			s.log.Warn("first rollout baseline not written", "channel", p.Channel, "error", err)
			continue
		}
		s.log.Info("rollout decision", "channel", p.Channel, "decision", base.Decision.Kind, "commit", h.String(), "reason", base.Decision.Reason)
		if s.mirror != nil {
			s.mirror.add(string(ref))
		}
		s.sideRefMoved()
	}
}

// channelPins are the components a channel file pins, nil when it does
// not decode.
func channelPins(file string, data []byte) map[string]string {
	var ch schemas.Channel
	if _, err := schemas.DecodeLocated(schemas.SchemaChannel, file, data, &ch); err != nil {
		return nil
	}
	return ch.Components
}

package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/schemas"
)

// Where an agent's heartbeat goes (Config.HeartbeatTo).
const (
	// HeartbeatRef, the default for a plain git host: when nothing else
	// changed for Config.Heartbeat, one parentless commit signed by the
	// install's key replaces the tip of its liveness ref
	// (schemas.LivenessRef). The ref keeps only its tip, so heartbeats add
	// no history: a replaced beat is unreachable and git's gc drops it.
	HeartbeatRef = "ref"
	// HeartbeatPolls, for a tenant server (nuon server): no heartbeat
	// commit at all. Every poll is a request signed by the install's key,
	// and the server records the last one as the install's liveness.
	HeartbeatPolls = "polls"
)

// heartbeat announces the agent's heartbeat interval in its status
// (HeartbeatEvery: the fleet shows an install Unreachable when it was not
// heard from for twice that) and decides whether a beat is due: nothing
// else changed, and neither a status commit nor a beat was made for
// Config.Heartbeat. A beat is never a status commit: through the server
// the agent's signed polls are its heartbeat and it makes none
// (HeartbeatPolls); on a git host it replaces the liveness ref's tip
// (HeartbeatRef, see liveness). An idle install's status history stays as
// it is, however long it runs.
func (p *pass) heartbeat() {
	if p.rec == nil {
		return
	}
	a := p.agent
	st := &p.rec.Status
	every := ""
	if a.cfg.Heartbeat > 0 {
		every = a.cfg.Heartbeat.String()
	}
	if st.HeartbeatEvery != every {
		st.HeartbeatEvery = every
		p.rec.dirty = true
	}
	if every == "" || p.rec.dirty || p.localHead.IsZero() || a.cfg.HeartbeatTo == HeartbeatPolls {
		return
	}
	c, err := gitobj.ReadCommit(a.store, p.localHead)
	if err != nil {
		return // the write step reports an unreadable status
	}
	last := c.Author.When
	if a.lastBeat.After(last) {
		last = a.lastBeat
	}
	if a.cfg.Now().Sub(last) < a.cfg.Heartbeat {
		return
	}
	p.beat = true
}

// liveness replaces the tip of the install's liveness ref with a new
// parentless commit, signed by the install's key, when a beat is due
// (heartbeat): an empty tree, the time, and the status commit it follows.
// A git host that refuses the push costs the install nothing but its
// liveness, so it is logged, not failed.
func (p *pass) liveness(ctx context.Context) {
	if !p.beat {
		return
	}
	a := p.agent
	now := a.cfg.Now().UTC().Truncate(time.Second)
	b := gitobj.NewBatch()
	tree := b.Tree(nil)
	who := object.Signature{Name: "nuon agent " + a.cfg.Install, Email: a.cfg.Install + "@agent.nuon.invalid", When: now}
	msg := fmt.Sprintf("nuon: heartbeat %s\n\nNothing changed since status %s.\n\n%s: %s\n",
		a.cfg.Install, p.localHead, schemas.TrailerInstall, a.cfg.Install)
	h, err := b.Commit(gitobj.Commit{Tree: tree, Author: who, Message: msg}, a.cfg.Key)
	if err == nil {
		err = b.Flush(a.store)
	}
	if err == nil {
		ref := plumbing.ReferenceName(schemas.LivenessRef(a.cfg.Install))
		err = a.cfg.Remote.Push(ctx, a.store, ref, p.livenessHead, h)
	}
	if err != nil {
		p.log.Warn("heartbeat not delivered", "install", a.cfg.Install, "error", err)
		return
	}
	a.lastBeat, p.beatCommit = now, h
	p.log.Info("heartbeat", "install", a.cfg.Install, "commit", short(h))
}

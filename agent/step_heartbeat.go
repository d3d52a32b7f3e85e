package agent

import (
	"time"

	"nuon.dev/nuon/internal/gitobj"
)

// heartbeat makes the record due for a commit when the last status commit
// is older than Config.Heartbeat and nothing else changed: a commit that
// carries only the time (Status.Heartbeat), signed like every other. The
// fleet reads the time of the newest status commit; one that is late by
// more than twice the interval the status announces (HeartbeatEvery) is
// shown as Unreachable. Polls that find nothing cost no commit until then.
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
	if every == "" || p.rec.dirty || p.localHead.IsZero() {
		return
	}
	c, err := gitobj.ReadCommit(a.store, p.localHead)
	if err != nil {
		return // the write step reports an unreadable status
	}
	now := a.cfg.Now()
	if now.Sub(c.Author.When) < a.cfg.Heartbeat {
		return
	}
	t := now.UTC().Truncate(time.Second)
	st.Heartbeat = &t
	p.note("Heartbeat: nothing changed since %s.", c.Author.When.UTC().Format(time.RFC3339))
}

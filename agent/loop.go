package agent

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/schemas"
)

// outcome is what a step tells the loop.
type outcome int

const (
	// proceed: run the next step.
	proceed outcome = iota
	// settled: nothing is due this pass (the desired ref did not move, or
	// the commit it points at was already refused).
	settled
	// refused: the desired commit is refused; the refusal is recorded and
	// the commit is not tried again until the ref moves.
	refused
	// stale: the desired commit is past its signed expiry; nothing is
	// applied until a fresh commit arrives.
	stale
	// applied: the plan ran; failing jobs retry on their own schedule.
	applied
	// deferred: the customer's policy holds the change back (a hold, no
	// open window); nothing is applied and the status says so.
	deferred
)

func (o outcome) String() string {
	switch o {
	case settled:
		return OutcomeIdle
	case refused:
		return OutcomeRefused
	case stale:
		return OutcomeStale
	case deferred:
		return OutcomeDeferred
	default:
		return OutcomeApplied
	}
}

// step is one step of a pass. It returns proceed to go on, another outcome
// to end the pass's work early, or an error, which ends it too; either way
// the pass then writes and pushes what its record says.
type step struct {
	name string
	run  func(context.Context) (outcome, error)
}

// pass is one run of the loop: what the steps learn and hand on.
type pass struct {
	agent *Agent
	log   *slog.Logger

	desiredHead plumbing.Hash // remote desired ref
	remoteHead  plumbing.Hash // remote status ref
	localHead   plumbing.Hash // local status ref
	// replace is a remote status commit this install did not write (see
	// status): the next status commit merges it as its second parent.
	replace plumbing.Hash
	rec     *record
	desired *Desired
	jobs    []*schemas.Job
	journal []string // journal entries to clear once a status commit records them
	wrote   bool
	pushed  bool
	// gate is what the customer's policy says this pass (customerGate).
	gate *customerGate
	// behind are the components whose dependencies wait for an approval
	// this pass: they wait too, deferred, not blocked.
	behind map[string]bool
	// livenessHead is the remote liveness ref (HeartbeatRef); beat says a
	// heartbeat is due, beatCommit is the one delivered.
	livenessHead plumbing.Hash
	beat         bool
	beatCommit   plumbing.Hash
}

// Reconcile runs one pass of the loop: poll, status, recover, sandbox,
// expiry, fetch, verify, customer, apply, then drift checks, health checks
// and requests, then write and push the status. A refused or
// expired desired commit is recorded in the status and is not an error; an
// error is something to retry (the remote, the disk), and Run backs off.
// The report and the error hold no secret.
func (a *Agent) Reconcile(ctx context.Context) (*Report, error) {
	rep, err := a.reconcile(ctx)
	return a.redactReport(rep), a.red.Error(err)
}

func (a *Agent) reconcile(ctx context.Context) (*Report, error) {
	p := &pass{agent: a, log: a.log}
	out, err := p.run(ctx, []step{
		{"poll", p.poll},
		{"status", p.status},
		{"recover", p.recover},
		{"sandbox", p.sandbox},
		{"expiry", p.expiry},
		{"fetch", p.fetch},
		{"verify", p.verify},
		{"customer", p.customer},
		{"apply", p.apply},
	})
	if err == nil {
		// Between renders the install is still operated: drift checks
		// run on their schedules, whatever the desired ref did.
		err = p.drift(ctx)
	}
	if err == nil {
		// And their health is checked again, so Ready stays true.
		err = p.health(ctx)
	}
	if err == nil {
		// Operators' requests that came with the desired state.
		p.answer(ctx)
	}
	// Whatever ended the pass, what it learned is committed locally: a
	// recovered job's outcome is not lost to a fetch that failed.
	if werr := p.write(ctx); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return p.report(out, err), err
	}
	// Push even when nothing else was due: a status written while the
	// remote was down is delivered once it is back.
	err = p.push(ctx)
	if err == nil {
		p.liveness(ctx)
	}
	return p.report(out, err), err
}

// run runs the steps in order until one returns an outcome other than
// proceed or an error.
func (p *pass) run(ctx context.Context, steps []step) (outcome, error) {
	for _, s := range steps {
		out, err := s.run(ctx)
		if err != nil {
			return out, err
		}
		if out != proceed {
			return out, nil
		}
	}
	return applied, nil
}

func (p *pass) report(out outcome, err error) *Report {
	rep := &Report{Outcome: out.String(), StatusCommit: p.localHead, Pushed: p.pushed, Jobs: p.jobs, Heartbeat: p.beatCommit}
	if err != nil {
		rep.Outcome = OutcomeFailed
	}
	rep.Idle = out == settled && !p.wrote && err == nil
	if p.rec != nil {
		rep.Status = p.rec.Status
	}
	return rep
}

// note adds a line to the message of the next status commit and marks the
// record changed.
func (p *pass) note(format string, args ...any) {
	p.rec.dirty = true
	p.rec.summary = append(p.rec.summary, fmt.Sprintf(format, args...))
}

package agent

import (
	"context"
	"errors"
	"fmt"

	"nuon.dev/nuon/agent/jobs"
)

// recover finishes what a crashed agent left: for each job journalled as
// started, wait for any process of it still running and record its result
// and manifest, as the pass that started it would have. It runs once per
// process.
func (p *pass) recover(ctx context.Context) (outcome, error) {
	a := p.agent
	if a.recovered {
		return proceed, nil
	}
	files, err := a.journalled()
	if err != nil {
		return proceed, fmt.Errorf("recover: %w", err)
	}
	for _, f := range files {
		entry, err := readJournal(f)
		if err != nil {
			p.log.Warn("dropping an unreadable journal entry", "file", f, "error", err)
			p.journal = append(p.journal, f)
			p.rec.dirty = true
			continue
		}
		log := p.log.With("job", entry.Job.ID, "component", entry.Job.Component)
		log.Info("recovering a job the agent was running when it stopped")
		res, err := a.cfg.Runner.Recover(ctx, a.jobDir(entry.Job.ID))
		switch {
		case errors.Is(err, jobs.ErrNotFinished):
			log.Info("the job did not finish; it will be planned again")
			p.rec.dirty = true
		case err != nil && ctx.Err() != nil:
			return proceed, err
		default:
			p.jobs = append(p.jobs, entry.Job)
			p.record(entry.Job, entry.Spec, entry.Action, res, err)
			log.Info("recorded the outcome of the recovered job", "error", errString(err, res))
		}
		p.journal = append(p.journal, f)
	}
	a.recovered = true
	return proceed, nil
}

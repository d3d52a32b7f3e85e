package agent

import (
	"context"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
)

// write commits the record locally when it changed, then clears the
// journal entries it records.
func (p *pass) write(context.Context) error {
	if p.rec == nil || !p.rec.dirty {
		return nil
	}
	a := p.agent
	summary := strings.Join(p.rec.summary, "\n")
	if summary == "" {
		summary = "No jobs ran."
	}
	p.rec.Jobs = p.jobs
	commit, err := a.commitRecord(p.rec, p.localHead, p.replace, summary)
	if err != nil {
		return err
	}
	p.wrote = commit != p.localHead
	p.localHead = commit
	p.replace = plumbing.ZeroHash // merged: nothing more to replace
	p.rec.dirty = false
	if err := clearJournal(p.journal); err != nil {
		return err
	}
	p.log.Info("status written", "commit", short(commit), "phase", p.rec.Status.Phase, "generation", p.rec.Status.Generation)
	if err := a.pruneJobDirs(keepJobDirs); err != nil {
		p.log.Warn("pruning old job directories", "error", err)
	}
	return nil
}

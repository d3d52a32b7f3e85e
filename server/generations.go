package server

import (
	"fmt"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/schemas"
)

// The rendered diff per generation is the fleet view's alone: it lives
// here, not in package fleet, so that nuon-agent (which reads fleet for
// `status`) links no renderer.

// generation is one rendered generation of an install's desired state and
// its difference from the one before.
type generation struct {
	Commit     string    `json:"commit"`
	Generation int64     `json:"generation"`
	Time       time.Time `json:"time"`
	Subject    string    `json:"subject"`
	// Diff is the unified diff of the rendered files from the parent
	// commit (everything added for the first generation).
	Diff string `json:"diff"`
}

// generations walks an install's desired ref from h along first parents
// and returns at most max generations (0: 10), newest first, each with
// its rendered diff.
func generations(st storer.EncodedObjectStorer, h plumbing.Hash, max int) ([]generation, error) {
	if max <= 0 {
		max = 10
	}
	var out []generation
	for !h.IsZero() && len(out) < max {
		c, files, err := gitobj.ReadCommitFiles(st, h, 0)
		if err != nil {
			return out, fmt.Errorf("generations: %w", err)
		}
		g := generation{Commit: h.String(), Time: c.Committer.When, Subject: strings.SplitN(strings.TrimSpace(c.Message), "\n", 2)[0]}
		g.Generation, _ = schemas.Generation(c.Message)
		var prev map[string][]byte
		next := plumbing.ZeroHash
		if len(c.ParentHashes) > 0 {
			next = c.ParentHashes[0]
			if _, pf, err := gitobj.ReadCommitFiles(st, next, 0); err == nil {
				prev = pf
			}
		}
		if g.Diff, err = renderer.UnifiedDiff("", prev, files); err != nil {
			return out, err
		}
		out = append(out, g)
		h = next
	}
	return out, nil
}

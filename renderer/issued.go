package renderer

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/schemas"
)

// issued is the last per-install commit the renderer signed for one
// install: schemas.IssuedDir/<id> in the rendered tree.
type issued struct {
	gen    int64
	commit plumbing.Hash
	// expires is the commit's freshness bound, when known; it is not
	// part of the record.
	expires time.Time
}

func (i issued) bytes() []byte {
	return fmt.Appendf(nil, "%d %s\n", i.gen, i.commit)
}

func parseIssued(data []byte) (issued, error) {
	g, h, ok := bytes.Cut(bytes.TrimSuffix(data, []byte("\n")), []byte(" "))
	gen, err := strconv.ParseInt(string(g), 10, 64)
	if !ok || err != nil || gen < 1 || len(h) != 40 || !plumbing.IsHash(string(h)) {
		return issued{}, fmt.Errorf("malformed issued record %q", data)
	}
	return issued{gen: gen, commit: plumbing.NewHash(string(h))}, nil
}

// maxWalk bounds how far back a ref's history is searched for a commit
// the renderer signed.
const maxWalk = 64

// ours reports whether the commit h is one the renderer signed for
// install id (id empty: a rendered commit), returning it.
func (r *renderRun) ours(h plumbing.Hash, id string) (*object.Commit, bool) {
	c, err := gitobj.ReadCommit(r.st, h)
	if err != nil {
		return nil, false
	}
	if _, err := r.opts.Trust.VerifyCommit(c); err != nil {
		return c, false
	}
	if id != "" {
		if got, _ := schemas.Trailer(c.Message, schemas.TrailerInstall); got != id {
			return c, false
		}
	}
	return c, true
}

// newestOurs walks the first parents from h to the newest commit the
// renderer signed for id, at most maxWalk back.
func (r *renderRun) newestOurs(h plumbing.Hash, id string) (*object.Commit, bool) {
	for range maxWalk {
		if h.IsZero() {
			return nil, false
		}
		c, ok := r.ours(h, id)
		if ok {
			return c, true
		}
		if c == nil || len(c.ParentHashes) == 0 {
			return nil, false
		}
		h = c.ParentHashes[0]
	}
	return nil, false
}

// lastIssued is the last commit the renderer signed for install id, from
// its own verified records only: the install ref when the previous render
// is trusted (its refs are as that render left them), otherwise the higher
// of the issued record of the newest rendered commit it signed and the
// newest commit it signed on the install ref's history. An unsigned or
// foreign commit's generation is never read.
func (r *renderRun) lastIssued(id string) (issued, error) {
	tip := r.ref(id)
	if r.trusted && !tip.IsZero() {
		c, err := gitobj.ReadCommit(r.st, tip)
		if err != nil {
			return issued{}, fmt.Errorf("read %s: %w", schemas.InstallRef(id), err)
		}
		gen, err := schemas.Generation(c.Message)
		if err != nil {
			return issued{}, fmt.Errorf("%s %s: %w", schemas.InstallRef(id), tip, err)
		}
		return issued{gen: gen, commit: tip}, nil
	}
	var last issued
	h, ok, err := r.prevIssued.get(id)
	if err != nil {
		return issued{}, err
	}
	if ok {
		data, err := gitobj.ReadBlob(r.st, h, 256)
		if err != nil {
			return issued{}, fmt.Errorf("read %s/%s: %w", schemas.IssuedDir, id, err)
		}
		if last, err = parseIssued(data); err != nil {
			return issued{}, fmt.Errorf("%s/%s: %w", schemas.IssuedDir, id, err)
		}
	}
	if c, ok := r.newestOurs(tip, id); ok {
		if gen, err := schemas.Generation(c.Message); err == nil && gen > last.gen {
			last = issued{gen: gen, commit: c.Hash}
		}
	}
	return last, nil
}

// errGenerationOverflow: an install has used up its generations.
var errGenerationOverflow = errors.New("generation would overflow")

func nextGeneration(last issued) (int64, error) {
	if last.gen == math.MaxInt64 {
		return 0, fmt.Errorf("%w: the last issued generation is %d", errGenerationOverflow, last.gen)
	}
	return last.gen + 1, nil
}

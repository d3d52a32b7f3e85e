package renderer

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/requests"
)

// loadRequests reads the requests filed on requests.Ref (Options.Requests)
// and keeps, per install of the source, the ones signed by a key that
// trust/requests on main lists and not past their deadline: each such
// install gets installs/<id>/requests.json and is rendered. A request that
// does not verify, or names no install of the source, is dropped and the
// render warns. Without trust/requests on main no request is accepted.
func (r *renderRun) loadRequests(context.Context) error {
	if r.opts.Requests.IsZero() {
		return nil
	}
	trust, err := r.requestTrust()
	if err != nil {
		return err
	}
	filed, err := requests.Read(r.st, r.opts.Requests, trust)
	if err != nil {
		return err
	}
	known := r.sourceInstalls()
	for _, f := range filed {
		if f.Err != nil && f.Request != nil && !f.Request.Expired(r.now) {
			r.result.Warnings = append(r.result.Warnings, fmt.Sprintf("request %s to %s (%s) dropped: %v", f.Request.ID, f.Request.Install, short(f.Commit), f.Err))
		} else if f.Err != nil && f.Request == nil {
			r.result.Warnings = append(r.result.Warnings, fmt.Sprintf("request commit %s dropped: %v", short(f.Commit), f.Err))
		}
	}
	r.requests = map[string][]byte{}
	reload := false
	for id, rs := range requests.Pending(filed, r.now) {
		if !known(id) {
			r.result.Warnings = append(r.result.Warnings, fmt.Sprintf("%d requests to %s dropped: no such install on main", len(rs), id))
			continue
		}
		if r.requests[id], err = requests.Encode(rs); err != nil {
			return err
		}
		if r.changed != nil && !r.changed[id] {
			// An install whose source did not change is rendered too; the
			// incremental load read only the changed installs' files.
			reload = true
		}
	}
	if reload {
		return r.openSource()
	}
	return nil
}

// requestTrust reads trust/requests from the source commit; nil when main
// has none.
func (r *renderRun) requestTrust() (*signature.AllowedSigners, error) {
	data, err := r.trustFile(requests.TrustFile, 1<<20, "no request is accepted")
	if data == nil || err != nil {
		return nil, err
	}
	trust, err := signature.ParseAllowedSigners(data)
	if err != nil {
		return nil, fmt.Errorf("%s on main: %w", requests.TrustFile, err)
	}
	return trust, nil
}

// trustFile reads a file of keys, path, from the source commit, at most
// max bytes; nil, and a warning that without it what (a kind of signed
// record) is refused, when main has none.
func (r *renderRun) trustFile(path string, max int64, what string) ([]byte, error) {
	c, err := gitobj.ReadCommit(r.st, r.source)
	if err != nil {
		return nil, err
	}
	tree, err := gitobj.ReadTree(r.st, c.TreeHash)
	if err != nil {
		return nil, err
	}
	e, err := tree.FindEntry(path)
	if errors.Is(err, object.ErrEntryNotFound) || errors.Is(err, object.ErrDirectoryNotFound) {
		r.result.Warnings = append(r.result.Warnings, "no "+path+" on main: "+what)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return gitobj.ReadBlob(r.st, e.Hash, max)
}

// sourceInstalls returns whether an install id is one of the source's:
// one of r.ids in a full render; in an incremental one, also an install
// of the previous render whose file is still there.
func (r *renderRun) sourceInstalls() func(id string) bool {
	if r.changed == nil {
		return func(id string) bool { _, ok := slices.BinarySearch(r.ids, id); return ok }
	}
	return func(id string) bool {
		if r.changed[id] {
			return true
		}
		_, ok, err := r.prevTrees.get(id)
		return err == nil && ok && !slices.Contains(r.removed, id)
	}
}

package renderer

import (
	"context"
	"fmt"
	"slices"

	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/trust"
	"nuon.dev/nuon/trust/maingit"
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

// trustFile reads the keys of the role whose legacy file on main is path
// (trust/requests, trust/approvals) through trust.MainKeys, the one reader
// of role keys: the root's role when main's root defines it, else the
// file, deprecated. It returns them in the file's form, at most max
// bytes; nil, and a warning that without them what (a kind of signed
// record) is refused, when main names none.
func (r *renderRun) trustFile(path string, max int64, what string) ([]byte, error) {
	role, ok := legacyRole(path)
	if !ok {
		return nil, fmt.Errorf("%s is not a key file of a trust role", path)
	}
	keys, err := maingit.Keys(r.st, r.source, role, r.now)
	if err != nil {
		return nil, err
	}
	r.result.Warnings = append(r.result.Warnings, keys.Warnings...)
	if keys.Deprecated != "" && keys.MainHasRoot {
		// A tenant without a root renders as before; one that has begun
		// the root is told what is left to move.
		r.result.Warnings = append(r.result.Warnings, keys.Deprecated)
	}
	if keys.Data == nil {
		r.result.Warnings = append(r.result.Warnings, "no "+path+" on main and no "+string(role)+" role in its trust root: "+what)
		return nil, nil
	}
	if int64(len(keys.Data)) > max {
		return nil, fmt.Errorf("%s: %d bytes, more than %d", keys.From, len(keys.Data), max)
	}
	return keys.Data, nil
}

// legacyRole is the role whose legacy key file is path.
func legacyRole(path string) (trust.Role, bool) {
	for role, file := range trust.LegacyFiles {
		if file == path {
			return role, true
		}
	}
	return "", false
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

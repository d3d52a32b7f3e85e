package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/schemas"
)

// refTable holds the tips of every install's desired and status ref, so a
// poll is answered without reading the repository. It is loaded once at
// start and updated by the server's own writes: renders and accepted
// pushes. Nothing else may move these refs while the server runs.
type refTable struct {
	mu   sync.RWMutex
	refs map[string]plumbing.Hash
	// version grows with every change: the fleet view rebuilds its
	// snapshot when it moved.
	version uint64
	// log names the refs set since version logBase, oldest first (at
	// most maxRefLog), so the fleet view takes in only what moved.
	log     []string
	logBase uint64
}

// maxRefLog bounds the change log: a reader further behind reads every
// ref again.
const maxRefLog = 1 << 14

// loadRefs reads the install and status refs of the repository at dir with
// one git for-each-ref.
func loadRefs(ctx context.Context, dir string) (*refTable, error) {
	refs, err := forEachRef(ctx, dir, func(string) bool { return true }, schemas.InstallRefPrefix, schemas.StatusRefPrefix)
	if err != nil {
		return nil, fmt.Errorf("list refs of %s: %w", dir, err)
	}
	return &refTable{refs: refs}, nil
}

// forEachRef lists the refs of the repository at dir that git
// for-each-ref matches with patterns, keeping the names keep accepts.
func forEachRef(ctx context.Context, dir string, keep func(name string) bool, patterns ...string) (map[string]plumbing.Hash, error) {
	out, err := gitOutput(ctx, dir, nil, append([]string{"for-each-ref", "--format=%(objectname) %(refname)"}, patterns...)...)
	if err != nil {
		return nil, err
	}
	return parseRefs(out, keep), nil
}

// get returns a ref's tip.
func (t *refTable) get(name string) (plumbing.Hash, bool) {
	t.mu.RLock()
	h, ok := t.refs[name]
	t.mu.RUnlock()
	return h, ok
}

// set moves a ref in the table; the zero hash removes it.
func (t *refTable) set(name string, h plumbing.Hash) {
	t.mu.Lock()
	if h.IsZero() {
		delete(t.refs, name)
	} else {
		t.refs[name] = h
	}
	t.version++
	t.log = append(t.log, name)
	if len(t.log) > maxRefLog {
		drop := len(t.log) / 2
		t.log = append(t.log[:0:0], t.log[drop:]...)
		t.logBase += uint64(drop)
	}
	t.mu.Unlock()
}

// changes returns the names of the refs set since version since, and the
// version now; ok is false when the log no longer reaches back that far
// (or a replica's refresh replaced the table): read every ref again.
func (t *refTable) changes(since uint64) (names []string, version uint64, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if since < t.logBase || since > t.version {
		return nil, t.version, false
	}
	return append([]string(nil), t.log[since-t.logBase:]...), t.version, true
}

// len is the number of refs.
func (t *refTable) len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.refs)
}

// ownRef is one of an install's refs and its tip.
type ownRef struct {
	name string
	hash plumbing.Hash
}

// own returns an install's refs that exist, desired first.
func (t *refTable) own(install string) []ownRef { return t.appendOwn(nil, install) }

// appendOwn appends an install's refs that exist to out, desired first.
func (t *refTable) appendOwn(out []ownRef, install string) []ownRef {
	desired, status := schemas.InstallRef(install), schemas.StatusRef(install)
	t.mu.RLock()
	for _, n := range [2]string{desired, status} {
		if h, ok := t.refs[n]; ok {
			out = append(out, ownRef{n, h})
		}
	}
	t.mu.RUnlock()
	return out
}

// readLooseRef reads a ref that git wrote as its own file, as receive-pack
// does for the ref it moves; ok is false when there is no such file.
func readLooseRef(dir, name string) (plumbing.Hash, bool) {
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
	if err != nil {
		return plumbing.ZeroHash, false
	}
	s := strings.TrimSpace(string(b))
	if len(s) != 40 {
		return plumbing.ZeroHash, false
	}
	return plumbing.NewHash(s), true
}

// snapshot returns a copy of every ref and the table's version.
func (t *refTable) snapshot() (map[string]plumbing.Hash, uint64) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make(map[string]plumbing.Hash, len(t.refs))
	for k, v := range t.refs {
		out[k] = v
	}
	return out, t.version
}

// stamp is the table's version.
func (t *refTable) stamp() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.version
}

// replace takes every ref of u, a freshly loaded table (a replica's
// refresh).
func (t *refTable) replace(u *refTable) {
	t.mu.Lock()
	t.refs = u.refs
	t.version++
	t.log, t.logBase = nil, t.version
	t.mu.Unlock()
}

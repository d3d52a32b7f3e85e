package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
)

// refTable holds the tips of every install's desired and status ref, so a
// poll is answered without reading the repository. It is loaded once at
// start and updated by the server's own writes: renders and accepted
// pushes. Nothing else may move these refs while the server runs.
//
// It is keyed by install, both tips in one entry, and keeps no ref name
// nor git's output line: a map of full ref names held 286 bytes an
// install (361 at 1,000,000) and allocated 800 bytes an install while
// loading; this holds 92 and allocates 190 (BenchmarkRefTableMillion).
type refTable struct {
	mu       sync.RWMutex
	installs map[string]installTips
	// other holds a ref outside the two prefixes, should one be set.
	other map[string]plumbing.Hash
	n     int // refs held
	// version grows with every change: the fleet view rebuilds its
	// snapshot when it moved.
	version uint64
	// log names the refs set since version logBase, oldest first (at
	// most maxRefLog), so the fleet view takes in only what moved.
	log     []string
	logBase uint64

	// listMu guards list, the install refs sorted by id as of version
	// listAt (listed: list is set), which installRefs patches from the
	// log.
	listMu sync.Mutex
	list   *renderer.RefList
	listAt uint64
	listed bool
}

// installTips is an install's desired and status tips; zero: no such ref.
type installTips struct{ desired, status plumbing.Hash }

func newRefTable() *refTable {
	return &refTable{installs: map[string]installTips{}, other: map[string]plumbing.Hash{}}
}

// splitRef names the install a desired or status ref is of; ok is false
// for any other name.
func splitRef(name string) (install string, status, ok bool) {
	if id, ok := strings.CutPrefix(name, schemas.InstallRefPrefix); ok && id != "" {
		return id, false, true
	}
	if id, ok := strings.CutPrefix(name, schemas.StatusRefPrefix); ok && id != "" {
		return id, true, true
	}
	return "", false, false
}

// maxRefLog bounds the change log: a reader further behind reads every
// ref again.
const maxRefLog = 1 << 14

// loadRefs reads the install and status refs of the repository at dir with
// one git for-each-ref, parsed as git writes it (the output of a million
// installs' refs is 150 MB, never held whole).
func loadRefs(ctx context.Context, dir string) (*refTable, error) {
	t := newRefTable()
	cmd := exec.CommandContext(ctx, "git", "for-each-ref", "--format=%(objectname) %(refname)", schemas.InstallRefPrefix, schemas.StatusRefPrefix)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("list refs of %s: %w", dir, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("list refs of %s: %w", dir, err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		t.putLine(sc.Bytes())
	}
	scanErr := sc.Err()
	if scanErr != nil {
		_, _ = io.Copy(io.Discard, out)
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("list refs of %s: git for-each-ref: %w: %s", dir, err, strings.TrimSpace(stderr.String()))
	}
	if scanErr != nil {
		return nil, fmt.Errorf("list refs of %s: %w", dir, scanErr)
	}
	return t, nil
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

// putLine adds a line of git for-each-ref, "<hash> <name>", keeping a
// copy of the install's id alone: a key cut from the line's string kept
// the whole line alive, 70 bytes more an install.
func (t *refTable) putLine(line []byte) {
	hb, name, _ := bytes.Cut(line, []byte{' '})
	var h plumbing.Hash
	if len(hb) != 2*len(h) {
		return
	}
	if _, err := hex.Decode(h[:], hb); err != nil || h.IsZero() {
		return
	}
	id, status := name, false
	if rest, ok := bytes.CutPrefix(name, []byte(schemas.InstallRefPrefix)); ok && len(rest) > 0 {
		id = rest
	} else if rest, ok := bytes.CutPrefix(name, []byte(schemas.StatusRefPrefix)); ok && len(rest) > 0 {
		id, status = rest, true
	} else {
		t.put(string(name), h)
		return
	}
	tips := t.installs[string(id)]
	old := &tips.desired
	if status {
		old = &tips.status
	}
	if old.IsZero() {
		t.n++
	}
	*old = h
	t.installs[string(id)] = tips // a new key is a copy of the id alone
}

// get returns a ref's tip.
func (t *refTable) get(name string) (plumbing.Hash, bool) {
	var h plumbing.Hash
	t.mu.RLock()
	if id, status, ok := splitRef(name); ok {
		tips := t.installs[id]
		h = tips.desired
		if status {
			h = tips.status
		}
	} else {
		h = t.other[name]
	}
	t.mu.RUnlock()
	return h, !h.IsZero()
}

// set moves a ref in the table; the zero hash removes it.
func (t *refTable) set(name string, h plumbing.Hash) {
	t.mu.Lock()
	t.put(name, h)
	t.version++
	t.log = append(t.log, name)
	if len(t.log) > maxRefLog {
		drop := len(t.log) / 2
		t.log = append(t.log[:0:0], t.log[drop:]...)
		t.logBase += uint64(drop)
	}
	t.mu.Unlock()
}

// put moves a ref; the caller holds t.mu or owns t alone.
func (t *refTable) put(name string, h plumbing.Hash) {
	var old plumbing.Hash
	if id, status, ok := splitRef(name); ok {
		tips := t.installs[id]
		if status {
			old, tips.status = tips.status, h
		} else {
			old, tips.desired = tips.desired, h
		}
		if tips == (installTips{}) {
			delete(t.installs, id)
		} else {
			t.installs[id] = tips
		}
	} else {
		old = t.other[name]
		if h.IsZero() {
			delete(t.other, name)
		} else {
			t.other[name] = h
		}
	}
	switch {
	case old.IsZero() && !h.IsZero():
		t.n++
	case !old.IsZero() && h.IsZero():
		t.n--
	}
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
	return t.n
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
	t.mu.RLock()
	tips := t.installs[install]
	t.mu.RUnlock()
	if !tips.desired.IsZero() {
		out = append(out, ownRef{schemas.InstallRef(install), tips.desired})
	}
	if !tips.status.IsZero() {
		out = append(out, ownRef{schemas.StatusRef(install), tips.status})
	}
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

// snapshot returns a copy of every install's tips and the table's
// version.
func (t *refTable) snapshot() (map[string]installTips, uint64) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return maps.Clone(t.installs), t.version
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
	t.installs, t.other, t.n = u.installs, u.other, u.n
	t.version++
	t.log, t.logBase = nil, t.version
	t.mu.Unlock()
}

// maxListPatch bounds the installs installRefs patches into the list it
// kept; more moved, it lists them all again.
const maxListPatch = 4096

// installRefs returns every install's desired ref: what a render starts
// from (publish.RefSource). The list is kept and, when few refs moved
// since, patched where they moved (renderer.RefList.With, which shares
// every chunk of the list but those of the refs moved): sorting a million
// ids took longer than a one-install render, and a copy of the list was
// 40 MB. A list returned is never changed after.
func (t *refTable) installRefs() *renderer.RefList {
	t.listMu.Lock()
	defer t.listMu.Unlock()
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.listed && t.listAt == t.version {
		return t.list
	}
	var moved []string
	ok := t.listed && t.listAt >= t.logBase && t.listAt <= t.version
	if ok {
		seen := map[string]bool{}
		for _, name := range t.log[t.listAt-t.logBase:] {
			id, status, mine := splitRef(name)
			if mine && !status && !seen[id] {
				seen[id] = true
				moved = append(moved, id)
			}
		}
		ok = len(moved) <= maxListPatch
	}
	switch {
	case ok && len(moved) == 0:
		// Status refs alone moved.
	case ok:
		slices.Sort(moved)
		refs := make([]renderer.InstallRef, len(moved))
		for i, id := range moved {
			// A zero tip takes the id out.
			refs[i] = renderer.InstallRef{ID: id, Commit: t.installs[id].desired}
		}
		t.list = t.list.With(refs)
	default:
		out := make([]renderer.InstallRef, 0, len(t.installs))
		for id, tips := range t.installs {
			if !tips.desired.IsZero() {
				out = append(out, renderer.InstallRef{ID: id, Commit: tips.desired})
			}
		}
		slices.SortFunc(out, func(a, b renderer.InstallRef) int { return strings.Compare(a.ID, b.ID) })
		// The ids are the table's keys.
		t.list = renderer.NewRefList(out)
	}
	t.listAt, t.listed = t.version, true
	return t.list
}

// adoptList takes list, the install refs a render left
// (renderer.Result.List), as the table's list when it is the list
// patching would give: the render was handed the table's list (handed,
// that very list), and the desired refs set since are those of ids, the
// installs whose ref the render moved, as list holds them. The next render
// is then handed its own list back, which it knows without a look at its
// entries, and nothing is patched. Otherwise it takes nothing, and
// installRefs patches as before; false then.
func (t *refTable) adoptList(handed, list *renderer.RefList, ids []string) bool {
	t.listMu.Lock()
	defer t.listMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if list == nil || !t.listed || handed != t.list || t.listAt < t.logBase || t.listAt > t.version {
		return false
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	set := map[string]bool{}
	for _, name := range t.log[t.listAt-t.logBase:] {
		if id, status, mine := splitRef(name); mine && !status {
			if !want[id] {
				return false
			}
			set[id] = true
		}
	}
	if len(set) != len(want) {
		return false
	}
	n := t.list.Len()
	for id := range set {
		_, had := t.list.Find(id)
		h, has := list.Find(id)
		if tip := t.installs[id].desired; has != !tip.IsZero() || has && h != tip {
			return false
		}
		switch {
		case has && !had:
			n++
		case had && !has:
			n--
		}
	}
	if n != list.Len() {
		return false
	}
	t.list, t.listAt = list, t.version
	return true
}

// renderRefs is where the server's render reads its refs
// (publish.RefSource): the install refs from the ref table, which the
// server alone moves, and the few others from git, which finds them in
// packed-refs by binary search where gitrepo reads the file whole. One
// renderRefs serves one render.
type renderRefs struct {
	refs *refTable
	dir  string
	// handed is the list of install refs handed to the render.
	handed *renderer.RefList
	// few are the refs of fewRefs, read for the render with one git
	// for-each-ref the first time one is asked for; nil until then.
	few map[string]plumbing.Hash
}

// fewRefs are the refs outside the table a render reads (publish.Render),
// by name or, ending in "/", by prefix: read together, where each was a
// git process of its own, some 2 ms each.
var fewRefs = []string{schemas.RenderedRef, requests.Ref, schemas.ApprovalsRef, schemas.RolloutRefPrefix}

// fewRef reports whether fewRefs covers the ref name, or every ref of
// the prefix given (a prefix ending in "/").
func fewRef(name string) bool {
	for _, f := range fewRefs {
		if name == f || strings.HasSuffix(f, "/") && strings.HasPrefix(name, f) {
			return true
		}
	}
	return false
}

// readFew reads the refs of fewRefs, once for the render.
func (r *renderRefs) readFew(ctx context.Context) (map[string]plumbing.Hash, error) {
	if r.few != nil {
		return r.few, nil
	}
	few, err := forEachRef(ctx, r.dir, fewRef, fewRefs...)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", strings.Join(fewRefs, ", "), err)
	}
	r.few = few
	return few, nil
}

// InstallRefs implements publish.RefSource.
func (r *renderRefs) InstallRefs(context.Context) (*renderer.RefList, error) {
	r.handed = r.refs.installRefs()
	return r.handed, nil
}

// Ref implements publish.RefSource.
func (r *renderRefs) Ref(ctx context.Context, name plumbing.ReferenceName) (plumbing.Hash, error) {
	if fewRef(name.String()) {
		few, err := r.readFew(ctx)
		return few[name.String()], err
	}
	refs, err := forEachRef(ctx, r.dir, func(n string) bool { return n == name.String() }, name.String())
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("read %s: %w", name, err)
	}
	return refs[name.String()], nil
}

// RefList implements publish.RefSource.
func (r *renderRefs) RefList(ctx context.Context, prefix string) ([]gitrepo.Ref, error) {
	var refs map[string]plumbing.Hash
	var err error
	if strings.HasSuffix(prefix, "/") && fewRef(prefix) {
		refs, err = r.readFew(ctx)
	} else {
		refs, err = forEachRef(ctx, r.dir, func(n string) bool { return strings.HasPrefix(n, prefix) }, prefix)
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	out := make([]gitrepo.Ref, 0, len(refs))
	for name, h := range refs {
		if strings.HasPrefix(name, prefix) {
			out = append(out, gitrepo.Ref{Name: name, Hash: h})
		}
	}
	slices.SortFunc(out, func(a, b gitrepo.Ref) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

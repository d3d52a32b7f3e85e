package server

import (
	"container/heap"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
)

// Bounds of one fetch request's arguments: an agent sends two wants and a
// few haves; a partial clone's lazy fetch wants a batch of blobs.
const (
	maxFetchWants = 10000
	maxFetchHaves = 10000
)

// fetchArgs are the arguments of a protocol v2 fetch request
// (gitprotocol-v2, "fetch").
type fetchArgs struct {
	wants    []plumbing.Hash
	wantRefs []string
	haves    []plumbing.Hash
	shallows []plumbing.Hash
	done     bool
	ofsDelta bool

	depth          int // deepen N; 0 none
	deepenRelative bool
	since          int64 // deepen-since; 0 none
	deepenNot      []string
	filter         objectFilter
}

// objectFilter is a fetch's filter: which blobs it leaves out.
type objectFilter struct {
	set       bool
	blobLimit int64 // blobs larger than this are left out; 0 with set: blob:none
}

// errFetch is a fetch the server answers with an error: the message is
// the client's to read and names nothing outside the install's closure.
type errFetch struct{ msg string }

func (e *errFetch) Error() string { return e.msg }

func fetchError(format string, args ...any) error {
	return &errFetch{fmt.Sprintf(format, args...)}
}

// errNotOurs is git's answer to a want it does not serve, given alike for
// an object that does not exist and one outside the closure.
func errNotOurs(h plumbing.Hash) error { return fetchError("upload-pack: not our ref %s", h) }

// parseFetchArgs reads a fetch request's argument lines. Anything the
// server does not advertise is refused.
func parseFetchArgs(lines []string) (fetchArgs, error) {
	var a fetchArgs
	hash := func(s string) (plumbing.Hash, error) {
		if !isHash(s) {
			return plumbing.ZeroHash, fetchError("upload-pack: protocol error, expected to get object ID, not '%s'", truncate(s))
		}
		return plumbing.NewHash(s), nil
	}
	for _, l := range lines {
		verb, arg, _ := strings.Cut(l, " ")
		var err error
		switch verb {
		case "want":
			if len(a.wants) == maxFetchWants {
				return a, fetchError("upload-pack: more than %d wants", maxFetchWants)
			}
			var h plumbing.Hash
			if h, err = hash(arg); err == nil {
				a.wants = append(a.wants, h)
			}
		case "want-ref":
			if len(a.wantRefs) == 2 {
				return a, fetchError("unknown ref %s", truncate(arg))
			}
			a.wantRefs = append(a.wantRefs, arg)
		case "have":
			if len(a.haves) == maxFetchHaves {
				return a, fetchError("upload-pack: more than %d haves", maxFetchHaves)
			}
			var h plumbing.Hash
			if h, err = hash(arg); err == nil {
				a.haves = append(a.haves, h)
			}
		case "shallow":
			if len(a.shallows) == maxFetchHaves {
				return a, fetchError("upload-pack: more than %d shallow lines", maxFetchHaves)
			}
			var h plumbing.Hash
			if h, err = hash(arg); err == nil {
				a.shallows = append(a.shallows, h)
			}
		case "deepen":
			n, perr := strconv.ParseInt(arg, 10, 32)
			if perr != nil || n <= 0 {
				return a, fetchError("upload-pack: invalid deepen: %s", truncate(arg))
			}
			a.depth = int(n)
		case "deepen-since":
			t, perr := strconv.ParseInt(arg, 10, 64)
			if perr != nil || t <= 0 {
				return a, fetchError("upload-pack: invalid deepen-since: %s", truncate(arg))
			}
			a.since = t
		case "deepen-not":
			if len(a.deepenNot) == 2 {
				return a, fetchError("upload-pack: ambiguous deepen-not: %s", truncate(arg))
			}
			a.deepenNot = append(a.deepenNot, arg)
		case "filter":
			if a.filter, err = parseFilter(arg); err != nil {
				return a, err
			}
		case "done", "deepen-relative", "ofs-delta", "thin-pack", "no-progress", "include-tag":
			if arg != "" {
				return a, fetchError("upload-pack: unexpected line: '%s'", truncate(l))
			}
			switch verb {
			case "done":
				a.done = true
			case "deepen-relative":
				a.deepenRelative = true
			case "ofs-delta":
				a.ofsDelta = true
			}
			// thin-pack: the server never sends a thin pack; no-progress:
			// it sends no progress; include-tag: no closure holds a tag.
		default:
			return a, fetchError("upload-pack: unexpected line: '%s'", truncate(l))
		}
		if err != nil {
			return a, err
		}
	}
	if a.depth > 0 && (a.since != 0 || len(a.deepenNot) > 0) {
		return a, fetchError("upload-pack: deepen and deepen-since (or deepen-not) cannot be used together")
	}
	if a.deepenRelative && a.depth == 0 {
		return a, fetchError("upload-pack: deepen-relative without deepen")
	}
	return a, nil
}

// parseFilter reads the filters served: blob:none and blob:limit=N.
func parseFilter(spec string) (objectFilter, error) {
	if spec == "blob:none" {
		return objectFilter{set: true}, nil
	}
	if v, ok := strings.CutPrefix(spec, "blob:limit="); ok {
		n, unit := v, int64(1)
		switch {
		case strings.HasSuffix(v, "k"):
			n, unit = v[:len(v)-1], 1<<10
		case strings.HasSuffix(v, "m"):
			n, unit = v[:len(v)-1], 1<<20
		case strings.HasSuffix(v, "g"):
			n, unit = v[:len(v)-1], 1<<30
		}
		x, err := strconv.ParseInt(n, 10, 64)
		if err == nil && x >= 0 && x <= 1<<40 {
			return objectFilter{set: true, blobLimit: x * unit}, nil
		}
	}
	return objectFilter{}, fetchError("upload-pack: filter '%s' is not served (blob:none and blob:limit=N are)", truncate(spec))
}

// fetchPlan is the whole answer to a fetch, computed from the install's
// closure before a byte is written.
type fetchPlan struct {
	// acknowledgments: written when the client sent haves without done.
	acknowledge bool
	acks        []plumbing.Hash
	ready       bool
	// pack: the rest is written only when the pack is sent.
	pack        bool
	shallowInfo bool
	shallow     []plumbing.Hash
	unshallow   []plumbing.Hash
	wantedRefs  []ownRef
	objects     []packEntry
}

// wantedObject is a tree or blob wanted by id, with the type the closure
// found it as.
type wantedObject struct {
	hash plumbing.Hash
	typ  plumbing.ObjectType
}

// packEntry is an object to pack and the path it was found at (a hint for
// git pack-objects' delta search).
type packEntry struct {
	hash plumbing.Hash
	name string
}

// planFetch answers a fetch from the closure of the install's refs own:
// the wants must be in it, only its commits are acknowledged, the
// client's shallow commits outside it are ignored as git ignores ones it
// does not have, deepen-not names only the install's refs, and every
// object packed is in it.
func planFetch(src objectSource, own []ownRef, a fetchArgs) (*fetchPlan, error) {
	cl, err := newClosure(src, ownTips(own))
	if err != nil {
		return nil, err
	}
	p := &fetchPlan{}
	wants := append([]plumbing.Hash(nil), a.wants...)
	for _, name := range a.wantRefs {
		r, ok := resolveOwn(own, name, false)
		if !ok {
			return nil, fetchError("unknown ref %s", truncate(name))
		}
		p.wantedRefs = append(p.wantedRefs, r)
		wants = append(wants, r.hash)
	}
	var wantCommits []plumbing.Hash
	var wantOthers []wantedObject
	for _, w := range dedupeHashes(wants) {
		t, ok, err := cl.has(w)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errNotOurs(w)
		}
		if t == plumbing.CommitObject {
			wantCommits = append(wantCommits, w)
		} else {
			wantOthers = append(wantOthers, wantedObject{w, t})
		}
	}
	if len(wants) == 0 {
		return p, nil
	}
	var shallows []plumbing.Hash
	for _, h := range dedupeHashes(a.shallows) {
		if ok, err := cl.hasCommit(h); err != nil {
			return nil, err
		} else if ok {
			shallows = append(shallows, h)
		}
	}
	var common []plumbing.Hash
	for _, h := range dedupeHashes(a.haves) {
		if ok, err := cl.hasCommit(h); err != nil {
			return nil, err
		} else if ok {
			common = append(common, h)
		}
	}
	if len(a.haves) > 0 && !a.done {
		p.acknowledge, p.acks = true, common
		if p.ready = readyToGiveUp(cl, wantCommits, common); !p.ready {
			return p, nil
		}
	}
	p.pack = true

	// Shallow boundaries (upload-pack.c's deepen and deepen_by_rev_list).
	graft := map[plumbing.Hash]bool{}
	clientShallow := map[plumbing.Hash]bool{}
	for _, h := range shallows {
		clientShallow[h] = true
	}
	var boundary, notShallow map[plumbing.Hash]bool
	switch {
	case a.depth > 0:
		heads, depth := wantCommits, a.depth
		if a.deepenRelative {
			heads, depth = shallows, a.depth+1
		}
		boundary, notShallow = shallowByDepth(cl, heads, depth)
	case a.since != 0 || len(a.deepenNot) > 0:
		var not []plumbing.Hash
		for _, name := range a.deepenNot {
			r, ok := resolveOwn(own, name, true)
			if !ok {
				return nil, fetchError("upload-pack: ambiguous deepen-not: %s", truncate(name))
			}
			not = append(not, r.hash)
		}
		boundary, notShallow = shallowByRevList(cl, wantCommits, a.since, not)
		if len(notShallow)+len(boundary) == 0 {
			return nil, fetchError("upload-pack: no commits selected for shallow requests")
		}
	}
	deepening := boundary != nil
	p.shallowInfo = deepening || len(shallows) > 0
	interesting := append([]plumbing.Hash(nil), wantCommits...)
	var edges []plumbing.Hash
	if deepening {
		for _, h := range sortedHashes(boundary) {
			graft[h] = true
			if !clientShallow[h] {
				p.shallow = append(p.shallow, h)
			}
		}
	}
	for _, h := range shallows {
		if deepening && notShallow[h] {
			// Its parents are sent as wanted; the walk from the haves
			// still stops at it, as the client's history does.
			p.unshallow = append(p.unshallow, h)
			interesting = append(interesting, cl.parents(h)...)
		}
		graft[h] = true
		edges = append(edges, h) // the client holds it and its tree
	}

	commits, uninterestingEdges := walkCommits(cl, interesting, common, graft)
	if cl.err != nil {
		return nil, cl.err
	}
	edges = append(edges, uninterestingEdges...)
	p.objects, err = selectObjects(cl, src, commits, wantOthers, edges, a.filter)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// resolveOwn finds name among the install's refs: exactly, or (dwim, as
// git resolves deepen-not) under refs/ or refs/heads/.
func resolveOwn(own []ownRef, name string, dwim bool) (ownRef, bool) {
	for _, o := range own {
		if o.name == name || dwim && (o.name == "refs/"+name || o.name == "refs/heads/"+name) {
			return o, true
		}
	}
	return ownRef{}, false
}

// readyToGiveUp is upload-pack's ok_to_give_up: every wanted commit has
// a common commit among its ancestors, so the pack can be cut there.
func readyToGiveUp(cl *closure, wants, common []plumbing.Hash) bool {
	if len(common) == 0 {
		return false
	}
	isCommon := map[plumbing.Hash]bool{}
	for _, h := range common {
		isCommon[h] = true
	}
	for _, w := range wants {
		found := false
		seen := map[plumbing.Hash]bool{}
		stack := []plumbing.Hash{w}
		for len(stack) > 0 && !found {
			h := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[h] {
				continue
			}
			seen[h] = true
			if isCommon[h] {
				found = true
				break
			}
			stack = append(stack, cl.parents(h)...)
		}
		if !found {
			return false
		}
	}
	return true
}

// shallowByDepth is git's get_shallow_commits: the commits depth commits
// down from heads (heads are at depth 1) are the boundary; the commits
// above it are not shallow.
func shallowByDepth(cl *closure, heads []plumbing.Hash, depth int) (boundary, notShallow map[plumbing.Hash]bool) {
	boundary, notShallow = map[plumbing.Hash]bool{}, map[plumbing.Hash]bool{}
	at := map[plumbing.Hash]int{}
	queue := []plumbing.Hash{}
	for _, h := range heads {
		if _, ok := at[h]; !ok {
			at[h] = 1
			queue = append(queue, h)
		}
	}
	// Breadth first: each commit is reached first at its least depth.
	for len(queue) > 0 {
		h := queue[0]
		queue = queue[1:]
		d := at[h]
		if d >= depth {
			boundary[h] = true
			continue
		}
		notShallow[h] = true
		for _, p := range cl.parents(h) {
			if _, ok := at[p]; !ok {
				at[p] = d + 1
				queue = append(queue, p)
			}
		}
	}
	for h := range boundary {
		delete(notShallow, h)
	}
	return boundary, notShallow
}

// shallowByRevList is git's get_shallow_commits_by_rev_list: the commits
// reachable from wants, committed at since or later, and not reachable
// from not; the boundary is those of them with a parent left out.
func shallowByRevList(cl *closure, wants []plumbing.Hash, since int64, not []plumbing.Hash) (boundary, notShallow map[plumbing.Hash]bool) {
	excluded := map[plumbing.Hash]bool{}
	stack := append([]plumbing.Hash(nil), not...)
	for len(stack) > 0 {
		h := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if excluded[h] {
			continue
		}
		excluded[h] = true
		stack = append(stack, cl.parents(h)...)
	}
	selected := map[plumbing.Hash]bool{}
	stack = append(stack[:0], wants...)
	for len(stack) > 0 {
		h := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		ci, ok := cl.commit(h)
		if !ok || selected[h] || excluded[h] || ci.time < since {
			continue
		}
		selected[h] = true
		stack = append(stack, cl.parents(h)...)
	}
	boundary = map[plumbing.Hash]bool{}
	for h := range selected {
		for _, p := range cl.parents(h) {
			if !selected[p] {
				boundary[h] = true
				break
			}
		}
	}
	for h := range boundary {
		delete(selected, h)
	}
	return boundary, selected
}

// walkCommits lists the commits reachable from interesting and not from
// common, going no further than the grafts (shallow commits), newest
// first as git's revision walk does: it stops once every commit left to
// look at is reachable from common. It also returns the edges: commits
// reachable from common whose children are sent, whose trees the client
// holds.
func walkCommits(cl *closure, interesting, common []plumbing.Hash, graft map[plumbing.Hash]bool) (send, edges []plumbing.Hash) {
	const queued, uninteresting = 1, 2
	flags := map[plumbing.Hash]uint8{}
	q := &commitQueue{cl: cl}
	var order []plumbing.Hash
	var mark func(h plumbing.Hash)
	// mark makes h and what it reaches (as far as walked) uninteresting.
	mark = func(h plumbing.Hash) {
		stack := []plumbing.Hash{h}
		for len(stack) > 0 {
			h := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			f := flags[h]
			if f&uninteresting != 0 {
				continue
			}
			flags[h] = f | uninteresting
			if f&queued == 0 {
				flags[h] |= queued
				heap.Push(q, h)
				continue
			}
			if !graft[h] {
				stack = append(stack, cl.parents(h)...)
			}
		}
	}
	add := func(h plumbing.Hash) {
		if _, ok := cl.commit(h); !ok || flags[h]&queued != 0 {
			return
		}
		flags[h] |= queued
		heap.Push(q, h)
	}
	for _, h := range common {
		if _, ok := cl.commit(h); ok {
			mark(h)
		}
	}
	for _, h := range interesting {
		add(h)
	}
	for q.Len() > 0 && !q.allUninteresting(flags, uninteresting) {
		h := heap.Pop(q).(plumbing.Hash)
		if flags[h]&uninteresting != 0 {
			if !graft[h] {
				for _, p := range cl.parents(h) {
					mark(p)
				}
			}
			continue
		}
		order = append(order, h)
		if !graft[h] {
			for _, p := range cl.parents(h) {
				add(p)
			}
		}
	}
	seenEdge := map[plumbing.Hash]bool{}
	for _, h := range order {
		if flags[h]&uninteresting != 0 {
			continue
		}
		send = append(send, h)
		if graft[h] {
			continue
		}
		for _, p := range cl.parents(h) {
			if flags[p]&uninteresting != 0 && !seenEdge[p] {
				seenEdge[p] = true
				edges = append(edges, p)
			}
		}
	}
	return send, edges
}

// commitQueue orders commits newest first, by committer time.
type commitQueue struct {
	cl *closure
	h  []plumbing.Hash
}

func (q *commitQueue) Len() int { return len(q.h) }
func (q *commitQueue) Less(i, j int) bool {
	a, _ := q.cl.commit(q.h[i])
	b, _ := q.cl.commit(q.h[j])
	return a.time > b.time
}
func (q *commitQueue) Swap(i, j int) { q.h[i], q.h[j] = q.h[j], q.h[i] }
func (q *commitQueue) Push(x any)    { q.h = append(q.h, x.(plumbing.Hash)) }
func (q *commitQueue) Pop() any {
	x := q.h[len(q.h)-1]
	q.h = q.h[:len(q.h)-1]
	return x
}

func (q *commitQueue) allUninteresting(flags map[plumbing.Hash]uint8, uninteresting uint8) bool {
	for _, h := range q.h {
		if flags[h]&uninteresting == 0 {
			return false
		}
	}
	return true
}

// selectObjects lists what the pack holds: the commits, then every tree
// and blob their trees name that the client does not hold through the
// edges' trees, less the blobs the filter leaves out; and the trees and
// blobs wanted by id (a partial clone's lazy fetch), always.
func selectObjects(cl *closure, src objectSource, commits []plumbing.Hash, wantOthers []wantedObject, edges []plumbing.Hash, f objectFilter) ([]packEntry, error) {
	held := map[plumbing.Hash]bool{}
	for _, e := range edges {
		ci, ok := cl.commit(e)
		if !ok {
			continue
		}
		if err := eachTreeObject(src, ci.tree, "", held, func(plumbing.Hash, string, plumbing.ObjectType) error { return nil }); err != nil {
			return nil, err
		}
	}
	var out []packEntry
	for _, c := range commits {
		out = append(out, packEntry{hash: c})
	}
	if len(out) > maxClosureObjects {
		return nil, errClosureTooLarge
	}
	keep := func(h plumbing.Hash, name string, t plumbing.ObjectType) error {
		if t == plumbing.BlobObject && f.set {
			if f.blobLimit == 0 {
				return nil
			}
			_, size, err := src.info(h)
			if err != nil {
				return err
			}
			if size > f.blobLimit {
				return nil
			}
		}
		if len(out) >= maxClosureObjects {
			return errClosureTooLarge
		}
		out = append(out, packEntry{hash: h, name: name})
		return nil
	}
	for _, c := range commits {
		ci, _ := cl.commit(c)
		if err := eachTreeObject(src, ci.tree, "", held, keep); err != nil {
			return nil, err
		}
	}
	// Objects asked for by id (a partial clone's lazy fetch) are sent
	// whole, even where an edge holds them: the client says it lacks them.
	sent := map[plumbing.Hash]bool{}
	for _, e := range out {
		sent[e.hash] = true
	}
	for _, w := range wantOthers {
		h := w.hash
		if sent[h] {
			continue
		}
		if w.typ != plumbing.TreeObject {
			sent[h] = true
			out = append(out, packEntry{hash: h})
			continue
		}
		if err := eachTreeObject(src, h, "", sent, func(h plumbing.Hash, name string, t plumbing.ObjectType) error {
			return keep(h, name, t)
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// eachTreeObject calls fn for the tree h and every object under it not in
// seen, marking each seen; name is the tree's path.
func eachTreeObject(src objectSource, h plumbing.Hash, name string, seen map[plumbing.Hash]bool, fn func(h plumbing.Hash, name string, t plumbing.ObjectType) error) error {
	if seen[h] {
		return nil
	}
	seen[h] = true
	if err := fn(h, name, plumbing.TreeObject); err != nil {
		return err
	}
	data, err := readTyped(src, h, plumbing.TreeObject)
	if err != nil {
		return err
	}
	return eachEntry(data, func(mode filemode.FileMode, n []byte, e plumbing.Hash) error {
		path := string(n)
		if name != "" {
			path = name + "/" + path
		}
		switch mode {
		case filemode.Submodule:
			return nil
		case filemode.Dir:
			return eachTreeObject(src, e, path, seen, fn)
		}
		if seen[e] {
			return nil
		}
		seen[e] = true
		return fn(e, path, plumbing.BlobObject)
	})
}

func dedupeHashes(hs []plumbing.Hash) []plumbing.Hash {
	seen := make(map[plumbing.Hash]bool, len(hs))
	out := hs[:0:0]
	for _, h := range hs {
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	return out
}

func sortedHashes(m map[plumbing.Hash]bool) []plumbing.Hash {
	out := make([]plumbing.Hash, 0, len(m))
	for h := range m {
		out = append(out, h)
	}
	plumbing.HashesSort(out)
	return out
}

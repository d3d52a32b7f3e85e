package renderer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"golang.org/x/crypto/ssh"
	"io"
	"io/fs"
	"maps"
	"nuon.dev/nuon/internal/signature"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/schemas"
)

// Signer signs a commit's encoding (see internal/signature).
type Signer interface {
	Sign(message io.Reader) ([]byte, error)
}

// Options configure a render. Signer and Now are required: the renderer
// reads no clock and holds no key of its own.
type Options struct {
	Signer Signer
	// Now stamps the commits.
	Now func() time.Time
	// Name and Email of the commits' author and committer; default
	// "nuon renderer" <renderer@nuon.invalid>.
	Name, Email string
	// Workers render installs in parallel; default GOMAXPROCS.
	Workers int
	// Diff asks for a line diff of every changed install's files.
	Diff bool
	// MaxListed bounds the installs named in the rendered commit's
	// message; default 100.
	MaxListed int
	// Trust holds the keys whose commits the renderer takes for its own:
	// the previous rendered commit and install commits are believed only
	// when one of them signed. Default: the Signer's public key, when it
	// has one (a key rotation lists the old key here too).
	Trust *signature.AllowedSigners
	// Requests is the tip of requests.Ref: the install's pending requests
	// signed by a key trust/requests on main lists go into its rendered
	// state (installs/<id>/requests.json). Zero: no requests.
	Requests plumbing.Hash
	// MaxFileSize bounds each source file, in bytes; default
	// schemas.DefaultMaxFileSize.
	MaxFileSize int64
}

func (o *Options) defaults() error {
	if o.Signer == nil {
		return errors.New("no signer")
	}
	if o.Now == nil {
		return errors.New("no clock")
	}
	if o.Name == "" {
		o.Name = "nuon renderer"
	}
	if o.Email == "" {
		o.Email = "renderer@nuon.invalid"
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.MaxListed <= 0 {
		o.MaxListed = 100
	}
	if o.Trust == nil {
		k, ok := o.Signer.(interface{ PublicKey() ssh.PublicKey })
		if !ok {
			return errors.New("no trusted render keys")
		}
		o.Trust = &signature.AllowedSigners{Signers: []signature.AllowedSigner{{Principals: []string{"nuon-render"}, Key: k.PublicKey()}}}
	}
	return nil
}

// Previous is what the repository holds now: the rendered ref and every
// install ref (zero hashes when absent).
type Previous struct {
	Rendered plumbing.Hash
	Installs map[string]plumbing.Hash
}

// Change says what happened to one install.
type Change string

// Changes of an install.
const (
	Added     Change = "added"
	Changed   Change = "changed"
	Unchanged Change = "unchanged"
	// Removed installs vanish from the rendered tree; their own ref is
	// left as it was.
	Removed Change = "removed"
	// Replaced installs' refs held a commit the renderer did not sign (or
	// not the last one it signed): a new signed commit, with a generation
	// above every one issued, replaces it.
	Replaced Change = "replaced"
	// Renewed installs got a new signed commit of the same tree, because
	// their freshness bound was near (schemas.Freshness).
	Renewed Change = "renewed"
	// Failed installs could not be rendered (their file has problems, or
	// their state could not be made); they keep their previous state and
	// ref, and the render reports them.
	Failed Change = "failed"
)

// InstallResult is the outcome for one install.
type InstallResult struct {
	ID     string `json:"install"`
	Change Change `json:"change"`
	// Generation of the install's state after the render.
	Generation int64  `json:"generation,omitempty"`
	Commit     string `json:"commit,omitempty"`
	Tree       string `json:"tree,omitempty"`
	// Diff is a unified diff of the install's files (Options.Diff).
	Diff string `json:"diff,omitempty"`
	// Error says why a Failed install was not rendered.
	Error string `json:"error,omitempty"`
	// Replaced is the commit a Replaced install's ref held, and why it
	// was not trusted.
	Replaced string `json:"replaced,omitempty"`
}

// Update is one ref update: from Old (zero: create) to New.
type Update struct {
	Name     plumbing.ReferenceName
	Old, New plumbing.Hash
}

// Result is a finished render: the objects to write and the refs to move.
type Result struct {
	Source plumbing.Hash
	// Rendered is the new rendered commit, zero when nothing changed.
	Rendered plumbing.Hash
	Installs []InstallResult
	// Updates are the ref updates, rendered ref last.
	Updates []Update
	// Objects holds every new object; write it before moving a ref.
	Objects *gitobj.Batch
	// Incremental is true when only the installs whose source changed
	// were rendered, the others keeping their previous state.
	Incremental bool
	// Problems are those of the Failed installs' files.
	Problems schemas.Problems
	// Warnings are things the render repaired, for the operator to know:
	// a rendered ref that held a commit the renderer did not sign.
	Warnings []string
}

// moved reports whether a change writes a new commit on the install's ref.
func (c Change) moved() bool { return c == Added || c == Changed || c == Replaced || c == Renewed }

// ChangedCount is the number of installs that get a new commit.
func (r *Result) ChangedCount() int {
	n := 0
	for _, in := range r.Installs {
		if in.Change.moved() {
			n++
		}
	}
	return n
}

// Failed returns the installs that could not be rendered.
func (r *Result) Failed() []InstallResult {
	var out []InstallResult
	for _, in := range r.Installs {
		if in.Change == Failed {
			out = append(out, in)
		}
	}
	return out
}

// Trailers the rendered commit carries beside those of schemas, so that
// the next render can trust it.
const (
	// TrailerInstallRefs is a digest of every install ref (id and commit)
	// as the render left them. The next render compares it with the refs
	// it finds: when they agree, each install ref holds the tree of its
	// folder in the rendered commit and need not be read; when they do not
	// (a render stopped between ref updates, or someone moved a ref), it
	// reads every install ref.
	TrailerInstallRefs = "Nuon-Install-Refs"
	// TrailerFormat is the Format the render was made with.
	TrailerFormat = "Nuon-Render-Format"
	// TrailerRenewAt is when the next install's freshness bound comes
	// within its renewal window: a render before then need not read every
	// install's commit to find the ones to re-sign.
	TrailerRenewAt = "Nuon-Renew-At"
)

// Format is the version of what the renderer writes for a given source.
// Bump it with any change that renders other files from the same source
// (including a change to the schemas types it encodes): a render re-renders
// only the installs whose source changed when the previous render has the
// same Format, and every install otherwise.
const Format = 2

// Render renders every install of the source commit on top of the previous
// state. It reads objects from st and writes none: the new objects are in
// the result. The same source and previous state give the same trees.
//
// When the previous render's install refs are as it left them and only
// install files changed on main since, it renders only those installs: the
// others' state is their folder in the previous rendered tree.
func Render(ctx context.Context, st storer.EncodedObjectStorer, source plumbing.Hash, prev Previous, opts Options) (*Result, error) {
	if err := opts.defaults(); err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	r := &renderRun{
		st: st, source: source, prev: prev, opts: opts, batch: gitobj.NewBatch(),
		now: opts.Now().UTC().Truncate(time.Second),
	}
	if prev.Installs == nil {
		r.prev.Installs = map[string]plumbing.Hash{}
	}
	for _, step := range []func(context.Context) error{
		r.readPrevious,
		r.loadSource,
		r.loadRequests,
		r.renderInstalls,
		r.writeRendered,
	} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	return r.result, nil
}

type renderRun struct {
	st     storer.EncodedObjectStorer
	source plumbing.Hash
	prev   Previous
	opts   Options
	batch  *gitobj.Batch
	// now stamps every commit of the render.
	now time.Time

	// prevCommit is the newest rendered commit the renderer signed on the
	// rendered ref, nil when there is none.
	prevCommit *object.Commit
	// prevTrees maps install id to its folder in prevCommit's tree, and
	// prevIssued to its issued record's blob.
	prevTrees, prevIssued map[string]plumbing.Hash
	// trusted is true when prevCommit is the rendered ref's tip and the
	// install refs are as that render left them, so that each holds its
	// folder of prevTrees and is the last commit issued for it.
	trusted bool
	// refIDs are the ids of prev.Installs, sorted.
	refIDs []string

	src *schemas.Source
	// ids are every install of the source; changed, when not nil, the
	// ones to render, the others keeping their previous state.
	ids     []string
	changed map[string]bool
	// bad are the installs whose files have problems.
	bad map[string]schemas.Problems

	// validFor and renewBefore are the source's freshness bound (zero:
	// off); renewAll asks every install's commit to be read for renewal;
	// renewAt is the earliest renewal time known (zero: none).
	validFor, renewBefore time.Duration
	renewAll              bool
	renewAt               time.Time
	// nextRenew is renewAt for the next render.
	nextRenew time.Time

	trees  map[string]plumbing.Hash
	issued map[string]issued
	result *Result
	// requests are the installs' requests.json, by install id.
	requests map[string][]byte
}

func (r *renderRun) readPrevious(context.Context) error {
	r.prevTrees, r.prevIssued = map[string]plumbing.Hash{}, map[string]plumbing.Hash{}
	r.refIDs = refIDs(r.prev.Installs)
	r.result = &Result{Source: r.source, Objects: r.batch}
	if r.prev.Rendered.IsZero() {
		return nil
	}
	c, ok := r.newestOurs(r.prev.Rendered, "")
	if !ok {
		r.result.Warnings = append(r.result.Warnings, fmt.Sprintf(
			"%s holds %s, and no commit the renderer signed is within %d first parents of it: rendering from the install refs' signed history",
			schemas.RenderedRef, short(r.prev.Rendered), maxWalk))
		return nil
	}
	if c.Hash != r.prev.Rendered {
		r.result.Warnings = append(r.result.Warnings, fmt.Sprintf(
			"%s holds %s, which the renderer did not sign: continuing from its own %s",
			schemas.RenderedRef, short(r.prev.Rendered), short(c.Hash)))
	}
	r.prevCommit = c
	digest, _ := schemas.Trailer(c.Message, TrailerInstallRefs)
	r.trusted = c.Hash == r.prev.Rendered &&
		digest == refsDigest(r.refIDs, func(id string) plumbing.Hash { return r.prev.Installs[id] })
	root, err := gitobj.ReadTree(r.st, c.TreeHash)
	if err != nil {
		return fmt.Errorf("read rendered tree: %w", err)
	}
	// Read as lists, each name once in git's order (the renderer wrote
	// them), into maps of their size: one map of 100,000 entries each.
	for dir, into := range map[string]*map[string]plumbing.Hash{schemas.InstallsDir: &r.prevTrees, schemas.IssuedDir: &r.prevIssued} {
		entries, err := subtreeList(r.st, root, dir)
		if err != nil {
			return fmt.Errorf("read rendered %s: %w", dir, err)
		}
		m := make(map[string]plumbing.Hash, len(entries))
		for _, e := range entries {
			m[e.name] = e.hash
		}
		*into = m
	}
	if at, ok := schemas.Trailer(c.Message, TrailerRenewAt); ok {
		r.renewAt, _ = time.Parse(time.RFC3339, at)
	}
	return nil
}

func (r *renderRun) loadSource(context.Context) error {
	ids, changed, ok := r.sourceDelta()
	var err error
	if ok {
		var fsys fs.FS
		if fsys, err = sourceFS(r.st, r.source, changed); err != nil {
			return err
		}
		r.src, err = schemas.Load(fsys, schemas.WithMaxFileSize(r.opts.MaxFileSize))
		slices.Sort(ids)
		r.ids, r.changed = ids, changed
	} else {
		r.src, err = LoadSource(r.st, r.source, schemas.WithMaxFileSize(r.opts.MaxFileSize))
	}
	if err := r.takeProblems(err); err != nil {
		return err
	}
	if f := r.src.App.Freshness; f != nil {
		r.validFor, r.renewBefore = f.Durations()
		// Renew when the earliest bound is due, or when none is recorded
		// (freshness was just turned on, or the previous render is not
		// trusted).
		r.renewAll = r.renewAt.IsZero() || !r.trusted || !r.now.Before(r.renewAt)
	}
	if r.renewAll && r.changed != nil {
		r.src, err = LoadSource(r.st, r.source, schemas.WithMaxFileSize(r.opts.MaxFileSize))
		if err := r.takeProblems(err); err != nil {
			return err
		}
		r.changed = nil
	}
	if r.changed == nil {
		r.ids = r.src.InstallIDs()
		for id := range r.bad {
			r.ids = append(r.ids, id)
		}
		slices.Sort(r.ids)
		r.ids = slices.Compact(r.ids)
	}
	return nil
}

// takeProblems keeps the installs whose own files have problems aside, so
// that they fail alone; any other problem fails the render.
func (r *renderRun) takeProblems(err error) error {
	if err == nil {
		return nil
	}
	var ps schemas.Problems
	if !errors.As(err, &ps) {
		return err
	}
	bad, rest := ps.Split()
	if len(rest) > 0 {
		return ps
	}
	r.bad = bad
	r.src = r.src.Without(bad)
	return nil
}

func (r *renderRun) renderInstalls(ctx context.Context) error {
	ids := r.ids
	if r.changed != nil {
		ids = make([]string, 0, len(r.changed))
		for _, id := range r.ids {
			if r.changed[id] {
				ids = append(ids, id)
			}
		}
	}
	type out struct {
		res    InstallResult
		tree   plumbing.Hash
		issued issued
	}
	outs := make([]out, len(ids))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(r.opts.Workers, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				o := &outs[i]
				var err error
				o.res, o.tree, o.issued, err = r.renderInstall(ids[i])
				if err != nil {
					o.res = InstallResult{ID: ids[i], Change: Failed, Error: err.Error()}
				}
			}
		}()
	}
feed:
	for i := range ids {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	r.trees = make(map[string]plumbing.Hash, len(r.ids))
	r.issued = make(map[string]issued, len(ids))
	if !r.renewAll {
		// Installs not read keep the earliest bound known before.
		r.nextRenew = r.renewAt
	}
	results := make([]InstallResult, 0, len(r.ids))
	for i, id := range ids {
		o := outs[i]
		results = append(results, o.res)
		if o.res.Change == Failed {
			// A failed install keeps its previous state, if it has one.
			if h, ok := r.prevTrees[id]; ok {
				r.trees[id] = h
			}
			continue
		}
		r.trees[id] = o.tree
		if !o.issued.commit.IsZero() {
			r.issued[id] = o.issued
		}
		if e := o.issued.expires; r.validFor > 0 && !e.IsZero() {
			if at := e.Add(-r.renewBefore); r.nextRenew.IsZero() || at.Before(r.nextRenew) {
				r.nextRenew = at
			}
		}
	}
	for _, id := range r.ids {
		if _, done := r.trees[id]; !done && !slices.Contains(ids, id) {
			r.trees[id] = r.prevTrees[id]
			results = append(results, InstallResult{ID: id, Change: Unchanged, Tree: r.prevTrees[id].String()})
		}
	}
	for id := range r.prevTrees {
		if _, ok := r.trees[id]; !ok && !slices.Contains(ids, id) {
			results = append(results, InstallResult{ID: id, Change: Removed})
		}
	}
	slices.SortFunc(results, func(a, b InstallResult) int { return strings.Compare(a.ID, b.ID) })
	r.result.Installs, r.result.Incremental = results, r.changed != nil
	for _, in := range results {
		if in.Change.moved() {
			r.result.Updates = append(r.result.Updates, Update{
				Name: plumbing.ReferenceName(schemas.InstallRef(in.ID)),
				Old:  r.prev.Installs[in.ID],
				New:  plumbing.NewHash(in.Commit),
			})
		}
	}
	for _, id := range slices.Sorted(maps.Keys(r.bad)) {
		r.result.Problems = append(r.result.Problems, r.bad[id]...)
	}
	return nil
}

// renderInstall renders one install into trees and, when its tree differs
// from what the renderer last issued for it, when its ref holds anything
// else than that, or when its freshness bound is near, a signed commit.
// Only then do its objects join the render's: an unchanged install's are
// in the repository already. It returns the install's issued record after
// the render.
func (r *renderRun) renderInstall(id string) (InstallResult, plumbing.Hash, issued, error) {
	if ps, bad := r.bad[id]; bad {
		return InstallResult{}, plumbing.ZeroHash, issued{}, fmt.Errorf("%s", ps.Error())
	}
	files, err := Install(r.src, id)
	if err != nil {
		return InstallResult{}, plumbing.ZeroHash, issued{}, err
	}
	if data, ok := r.requests[id]; ok {
		files[schemas.RequestsFile] = data
	}
	objs := gitobj.NewBatch()
	tree := writeFiles(objs, files)
	res := InstallResult{ID: id, Tree: tree.String()}
	tip := r.prev.Installs[id]
	if _, recorded := r.prevIssued[id]; recorded && r.trusted && !r.renewAll && r.prevTrees[id] == tree && !tip.IsZero() {
		res.Change = Unchanged
		return res, tree, issued{}, nil
	}
	last, err := r.lastIssued(id)
	if err != nil {
		return res, tree, issued{}, err
	}
	// from is the tree the install's agent has: the diff starts there.
	var from plumbing.Hash
	var replaced string
	switch {
	case tip != last.commit && !tip.IsZero():
		replaced = fmt.Sprintf("%s: not the last commit the renderer signed for this install (%s)", tip, orNone(last.commit))
	case tip != last.commit:
		replaced = fmt.Sprintf("the ref was deleted; the renderer last signed %s", last.commit)
	}
	renew := false
	if !last.commit.IsZero() {
		lc, err := gitobj.ReadCommit(r.st, last.commit)
		if err != nil && replaced == "" {
			return res, tree, issued{}, fmt.Errorf("read %s: %w", schemas.InstallRef(id), err)
		}
		if err == nil {
			from = lc.TreeHash
			renew = r.due(lc)
			if replaced == "" && lc.TreeHash == tree && !renew {
				res.Change, res.Commit, res.Generation = Unchanged, last.commit.String(), last.gen
				last.expires, _, _ = schemas.Expires(lc.Message)
				return res, tree, last, nil
			}
		}
	}
	gen, err := nextGeneration(last)
	if err != nil {
		return res, tree, issued{}, err
	}
	switch {
	case replaced != "":
		res.Change, res.Replaced = Replaced, replaced
	case last.commit.IsZero():
		res.Change = Added
	case from == tree:
		res.Change = Renewed
	default:
		res.Change = Changed
	}
	res.Generation = gen
	if r.opts.Diff {
		if res.Diff, err = r.diff(id, from, files); err != nil {
			return res, tree, issued{}, err
		}
	}
	var msg strings.Builder
	fmt.Fprintf(&msg, "nuon: render %s generation %d\n\nRendered from main at %s.\n", id, gen, short(r.source))
	if replaced != "" {
		fmt.Fprintf(&msg, "Replaces %s\n", replaced)
	}
	fmt.Fprintf(&msg, "\n%s: %s\n%s: %d\n%s: %s\n", schemas.TrailerInstall, id, schemas.TrailerGeneration, gen, schemas.TrailerSource, r.source)
	var expires time.Time
	if r.validFor > 0 {
		expires = r.now.Add(r.validFor)
		fmt.Fprintf(&msg, "%s: %s\n", schemas.TrailerExpires, expires.Format(time.RFC3339))
	}
	if replaced != "" && !tip.IsZero() {
		fmt.Fprintf(&msg, "%s: %s\n", schemas.TrailerReplaces, tip)
	}
	// The first parent continues the renderer's own history; a replaced
	// commit becomes the second, so the ref still moves forward (a host or
	// the tenant server may refuse anything else) and the commit stays in
	// the audit log.
	var parents []plumbing.Hash
	if !last.commit.IsZero() {
		if err := r.st.HasEncodedObject(last.commit); err == nil {
			parents = append(parents, last.commit)
		}
	}
	if !tip.IsZero() && tip != last.commit {
		parents = append(parents, tip)
	}
	commit, err := r.commit(objs, tree, parents, msg.String())
	if err != nil {
		return res, tree, issued{}, fmt.Errorf("render %s: %w", id, err)
	}
	// Merged, the install's objects are compressed by this worker and
	// only their compressed form is kept until the render is written.
	r.batch.Merge(objs)
	res.Commit = commit.String()
	return res, tree, issued{gen: gen, commit: commit, expires: expires}, nil
}

// due reports whether the install commit c must be re-signed for
// freshness: it has no bound, or its bound falls within the renewal
// window.
func (r *renderRun) due(c *object.Commit) bool {
	if r.validFor <= 0 {
		return false
	}
	expires, ok, err := schemas.Expires(c.Message)
	return !ok || err != nil || !r.now.Add(r.renewBefore).Before(expires)
}

func orNone(h plumbing.Hash) string {
	if h.IsZero() {
		return "none"
	}
	return h.String()
}

// writeFiles adds an install's blobs and trees to b and returns the
// install's tree.
func writeFiles(b *gitobj.Batch, files Files) plumbing.Hash {
	var top, comps []gitobj.Entry
	for name, data := range files {
		h := b.Add(plumbing.BlobObject, data)
		if rest, ok := strings.CutPrefix(name, schemas.ComponentsDir+"/"); ok {
			comps = append(comps, gitobj.Entry{Name: rest, Mode: filemode.Regular, Hash: h})
			continue
		}
		top = append(top, gitobj.Entry{Name: name, Mode: filemode.Regular, Hash: h})
	}
	if len(comps) > 0 {
		top = append(top, gitobj.Entry{Name: schemas.ComponentsDir, Mode: filemode.Dir, Hash: b.Tree(comps)})
	}
	return b.Tree(top)
}

func (r *renderRun) commit(b *gitobj.Batch, tree plumbing.Hash, parents []plumbing.Hash, msg string) (plumbing.Hash, error) {
	who := object.Signature{Name: r.opts.Name, Email: r.opts.Email, When: r.now}
	return b.Commit(gitobj.Commit{Tree: tree, Parents: parents, Author: who, Message: msg}, r.opts.Signer)
}

func (r *renderRun) writeRendered(context.Context) error {
	// In the order of r.ids, sorted, which is git's but for ids that
	// prefix others: sorting it again costs little.
	entries := make([]gitobj.Entry, 0, len(r.trees))
	for _, id := range r.ids {
		if h, ok := r.trees[id]; ok {
			entries = append(entries, gitobj.Entry{Name: id, Mode: filemode.Dir, Hash: h})
		}
	}
	if len(entries) != len(r.trees) {
		entries = entries[:0]
		for id, h := range r.trees {
			entries = append(entries, gitobj.Entry{Name: id, Mode: filemode.Dir, Hash: h})
		}
	}
	// The trees join the render's objects only with a new commit: when
	// nothing changed, the repository holds them already.
	trees := gitobj.NewBatch()
	var root []gitobj.Entry
	if len(entries) > 0 {
		root = append(root, gitobj.Entry{Name: schemas.InstallsDir, Mode: filemode.Dir, Hash: trees.Tree(entries)})
	}
	// Every install ever issued keeps its record, removed ones included,
	// so that one added again continues above its last generation.
	issuedEntries := make([]gitobj.Entry, 0, len(r.prevIssued)+len(r.issued))
	for id, h := range r.prevIssued {
		if _, renewed := r.issued[id]; !renewed {
			issuedEntries = append(issuedEntries, gitobj.Entry{Name: id, Mode: filemode.Regular, Hash: h})
		}
	}
	for id, in := range r.issued {
		issuedEntries = append(issuedEntries, gitobj.Entry{Name: id, Mode: filemode.Regular, Hash: trees.Add(plumbing.BlobObject, in.bytes())})
	}
	if len(issuedEntries) > 0 {
		root = append(root, gitobj.Entry{Name: schemas.IssuedDir, Mode: filemode.Dir, Hash: trees.Tree(issuedEntries)})
	}
	tree := trees.Tree(root)
	renewAt := ""
	if r.validFor > 0 && !r.nextRenew.IsZero() {
		renewAt = r.nextRenew.UTC().Format(time.RFC3339)
	}
	moved := make(map[string]plumbing.Hash, len(r.result.Updates))
	// Clipped, the first new id copies r.refIDs and the next ones append
	// to that copy: a cold render adds every install.
	ids := slices.Clip(r.refIDs)
	for _, u := range r.result.Updates {
		id := strings.TrimPrefix(u.Name.String(), schemas.InstallRefPrefix)
		moved[id] = u.New
		if r.prev.Installs[id].IsZero() {
			ids = append(ids, id)
		}
	}
	if len(ids) != len(r.refIDs) {
		slices.Sort(ids)
	}
	digest := refsDigest(ids, func(id string) plumbing.Hash {
		if h, ok := moved[id]; ok {
			return h
		}
		return r.prev.Installs[id]
	})
	if pc := r.prevCommit; pc != nil && pc.TreeHash == tree && len(r.result.Updates) == 0 {
		d, _ := schemas.Trailer(pc.Message, TrailerInstallRefs)
		f, _ := schemas.Trailer(pc.Message, TrailerFormat)
		at, _ := schemas.Trailer(pc.Message, TrailerRenewAt)
		if d == digest && f == strconv.Itoa(Format) && at == renewAt && pc.Hash == r.prev.Rendered {
			return nil
		}
	}
	var b strings.Builder
	changed := r.result.ChangedCount()
	fmt.Fprintf(&b, "nuon: render %d of %d installs from %s\n\n", changed, len(r.trees), short(r.source))
	fmt.Fprintf(&b, "%s: %s\n%s: %d\n", schemas.TrailerSource, r.source, schemas.TrailerChanged, changed)
	listed := 0
	for _, in := range r.result.Installs {
		if in.Change.moved() && listed < r.opts.MaxListed {
			fmt.Fprintf(&b, "%s: %s\n", schemas.TrailerInstall, in.ID)
			listed++
		}
	}
	fmt.Fprintf(&b, "%s: %s\n%s: %d\n", TrailerInstallRefs, digest, TrailerFormat, Format)
	if renewAt != "" {
		fmt.Fprintf(&b, "%s: %s\n", TrailerRenewAt, renewAt)
	}
	r.batch.Merge(trees)
	// The first parent continues the renderer's own history; a rendered
	// commit it did not sign becomes the second, as for install refs.
	var parents []plumbing.Hash
	if r.prevCommit != nil {
		parents = append(parents, r.prevCommit.Hash)
	}
	if !r.prev.Rendered.IsZero() && (r.prevCommit == nil || r.prevCommit.Hash != r.prev.Rendered) {
		parents = append(parents, r.prev.Rendered)
	}
	commit, err := r.commit(r.batch, tree, parents, b.String())
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	r.result.Rendered = commit
	r.result.Updates = append(r.result.Updates, Update{Name: plumbing.ReferenceName(schemas.RenderedRef), Old: r.prev.Rendered, New: commit})
	return nil
}

// refIDs returns the ids of the install refs that exist, sorted.
func refIDs(installs map[string]plumbing.Hash) []string {
	ids := make([]string, 0, len(installs))
	for id, h := range installs {
		if !h.IsZero() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// refsDigest is the value of TrailerInstallRefs for the install refs ids,
// sorted, each at commit(id): the SHA-256 of one "id commit" line each.
func refsDigest(ids []string, commit func(id string) plumbing.Hash) string {
	// Hashed as it goes, in a buffer of a few hundred lines: the lines of
	// 100,000 refs are 6 MB.
	d := sha256.New()
	buf := make([]byte, 0, 32<<10)
	for _, id := range ids {
		h := commit(id)
		buf = append(buf, id...)
		buf = append(buf, ' ')
		buf = hex.AppendEncode(buf, h[:])
		buf = append(buf, '\n')
		if len(buf) > cap(buf)-256 {
			d.Write(buf)
			buf = buf[:0]
		}
	}
	d.Write(buf)
	return "sha256:" + hex.EncodeToString(d.Sum(nil))
}

func short(h plumbing.Hash) string { return h.String()[:12] }

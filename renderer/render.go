package renderer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
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

// Refs the renderer writes.
const (
	RenderedRef      plumbing.ReferenceName = "refs/heads/nuon/rendered"
	InstallRefPrefix                        = "refs/heads/nuon/installs/"
	// InstallsDir is the folder of the rendered tree that holds one
	// folder per install.
	InstallsDir = "installs"
)

// InstallRef is the ref an install's agent pulls.
func InstallRef(id string) plumbing.ReferenceName {
	return plumbing.ReferenceName(InstallRefPrefix + id)
}

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
}

// ChangedCount is the number of installs added or changed.
func (r *Result) ChangedCount() int {
	n := 0
	for _, in := range r.Installs {
		if in.Change == Added || in.Change == Changed {
			n++
		}
	}
	return n
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
)

// Format is the version of what the renderer writes for a given source.
// Bump it with any change that renders other files from the same source
// (including a change to the schemas types it encodes): a render re-renders
// only the installs whose source changed when the previous render has the
// same Format, and every install otherwise.
const Format = 1

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
	for _, step := range []func(context.Context) error{
		r.readPrevious,
		r.loadSource,
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

	// prevCommit is the previous rendered commit, nil when there is none.
	prevCommit *object.Commit
	// prevTrees maps install id to its folder in the previous rendered tree.
	prevTrees map[string]plumbing.Hash
	// trusted is true when the install refs are as the previous render
	// left them, so that each holds its folder of prevTrees.
	trusted bool
	// refIDs are the ids of prev.Installs, sorted.
	refIDs []string

	src *schemas.Source
	// ids are every install of the source; changed, when not nil, the
	// ones to render, the others keeping their previous state.
	ids     []string
	changed map[string]bool

	trees  map[string]plumbing.Hash
	result *Result
}

func (r *renderRun) readPrevious(context.Context) error {
	r.prevTrees = map[string]plumbing.Hash{}
	r.refIDs = refIDs(r.prev.Installs)
	if r.prev.Rendered.IsZero() {
		return nil
	}
	c, err := object.GetCommit(r.st, r.prev.Rendered)
	if err != nil {
		return fmt.Errorf("read %s %s: %w", RenderedRef, r.prev.Rendered, err)
	}
	r.prevCommit = c
	digest, _ := schemas.Trailer(c.Message, TrailerInstallRefs)
	r.trusted = digest == refsDigest(r.refIDs, func(id string) plumbing.Hash { return r.prev.Installs[id] })
	root, err := object.GetTree(r.st, c.TreeHash)
	if err != nil {
		return fmt.Errorf("read rendered tree: %w", err)
	}
	installs, err := subtreeEntries(r.st, root, InstallsDir)
	if err != nil {
		return fmt.Errorf("read rendered installs: %w", err)
	}
	for id, e := range installs {
		r.prevTrees[id] = e.hash
	}
	return nil
}

func (r *renderRun) loadSource(context.Context) error {
	ids, changed, ok := r.sourceDelta()
	if !ok {
		src, err := LoadSource(r.st, r.source, schemas.WithMaxFileSize(r.opts.MaxFileSize))
		if err != nil {
			return err
		}
		r.src, r.ids = src, src.InstallIDs()
		return nil
	}
	fsys, err := sourceFS(r.st, r.source, changed)
	if err != nil {
		return err
	}
	if r.src, err = schemas.Load(fsys, schemas.WithMaxFileSize(r.opts.MaxFileSize)); err != nil {
		return err
	}
	slices.Sort(ids)
	r.ids, r.changed = ids, changed
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
	results := make([]InstallResult, len(ids))
	trees := make([]plumbing.Hash, len(ids))
	errs := make([]error, len(ids))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(r.opts.Workers, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i], trees[i], errs[i] = r.renderInstall(ids[i])
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
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.trees = make(map[string]plumbing.Hash, len(r.ids))
	for i, id := range ids {
		r.trees[id] = trees[i]
	}
	for _, id := range r.ids {
		if _, ok := r.trees[id]; !ok {
			r.trees[id] = r.prevTrees[id]
			results = append(results, InstallResult{ID: id, Change: Unchanged, Tree: r.prevTrees[id].String()})
		}
	}
	for id := range r.prevTrees {
		if _, ok := r.trees[id]; !ok {
			results = append(results, InstallResult{ID: id, Change: Removed})
		}
	}
	slices.SortFunc(results, func(a, b InstallResult) int { return strings.Compare(a.ID, b.ID) })
	r.result = &Result{Source: r.source, Installs: results, Objects: r.batch, Incremental: r.changed != nil}
	for _, in := range results {
		if in.Change == Added || in.Change == Changed {
			r.result.Updates = append(r.result.Updates, Update{
				Name: InstallRef(in.ID),
				Old:  r.prev.Installs[in.ID],
				New:  plumbing.NewHash(in.Commit),
			})
		}
	}
	return nil
}

// renderInstall renders one install into trees and, when its tree differs
// from what its ref holds, a signed commit. Only then do its objects join
// the render's: an unchanged install's are in the repository already.
func (r *renderRun) renderInstall(id string) (InstallResult, plumbing.Hash, error) {
	files, err := Install(r.src, id)
	if err != nil {
		return InstallResult{}, plumbing.ZeroHash, err
	}
	objs := gitobj.NewBatch()
	tree := writeFiles(objs, files)
	res := InstallResult{ID: id, Tree: tree.String()}
	prevCommit := r.prev.Installs[id]
	if r.trusted && r.prevTrees[id] == tree && !prevCommit.IsZero() {
		res.Change = Unchanged
		return res, tree, nil
	}
	var gen int64
	// from is the tree the install's agent has: the diff starts there.
	var from plumbing.Hash
	if !prevCommit.IsZero() {
		pc, err := object.GetCommit(r.st, prevCommit)
		if err != nil {
			return res, tree, fmt.Errorf("render %s: read %s: %w", id, InstallRef(id), err)
		}
		if pc.TreeHash == tree {
			// The ref already holds this tree (an earlier render moved it
			// but not the rendered ref): nothing new to sign.
			res.Change = Unchanged
			res.Commit = prevCommit.String()
			res.Generation, _ = Generation(pc)
			return res, tree, nil
		}
		if gen, err = Generation(pc); err != nil {
			return res, tree, fmt.Errorf("render %s: %s: %w", id, prevCommit, err)
		}
		from = pc.TreeHash
	}
	r.batch.Merge(objs)
	res.Change = Changed
	if prevCommit.IsZero() {
		res.Change = Added
	}
	res.Generation = gen + 1
	if r.opts.Diff {
		if res.Diff, err = r.diff(id, from, files); err != nil {
			return res, tree, err
		}
	}
	msg := fmt.Sprintf("nuon: render %s generation %d\n\nRendered from main at %s.\n\n%s: %s\n%s: %d\n%s: %s\n",
		id, res.Generation, short(r.source),
		schemas.TrailerInstall, id, schemas.TrailerGeneration, res.Generation, schemas.TrailerSource, r.source)
	var parents []plumbing.Hash
	if !prevCommit.IsZero() {
		parents = []plumbing.Hash{prevCommit}
	}
	commit, err := r.commit(tree, parents, msg)
	if err != nil {
		return res, tree, fmt.Errorf("render %s: %w", id, err)
	}
	res.Commit = commit.String()
	return res, tree, nil
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

func (r *renderRun) commit(tree plumbing.Hash, parents []plumbing.Hash, msg string) (plumbing.Hash, error) {
	who := object.Signature{Name: r.opts.Name, Email: r.opts.Email, When: r.now}
	c := &object.Commit{Author: who, Committer: who, Message: msg, TreeHash: tree, ParentHashes: parents}
	var unsigned plumbing.MemoryObject
	if err := c.EncodeWithoutSignature(&unsigned); err != nil {
		return plumbing.ZeroHash, err
	}
	rd, err := unsigned.Reader()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	sig, err := r.opts.Signer.Sign(rd)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("sign commit: %w", err)
	}
	c.PGPSignature = string(sig)
	var signed plumbing.MemoryObject
	if err := c.Encode(&signed); err != nil {
		return plumbing.ZeroHash, err
	}
	return r.batch.AddEncoded(&signed)
}

func (r *renderRun) writeRendered(context.Context) error {
	entries := make([]gitobj.Entry, 0, len(r.trees))
	for id, h := range r.trees {
		entries = append(entries, gitobj.Entry{Name: id, Mode: filemode.Dir, Hash: h})
	}
	// The trees join the render's objects only with a new commit: when
	// nothing changed, the repository holds them already.
	trees := gitobj.NewBatch()
	var root []gitobj.Entry
	if len(entries) > 0 {
		root = append(root, gitobj.Entry{Name: InstallsDir, Mode: filemode.Dir, Hash: trees.Tree(entries)})
	}
	tree := trees.Tree(root)
	moved := make(map[string]plumbing.Hash, len(r.result.Updates))
	ids := r.refIDs
	for _, u := range r.result.Updates {
		id := strings.TrimPrefix(u.Name.String(), InstallRefPrefix)
		moved[id] = u.New
		if r.prev.Installs[id].IsZero() {
			ids = append(slices.Clip(ids), id)
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
		if d == digest && f == strconv.Itoa(Format) {
			return nil
		}
	}
	var b strings.Builder
	changed := r.result.ChangedCount()
	fmt.Fprintf(&b, "nuon: render %d of %d installs from %s\n\n", changed, len(r.trees), short(r.source))
	fmt.Fprintf(&b, "%s: %s\n%s: %d\n", schemas.TrailerSource, r.source, schemas.TrailerChanged, changed)
	listed := 0
	for _, in := range r.result.Installs {
		if (in.Change == Added || in.Change == Changed) && listed < r.opts.MaxListed {
			fmt.Fprintf(&b, "%s: %s\n", schemas.TrailerInstall, in.ID)
			listed++
		}
	}
	fmt.Fprintf(&b, "%s: %s\n%s: %d\n", TrailerInstallRefs, digest, TrailerFormat, Format)
	r.batch.Merge(trees)
	var parents []plumbing.Hash
	if !r.prev.Rendered.IsZero() {
		parents = []plumbing.Hash{r.prev.Rendered}
	}
	commit, err := r.commit(tree, parents, b.String())
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	r.result.Rendered = commit
	r.result.Updates = append(r.result.Updates, Update{Name: RenderedRef, Old: r.prev.Rendered, New: commit})
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
	buf := make([]byte, 0, len(ids)*64)
	for _, id := range ids {
		h := commit(id)
		buf = append(buf, id...)
		buf = append(buf, ' ')
		buf = hex.AppendEncode(buf, h[:])
		buf = append(buf, '\n')
	}
	sum := sha256.Sum256(buf)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Generation reads the generation trailer of a per-install commit.
func Generation(c *object.Commit) (int64, error) {
	v, ok := schemas.Trailer(c.Message, schemas.TrailerGeneration)
	if !ok {
		return 0, fmt.Errorf("commit has no %s trailer", schemas.TrailerGeneration)
	}
	g, err := strconv.ParseInt(v, 10, 64)
	if err != nil || g < 1 {
		return 0, fmt.Errorf("bad %s trailer %q", schemas.TrailerGeneration, v)
	}
	return g, nil
}

func short(h plumbing.Hash) string { return h.String()[:12] }

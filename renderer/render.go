package renderer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing/fstest"
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

// Render renders every install of the source commit on top of the previous
// state. It reads objects from st and writes none: the new objects are in
// the result. The same source and previous state give the same trees.
func Render(ctx context.Context, st storer.EncodedObjectStorer, source plumbing.Hash, prev Previous, opts Options) (*Result, error) {
	if err := opts.defaults(); err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	src, err := LoadSource(st, source)
	if err != nil {
		return nil, err
	}
	r := &renderRun{st: st, src: src, source: source, prev: prev, opts: opts, batch: gitobj.NewBatch()}
	for _, step := range []func(context.Context) error{
		r.readPrevious,
		r.renderInstalls,
		r.writeRendered,
	} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	return r.result, nil
}

// LoadSource reads and validates the source files of a main commit.
func LoadSource(st storer.EncodedObjectStorer, commit plumbing.Hash) (*schemas.Source, error) {
	fsys, err := SourceFS(st, commit)
	if err != nil {
		return nil, err
	}
	return schemas.Load(fsys)
}

// SourceFS returns the source files of a commit as a file system.
func SourceFS(st storer.EncodedObjectStorer, commit plumbing.Hash) (fs.FS, error) {
	c, err := object.GetCommit(st, commit)
	if err != nil {
		return nil, fmt.Errorf("read source commit %s: %w", commit, err)
	}
	tree, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("read source tree %s: %w", commit, err)
	}
	fsys := fstest.MapFS{}
	for _, e := range tree.Entries {
		switch {
		case e.Name == schemas.AppFile && e.Mode.IsFile():
			if err := addBlob(fsys, st, e.Name, e.Hash); err != nil {
				return nil, err
			}
		case e.Mode == filemode.Dir && (e.Name == schemas.ChannelsDir || e.Name == schemas.ReleasesDir || e.Name == schemas.InstallsDir):
			sub, err := object.GetTree(st, e.Hash)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", e.Name, err)
			}
			fsys[e.Name] = &fstest.MapFile{Mode: fs.ModeDir | 0o755}
			for _, f := range sub.Entries {
				name := e.Name + "/" + f.Name
				if f.Mode == filemode.Dir {
					fsys[name] = &fstest.MapFile{Mode: fs.ModeDir | 0o755}
					continue
				}
				if err := addBlob(fsys, st, name, f.Hash); err != nil {
					return nil, err
				}
			}
		}
	}
	return fsys, nil
}

func addBlob(fsys fstest.MapFS, st storer.EncodedObjectStorer, name string, h plumbing.Hash) error {
	data, err := readBlob(st, h)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	fsys[name] = &fstest.MapFile{Data: data, Mode: 0o644}
	return nil
}

func readBlob(st storer.EncodedObjectStorer, h plumbing.Hash) ([]byte, error) {
	b, err := object.GetBlob(st, h)
	if err != nil {
		return nil, err
	}
	rd, err := b.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	return io.ReadAll(rd)
}

type renderRun struct {
	st     storer.EncodedObjectStorer
	src    *schemas.Source
	source plumbing.Hash
	prev   Previous
	opts   Options
	batch  *gitobj.Batch

	// prevTrees maps install id to its folder in the previous rendered tree.
	prevTrees map[string]plumbing.Hash
	trees     map[string]plumbing.Hash
	result    *Result
}

func (r *renderRun) readPrevious(context.Context) error {
	r.prevTrees = map[string]plumbing.Hash{}
	if r.prev.Rendered.IsZero() {
		return nil
	}
	c, err := object.GetCommit(r.st, r.prev.Rendered)
	if err != nil {
		return fmt.Errorf("read %s %s: %w", RenderedRef, r.prev.Rendered, err)
	}
	root, err := object.GetTree(r.st, c.TreeHash)
	if err != nil {
		return fmt.Errorf("read rendered tree: %w", err)
	}
	e, err := root.FindEntry(InstallsDir)
	if err != nil {
		return nil // an empty render
	}
	installs, err := object.GetTree(r.st, e.Hash)
	if err != nil {
		return fmt.Errorf("read rendered installs: %w", err)
	}
	for _, e := range installs.Entries {
		r.prevTrees[e.Name] = e.Hash
	}
	return nil
}

func (r *renderRun) renderInstalls(ctx context.Context) error {
	ids := r.src.InstallIDs()
	results := make([]InstallResult, len(ids))
	trees := make([]plumbing.Hash, len(ids))
	errs := make([]error, len(ids))
	next := make(chan int)
	var wg sync.WaitGroup
	for range r.opts.Workers {
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
	r.trees = make(map[string]plumbing.Hash, len(ids))
	for i, id := range ids {
		r.trees[id] = trees[i]
	}
	for id := range r.prevTrees {
		if _, ok := r.trees[id]; !ok {
			results = append(results, InstallResult{ID: id, Change: Removed})
		}
	}
	slices.SortFunc(results, func(a, b InstallResult) int { return strings.Compare(a.ID, b.ID) })
	r.result = &Result{Source: r.source, Installs: results, Objects: r.batch}
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
// from what its ref holds, a signed commit.
func (r *renderRun) renderInstall(id string) (InstallResult, plumbing.Hash, error) {
	files, err := Install(r.src, id)
	if err != nil {
		return InstallResult{}, plumbing.ZeroHash, err
	}
	tree := r.writeFiles(files)
	res := InstallResult{ID: id, Tree: tree.String()}
	prevCommit := r.prev.Installs[id]
	if r.prevTrees[id] == tree && !prevCommit.IsZero() {
		res.Change = Unchanged
		return res, tree, nil
	}
	var gen int64
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
	}
	res.Change = Changed
	if prevCommit.IsZero() {
		res.Change = Added
	}
	res.Generation = gen + 1
	if r.opts.Diff {
		if res.Diff, err = r.diff(id, r.prevTrees[id], files); err != nil {
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

// writeFiles adds an install's blobs and trees to the batch and returns
// the install's tree.
func (r *renderRun) writeFiles(files Files) plumbing.Hash {
	var top, comps []gitobj.Entry
	for name, data := range files {
		h := r.batch.Add(plumbing.BlobObject, data)
		if rest, ok := strings.CutPrefix(name, ComponentsDir+"/"); ok {
			comps = append(comps, gitobj.Entry{Name: rest, Mode: filemode.Regular, Hash: h})
			continue
		}
		top = append(top, gitobj.Entry{Name: name, Mode: filemode.Regular, Hash: h})
	}
	if len(comps) > 0 {
		top = append(top, gitobj.Entry{Name: ComponentsDir, Mode: filemode.Dir, Hash: r.batch.Tree(comps)})
	}
	return r.batch.Tree(top)
}

func (r *renderRun) commit(tree plumbing.Hash, parents []plumbing.Hash, msg string) (plumbing.Hash, error) {
	who := object.Signature{Name: r.opts.Name, Email: r.opts.Email, When: r.opts.Now().UTC().Truncate(time.Second)}
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
	var root []gitobj.Entry
	if len(entries) > 0 {
		root = append(root, gitobj.Entry{Name: InstallsDir, Mode: filemode.Dir, Hash: r.batch.Tree(entries)})
	}
	tree := r.batch.Tree(root)
	if !r.prev.Rendered.IsZero() {
		pc, err := object.GetCommit(r.st, r.prev.Rendered)
		if err != nil {
			return fmt.Errorf("read %s: %w", RenderedRef, err)
		}
		if pc.TreeHash == tree && len(r.result.Updates) == 0 {
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

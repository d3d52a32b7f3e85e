package publish

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/policy/plans"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
)

// Options of one render.
type Options struct {
	// Source is the ref or commit rendered; empty means schemas.MainRef.
	Source string
	// DryRun writes nothing and fills in each install's diff.
	DryRun bool
	// Now is the clock the renderer reads; nil means time.Now.
	Now func() time.Time
	// MaxFileSize caps each source file; zero means
	// schemas.DefaultMaxFileSize.
	MaxFileSize int64
	// Cache, when not nil, is kept by a process that renders again and
	// again (the tenant server): see renderer.Cache.
	Cache *renderer.Cache
	// Refs, when not nil, gives the refs the render reads in place of
	// repo's packed-refs: the tenant server keeps every install's tip in
	// memory, and packed-refs of a million installs is 150 MB read whole
	// at each read. The refs are only what the render starts from: the
	// update still moves each ref from the value it read only if it is
	// there (gitrepo.Repo.Apply), so a source that lags fails the render
	// with gitrepo.ErrStale and writes nothing over a newer ref.
	Refs RefSource
}

// RefSource is where a render reads its refs.
type RefSource interface {
	// InstallRefs returns every install ref: a list the render left
	// (renderer.Result.List), handed back, is known to the next render
	// without a look at its refs.
	InstallRefs(ctx context.Context) (*renderer.RefList, error)
	// Ref returns a ref's tip, zero when there is no such ref.
	Ref(ctx context.Context, name plumbing.ReferenceName) (plumbing.Hash, error)
	// RefList returns the refs whose name starts with prefix, sorted by
	// name.
	RefList(ctx context.Context, prefix string) ([]gitrepo.Ref, error)
}

// RepoRefs reads the refs from the repository itself (what Render does
// when Options.Refs is nil).
type RepoRefs struct{ Repo *gitrepo.Repo }

// InstallRefs implements RefSource.
func (g RepoRefs) InstallRefs(context.Context) (*renderer.RefList, error) {
	// A list sorted by id, as git keeps refs: 100,000 install refs in a
	// map, sorted again by the renderer, cost more than a one-install
	// render.
	refs, err := g.Repo.RefList(schemas.InstallRefPrefix)
	if err != nil {
		return nil, err
	}
	out := make([]renderer.InstallRef, len(refs))
	for i, ref := range refs {
		out[i] = renderer.InstallRef{ID: strings.TrimPrefix(ref.Name, schemas.InstallRefPrefix), Commit: ref.Hash}
	}
	return renderer.NewRefList(out), nil
}

// Ref implements RefSource.
func (g RepoRefs) Ref(_ context.Context, name plumbing.ReferenceName) (plumbing.Hash, error) {
	return g.Repo.Ref(name)
}

// RefList implements RefSource.
func (g RepoRefs) RefList(_ context.Context, prefix string) ([]gitrepo.Ref, error) {
	return g.Repo.RefList(prefix)
}

// Render renders opts.Source of repo with signer and, unless DryRun, writes
// the objects and moves every changed ref in one atomic update. It fails
// with schemas.Problems on invalid input and with gitrepo.ErrStale when
// another writer moved a ref first (render again).
func Render(ctx context.Context, repo *gitrepo.Repo, signer *signature.Signer, opts Options) (*renderer.Result, error) {
	if opts.Source == "" {
		opts.Source = schemas.MainRef
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := repo.Fetch(ctx, "refs/heads/"); err != nil {
		return nil, err
	}
	source, err := repo.Resolve(opts.Source)
	if err != nil {
		return nil, err
	}
	src := opts.Refs
	if src == nil {
		src = RepoRefs{repo}
	}
	var prev renderer.Previous
	if prev.Rendered, err = src.Ref(ctx, plumbing.ReferenceName(schemas.RenderedRef)); err != nil {
		return nil, err
	}
	if prev.List, err = src.InstallRefs(ctx); err != nil {
		return nil, err
	}
	// Operators' requests (refs/heads/nuon/requests) join the installs'
	// state; the ref is absent until the first request.
	reqs, err := src.Ref(ctx, plumbing.ReferenceName(requests.Ref))
	if err != nil {
		return nil, err
	}
	// Approvals of saved plans (schemas.ApprovalsRef) likewise.
	approvals, err := src.Ref(ctx, plumbing.ReferenceName(schemas.ApprovalsRef))
	if err != nil {
		return nil, err
	}
	// The channels' rollout refs (refs/heads/nuon/rollouts/<channel>):
	// an install of a channel with a rollout gets the pins its state
	// gives it.
	rolloutRefs, err := src.RefList(ctx, schemas.RolloutRefPrefix)
	if err != nil {
		return nil, err
	}
	rollouts := make(map[string]plumbing.Hash, len(rolloutRefs))
	for _, ref := range rolloutRefs {
		rollouts[strings.TrimPrefix(ref.Name, schemas.RolloutRefPrefix)] = ref.Hash
	}
	// The objects go to a pack file as the installs are rendered: at
	// 100,000 installs, kept in memory until the end they were most of
	// the render's peak.
	objs, err := gitobj.NewSpooledBatch(repo.Storer())
	if err != nil {
		return nil, err
	}
	defer objs.Close()
	res, err := renderer.Render(ctx, repo.Storer(), source, prev, renderer.Options{
		Objects:   objs,
		Requests:  reqs,
		Rollouts:  rollouts,
		Approvals: approvals,
		// Policies that do not compile fail the render at their line.
		CheckPolicies: checkPolicies,
		Signer:        signer,
		Now:           opts.Now,
		MaxFileSize:   opts.MaxFileSize,
		Cache:         opts.Cache,
		Diff:          opts.DryRun,
	})
	if err != nil || opts.DryRun {
		return res, err
	}
	if err := res.Objects.Flush(repo.Storer()); err != nil {
		return nil, fmt.Errorf("write objects: %w", err)
	}
	updates := make([]gitrepo.Update, len(res.Updates))
	for i, u := range res.Updates {
		updates[i] = gitrepo.Update{Name: u.Name, Old: u.Old, New: u.New}
	}
	if err := repo.Apply(ctx, updates); err != nil {
		return nil, err
	}
	return res, nil
}

// checked is the last set of policy files plans.Check passed, by path.
var checked struct {
	mu    sync.Mutex
	files map[string]string
}

// checkPolicies is plans.Check, which compiles the policies with OPA,
// done once for the same files in a process: the tenant server renders
// each change to main with the policies that were there before, and their
// compile was some 1.5 ms of a one-install change. Files that fail are
// compiled again each time, for their problems.
func checkPolicies(files map[string]string) error {
	checked.mu.Lock()
	same := checked.files != nil && maps.Equal(checked.files, files)
	checked.mu.Unlock()
	if same {
		return nil
	}
	if err := plans.Check(files); err != nil {
		return err
	}
	checked.mu.Lock()
	checked.files = maps.Clone(files)
	checked.mu.Unlock()
	return nil
}

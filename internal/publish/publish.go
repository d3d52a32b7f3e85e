package publish

import (
	"context"
	"fmt"
	"strings"
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
	var prev renderer.Previous
	if prev.Rendered, err = repo.Ref(plumbing.ReferenceName(schemas.RenderedRef)); err != nil {
		return nil, err
	}
	// A list sorted by id, as git keeps refs: 100,000 install refs in a
	// map, sorted again by the renderer, cost more than a one-install
	// render.
	refs, err := repo.RefList(schemas.InstallRefPrefix)
	if err != nil {
		return nil, err
	}
	prev.Refs = make([]renderer.InstallRef, len(refs))
	for i, ref := range refs {
		prev.Refs[i] = renderer.InstallRef{ID: strings.TrimPrefix(ref.Name, schemas.InstallRefPrefix), Commit: ref.Hash}
	}
	// Operators' requests (refs/heads/nuon/requests) join the installs'
	// state; the ref is absent until the first request.
	reqs, err := repo.Ref(plumbing.ReferenceName(requests.Ref))
	if err != nil {
		return nil, err
	}
	// Approvals of saved plans (schemas.ApprovalsRef) likewise.
	approvals, err := repo.Ref(plumbing.ReferenceName(schemas.ApprovalsRef))
	if err != nil {
		return nil, err
	}
	// The channels' rollout refs (refs/heads/nuon/rollouts/<channel>):
	// an install of a channel with a rollout gets the pins its state
	// gives it.
	rolloutRefs, err := repo.RefList(schemas.RolloutRefPrefix)
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
		CheckPolicies: plans.Check,
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

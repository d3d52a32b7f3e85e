package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"nuon.dev/nuon/fleet"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/schemas"
)

// Delete deletes install o.ID, phase by phase:
//
//  1. mark-deleted: installs/<id>.yaml gets deleted: true on main, which
//     renders the install with no component (o.Render renders it when no
//     tenant server does on push);
//  2. components: waits, up to o.DeleteTimeout, until the agent's signed
//     status is on that desired state and lists no component: the agent
//     deleted every one in reverse dependency order. Only a desired state
//     rendered deleted counts: with a tenant server rendering, the ref
//     holds the state before for a moment;
//  3. agent: stops the agent process;
//  4. sandbox: destroys the sandbox;
//  5. archive: removes installs/<id>.yaml from main and moves the
//     install's refs under refs/nuon/archive/<id>/, as a new generation
//     when the id was archived before (schemas.ArchiveGenRef).
//
// On CloudAWS phases 3 and 4 are instead (the agent runs in the cluster
// and goes with it):
//
//  3. deprovision-role: assumes the install's deprovision role
//     (stack.AssumeRole, its ExternalId, a deadline);
//  4. load-balancers: waits, up to o.AWS.LoadBalancerWait, until no load
//     balancer of either ELB API is tagged for the cluster or in the
//     sandbox's VPC, else fails with a *LoadBalancersLeftError naming each;
//  5. registry: deletes every ECR repository under the sandbox's
//     repository prefix, with force;
//  6. sandbox: terraform destroy of sandboxes/aws-eks with the role's
//     credentials, its state in the stack's bucket; then DestroyedFile,
//     so that a re-run skips these phases.
//
// Like Create, each phase checks first and a re-run continues.
func Delete(ctx context.Context, o Options, render func(context.Context) error) error {
	if err := o.defaults(false); err != nil {
		return err
	}
	if render == nil {
		render = func(context.Context) error { return nil }
	}
	phases := []phase{
		{"mark-deleted", func(ctx context.Context, o *Options, _ *state) (string, string, error) {
			return markDeleted(ctx, o, render)
		}},
		{"components", waitDeleted},
	}
	if o.Cloud == CloudAWS {
		// The agent runs in the cluster and goes with it.
		phases = append(phases,
			unlessDestroyed(phase{"deprovision-role", assumeDeprovision}),
			unlessDestroyed(phase{"load-balancers", waitLoadBalancers}),
			unlessDestroyed(phase{"registry", deleteRepositories}),
			unlessDestroyed(phase{"sandbox", awsDestroy}),
		)
	} else {
		phases = append(phases,
			phase{"agent", func(ctx context.Context, o *Options, _ *state) (string, string, error) {
				res, err := stopAgent(ctx, o, 30*time.Second)
				return res, "", err
			}},
			phase{"sandbox", func(ctx context.Context, o *Options, _ *state) (string, string, error) {
				res, err := destroySandbox(ctx, o)
				return res, "", err
			}},
		)
	}
	return runPhases(ctx, &o, append(phases, phase{"archive", archive}))
}

func (o *Options) openRepo() (*gitrepo.Repo, error) { return o.OpenRepo(o.Repo) }

// editMain applies edit to main's tree and commits the result, retrying
// when main moved; edit returns the new root or the old one for no change.
func editMain(ctx context.Context, o *Options, msg string, edit func(b *gitobj.Batch, root *object.Tree) (plumbing.Hash, error)) (bool, error) {
	repo, err := o.openRepo()
	if err != nil {
		return false, err
	}
	for attempt := 0; ; attempt++ {
		if err := repo.Fetch(ctx, "refs/heads/"); err != nil {
			return false, err
		}
		head, err := repo.Ref(MainRef)
		if err != nil || head.IsZero() {
			return false, fmt.Errorf("%s has no main branch (%v)", o.Repo, err)
		}
		c, err := repo.Git().CommitObject(head)
		if err != nil {
			return false, err
		}
		root, err := c.Tree()
		if err != nil {
			return false, err
		}
		b := gitobj.NewBatch()
		tree, err := edit(b, root)
		if err != nil {
			return false, err
		}
		if tree == root.Hash {
			return false, nil
		}
		who := object.Signature{Name: o.AuthorName, Email: o.AuthorEmail, When: o.Now()}
		h, err := b.Commit(gitobj.Commit{Tree: tree, Parents: []plumbing.Hash{head}, Author: who, Message: msg}, nil)
		if err != nil {
			return false, err
		}
		if err := b.Flush(repo.Storer()); err != nil {
			return false, err
		}
		err = repo.Apply(ctx, []gitrepo.Update{{Name: MainRef, Old: head, New: h}})
		if err == nil || attempt >= 5 || !isStale(err) {
			return err == nil, err
		}
	}
}

func isStale(err error) bool { return errors.Is(err, gitrepo.ErrStale) }

func installPath(id string) string { return path.Join(schemas.InstallsDir, id+".yaml") }

// markDeleted adds deleted: true to installs/<id>.yaml on main and renders.
func markDeleted(ctx context.Context, o *Options, render func(context.Context) error) (string, string, error) {
	file := installPath(o.ID)
	changed, err := editMain(ctx, o, o.ID+": delete the install\n\nWritten by nuon install delete: with deleted: true the install renders\nwith no component and its agent deletes every component it applied.\n",
		func(b *gitobj.Batch, root *object.Tree) (plumbing.Hash, error) {
			f, err := root.File(file)
			if err != nil {
				// Gone from main already: a re-run after the archive phase.
				return root.Hash, nil
			}
			s, err := f.Contents()
			if err != nil {
				return plumbing.ZeroHash, err
			}
			if strings.Contains("\n"+s, "\ndeleted: true\n") {
				return root.Hash, nil
			}
			if !strings.HasSuffix(s, "\n") {
				s += "\n"
			}
			return setFile(b, root, file, []byte(s+"deleted: true\n"))
		})
	if err != nil {
		return "", "", err
	}
	if err := render(ctx); err != nil {
		return "", "", fmt.Errorf("render: %w", err)
	}
	if changed {
		return Done, "installs/" + o.ID + ".yaml: deleted: true on main", nil
	}
	return Unchanged, "", nil
}

// waitDeleted waits until the agent reports, on the current desired
// state, no component left.
func waitDeleted(ctx context.Context, o *Options, _ *state) (string, string, error) {
	repo, err := o.openRepo()
	if err != nil {
		return "", "", err
	}
	deadline := time.Now().Add(o.DeleteTimeout)
	last := "no status yet"
	// checked is the desired state last read, and deleted what it says: a
	// commit does not change, so it is read again only once the ref moves.
	var checked plumbing.Hash
	var deleted bool
	for {
		if err := repo.Fetch(ctx, "refs/heads/"); err != nil {
			return "", "", err
		}
		desired, err := repo.Ref(plumbing.ReferenceName(schemas.InstallRef(o.ID)))
		if err != nil {
			return "", "", err
		}
		if desired.IsZero() {
			// Never rendered, or archived already: nothing was applied.
			return Unchanged, "no desired state", nil
		}
		// A status counts only on the desired state rendered deleted: until
		// a tenant server has rendered the marked main (and mirrored it
		// with the statuses it accepted), the ref still holds the state
		// before, and a status on it, or none yet, says nothing.
		if desired != checked {
			d, err := fleet.ReadDesired(repo.Storer(), desired)
			if err != nil {
				return "", "", err
			}
			checked, deleted = desired, d.Deleted
		}
		if !deleted {
			last = "desired state " + desired.String() + " is not rendered deleted yet (a tenant server renders the marked main; without one, pass --render)"
		} else {
			main, err := repo.Ref(MainRef)
			if err != nil {
				return "", "", err
			}
			keys, err := fleet.AgentKeys(repo.Storer(), main)
			if err != nil {
				return "", "", err
			}
			rows, err := fleet.Read(repo, keys, o.ID)
			if err != nil {
				return "", "", err
			}
			if len(rows) == 1 {
				r := rows[0]
				var names []string
				for _, c := range r.Components {
					names = append(names, c.Name+" "+c.Phase)
				}
				last = fmt.Sprintf("generation %d, phase %s, in sync %v, components [%s]", r.Generation, r.Phase, r.InSync, strings.Join(names, ", "))
				if r.Verified && r.InSync && len(r.Components) == 0 {
					return Done, "every component deleted (" + last + ")", nil
				}
			} else if !pidAliveAgent(o) {
				return Unchanged, "no status and no agent: nothing was applied", nil
			}
		}
		if time.Now().After(deadline) {
			return "", "", fmt.Errorf("the agent did not report every component deleted within %s: %s", o.DeleteTimeout, last)
		}
		select {
		case <-ctx.Done():
			return "", "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func pidAliveAgent(o *Options) bool { return agentPID(o) != 0 }

// archive removes installs/<id>.yaml from main and moves the install's
// refs under schemas.ArchiveRefPrefix<id>/ as a new generation of its archive
// (schemas.ArchiveGenRef; archiveGen): the copies and the deletions in one
// gitrepo.Apply, one atomic push on a remote repository. Earlier
// generations, of installs that had the id before, are left as they are.
func archive(ctx context.Context, o *Options, _ *state) (string, string, error) {
	file := installPath(o.ID)
	removed, err := editMain(ctx, o, o.ID+": remove the deleted install\n\nWritten by nuon install delete once its components and sandbox were gone;\nits refs are kept under "+schemas.ArchiveRefPrefix+o.ID+"/.\n",
		func(b *gitobj.Batch, root *object.Tree) (plumbing.Hash, error) {
			sub, err := root.Tree(schemas.InstallsDir)
			if err != nil {
				return root.Hash, nil
			}
			var es []gitobj.Entry
			found := false
			for _, e := range entries(sub) {
				if e.Name == path.Base(file) {
					found = true
					continue
				}
				es = append(es, e)
			}
			if !found {
				return root.Hash, nil
			}
			var top []gitobj.Entry
			for _, e := range entries(root) {
				if e.Name == schemas.InstallsDir {
					if len(es) == 0 {
						continue
					}
					e = gitobj.Entry{Name: e.Name, Mode: filemode.Dir, Hash: b.Tree(es)}
				}
				top = append(top, e)
			}
			return b.Tree(top), nil
		})
	if err != nil {
		return "", "", err
	}
	repo, err := o.openRepo()
	if err != nil {
		return "", "", err
	}
	archived := schemas.ArchiveRefPrefix + o.ID + "/"
	if err := repo.Fetch(ctx, schemas.InstallRef(o.ID), schemas.StatusRef(o.ID), archived); err != nil {
		return "", "", err
	}
	lives := map[string]plumbing.Hash{}
	for _, name := range []string{schemas.InstallRef(o.ID), schemas.StatusRef(o.ID)} {
		h, err := repo.Ref(plumbing.ReferenceName(name))
		if err != nil {
			return "", "", err
		}
		if !h.IsZero() {
			lives[name] = h
		}
	}
	gen, reuse, err := archiveGen(repo, o.ID, lives)
	if err != nil {
		return "", "", err
	}
	// One Apply: the copies and the deletions go together (one atomic
	// push on a remote), so the history is never without a ref, and a
	// generation exists only once the live refs are gone: a re-run finds
	// either both live refs (nothing happened) or none.
	var updates []gitrepo.Update
	var moved []string
	for _, name := range []string{schemas.InstallRef(o.ID), schemas.StatusRef(o.ID)} {
		h, ok := lives[name]
		if !ok {
			continue
		}
		to := plumbing.ReferenceName(schemas.ArchiveGenRef(o.ID, gen, name))
		if !reuse {
			// A new generation's ref: created, never moved.
			updates = append(updates, gitrepo.Update{Name: to, New: h})
		}
		updates = append(updates, gitrepo.Update{Name: plumbing.ReferenceName(name), Old: h})
		moved = append(moved, name+" -> "+to.String())
	}
	if err := repo.Apply(ctx, updates); err != nil {
		return "", "", err
	}
	if !removed && len(moved) == 0 {
		return Unchanged, "", nil
	}
	return Done, strings.Join(moved, ", "), nil
}

// archiveGen chooses the generation that archives install id's live refs
// (live ref → tip, only those that exist), from the archive's refs in
// repo. When the newest generation already holds every live ref (each is
// its ref there or an ancestor of it: a re-run of the same deletion whose
// deletions did not happen), it is that one, reuse is true and nothing is
// copied again. Otherwise the live refs are of an install that had the id
// since, and it is the next generation, 1 when there is none.
func archiveGen(repo *gitrepo.Repo, id string, lives map[string]plumbing.Hash) (gen int, reuse bool, err error) {
	refs, err := repo.Refs(schemas.ArchiveRefPrefix + id + "/")
	if err != nil {
		return 0, false, err
	}
	newest := 0
	tips := map[string]plumbing.Hash{}
	for name, h := range refs {
		rid, gen, live, ok := schemas.ParseArchiveRef(name.String())
		if !ok || rid != id || gen < newest {
			continue
		}
		if gen > newest {
			newest = gen
			clear(tips)
		}
		tips[live] = h
	}
	if newest == 0 || len(lives) == 0 {
		return max(newest, 1), false, nil
	}
	for live, h := range lives {
		in, err := contains(repo.Storer(), tips[live], h)
		if err != nil {
			return 0, false, err
		}
		if !in {
			return newest + 1, false, nil
		}
	}
	return newest, true, nil
}

// contains reports whether commit tip is h or has h among its ancestors.
func contains(st storer.EncodedObjectStorer, tip, h plumbing.Hash) (bool, error) {
	if tip.IsZero() {
		return false, nil
	}
	if tip == h {
		return true, nil
	}
	c, err := object.GetCommit(st, h)
	if err != nil {
		return false, fmt.Errorf("archive: %s: %w", h, err)
	}
	t, err := object.GetCommit(st, tip)
	if err != nil {
		return false, fmt.Errorf("archive: %s: %w", tip, err)
	}
	return c.IsAncestor(t)
}

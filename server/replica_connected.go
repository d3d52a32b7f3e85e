package server

import (
	"container/heap"
	"errors"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"

	"nuon.dev/nuon/internal/gitobj"
)

// replicaMaxWalk bounds the commits and trees replicaConnected reads
// and the blobs it looks up: a change of a few installs reads a few
// dozen. Past it the caller asks git to check, as git fetch does. A
// variable so that tests can take that way with a small change.
var replicaMaxWalk = 100_000

// replicaMaxTree bounds one tree read while checking: main's installs/
// of a million installs is 48 MB.
const replicaMaxTree = 1 << 30

// errReplicaWalk is a check that would read more than replicaMaxWalk
// objects.
var errReplicaWalk = errors.New("the change is too large to check by difference")

// replicaTip is a ref's new tip to check, and the tip the mirror holds
// for it (zero for none), whose tree the check compares with.
type replicaTip struct {
	tip, old plumbing.Hash
}

// replicaConnected checks that the mirror holds every object reachable
// from the tips, as git's connectivity check after a fetch does, but
// reading only where the new history differs from what the mirror's refs
// already reach: complete are commits the mirror's refs point to (main,
// the moved refs' old tips), whose every object the mirror holds because
// no ref moves without this check. Commits are walked newest first until
// every commit left is reachable from complete (git's revision walk);
// each new commit's tree is compared with its parent's, or with the old
// tip's tree, entry by entry, descending only into entries that differ,
// and every blob that differs is looked up. A one-install change on a
// million installs reads main's and the rendered tree's changed folders
// and a handful of objects, where git rev-list --objects --not --all
// reads the commit of every one of the mirror's refs and, for each old
// tip, every tree under it.
//
// It returns errReplicaWalk when the difference is larger than
// replicaMaxWalk objects, and an error naming the first object missing
// or not of the type its parent says.
func replicaConnected(src objectSource, tips []replicaTip, complete []plumbing.Hash) error {
	return replicaConnectedWithin(src, tips, complete, replicaMaxWalk)
}

// replicaConnectedWithin is replicaConnected reading at most limit
// objects.
func replicaConnectedWithin(src objectSource, tips []replicaTip, complete []plumbing.Hash, limit int) error {
	c := &replicaCheck{src: src, limit: limit, commits: map[plumbing.Hash]*replicaCommit{}, trees: map[plumbing.Hash]bool{}}
	q := &replicaQueue{c: c}
	var mark func(h plumbing.Hash) error
	// mark makes h and what it reaches, as far as read, uninteresting.
	mark = func(h plumbing.Hash) error {
		stack := []plumbing.Hash{h}
		for len(stack) > 0 {
			h := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			rc, err := c.commit(h)
			if err != nil {
				return err
			}
			if rc.uninteresting {
				continue
			}
			rc.uninteresting = true
			if !rc.queued {
				rc.queued = true
				heap.Push(q, h)
				continue
			}
			stack = append(stack, rc.parents...)
		}
		return nil
	}
	// The moved refs' old tips are the mirror's refs too (the caller's
	// update-ref checks each is still there before it moves it).
	for _, t := range tips {
		complete = append(complete, t.old)
	}
	for _, h := range complete {
		if h.IsZero() {
			continue
		}
		if err := mark(h); err != nil {
			return fmt.Errorf("a tip the mirror holds: %w", err)
		}
	}
	base := map[plumbing.Hash]plumbing.Hash{} // a new tip: its old tip
	for _, t := range tips {
		rc, err := c.commit(t.tip)
		if err != nil {
			return err
		}
		if !t.old.IsZero() {
			base[t.tip] = t.old
		}
		if !rc.queued {
			rc.queued = true
			heap.Push(q, t.tip)
		}
	}
	// The new commits, newest first.
	var order []plumbing.Hash
	for q.Len() > 0 && !q.allUninteresting() {
		h := heap.Pop(q).(plumbing.Hash)
		rc := c.commits[h]
		if rc.uninteresting {
			for _, p := range rc.parents {
				if err := mark(p); err != nil {
					return err
				}
			}
			continue
		}
		order = append(order, h)
		for _, p := range rc.parents {
			prc, err := c.commit(p)
			if err != nil {
				return fmt.Errorf("parent of %s: %w", h, err)
			}
			if !prc.queued {
				prc.queued = true
				heap.Push(q, p)
			}
		}
	}
	// What complete reaches is held: the trees of the commits the walk
	// found reachable from it.
	for _, rc := range c.commits {
		if rc.uninteresting {
			c.trees[rc.tree] = true
		}
	}
	// Oldest first, so that a commit's parent's tree is checked before
	// it is compared with.
	for i := len(order) - 1; i >= 0; i-- {
		h := order[i]
		rc := c.commits[h]
		if rc.uninteresting {
			continue // marked after it was taken: the mirror holds it
		}
		var against plumbing.Hash
		switch {
		case len(rc.parents) > 0:
			against = c.commits[rc.parents[0]].tree
		case !base[h].IsZero():
			against = c.commits[base[h]].tree
		}
		if err := c.tree(rc.tree, against); err != nil {
			return fmt.Errorf("commit %s: %w", h, err)
		}
	}
	return nil
}

// replicaCheck is one replicaConnected.
type replicaCheck struct {
	src     objectSource
	commits map[plumbing.Hash]*replicaCommit
	// trees are the trees whose every object is known held: checked, or
	// under a complete commit.
	trees map[plumbing.Hash]bool
	read  int // objects read or looked up, at most limit
	limit int
}

// replicaCommit is a commit read while checking.
type replicaCommit struct {
	tree          plumbing.Hash
	parents       []plumbing.Hash
	time          int64
	queued        bool
	uninteresting bool
}

// commit reads commit h once; a commit the mirror lacks is an error.
func (c *replicaCheck) commit(h plumbing.Hash) (*replicaCommit, error) {
	if rc, ok := c.commits[h]; ok {
		return rc, nil
	}
	if c.read++; c.read > c.limit {
		return nil, errReplicaWalk
	}
	ci, err := readCommitInfo(c.src, h)
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", h, err)
	}
	rc := &replicaCommit{tree: ci.tree, parents: ci.parents, time: ci.time}
	c.commits[h] = rc
	return rc, nil
}

// tree checks that tree h and everything under it are held, where they
// differ from against (a tree known held, or zero).
func (c *replicaCheck) tree(h, against plumbing.Hash) error {
	if c.trees[h] {
		return nil
	}
	if !c.trees[against] {
		// Only a tree known held is compared with: one under a commit
		// the walk reached from complete, or checked.
		against = plumbing.ZeroHash
	}
	if c.read++; c.read > c.limit {
		return errReplicaWalk
	}
	data, err := c.readTree(h)
	if err != nil {
		return err
	}
	var old []byte
	if !against.IsZero() {
		if old, err = c.readTree(against); err != nil {
			return err
		}
	}
	w := gitobj.NewTreeWalk(old, data, gitobj.RawEntry{}, gitobj.RawEntry{}, 0)
	for w.Next() {
		if w.Cur.IsZero() || w.Same() {
			continue
		}
		e := w.Cur.Hash()
		switch w.Cur.Mode {
		case filemode.Submodule:
			// Another repository's commit: git does not follow it.
		case filemode.Dir:
			var sub plumbing.Hash
			if !w.Old.IsZero() && w.Old.Mode == filemode.Dir {
				sub = w.Old.Hash()
				c.trees[sub] = true // under against, which is held
			}
			if err := c.tree(e, sub); err != nil {
				return fmt.Errorf("%s/: %w", w.Cur.Name, err)
			}
		default:
			if c.read++; c.read > c.limit {
				return errReplicaWalk
			}
			t, _, err := c.src.info(e)
			if err != nil {
				return fmt.Errorf("%s: blob %s: %w", w.Cur.Name, e, err)
			}
			if t != plumbing.BlobObject {
				return fmt.Errorf("%s: object %s is a %s, not a blob", w.Cur.Name, e, t)
			}
		}
	}
	if err := w.Err(); err != nil {
		return fmt.Errorf("tree %s: %w", h, err)
	}
	c.trees[h] = true
	return nil
}

// readTree reads a tree object.
func (c *replicaCheck) readTree(h plumbing.Hash) ([]byte, error) {
	t, data, err := c.src.read(h, replicaMaxTree)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", h, err)
	}
	if t != plumbing.TreeObject {
		return nil, fmt.Errorf("object %s is a %s, not a tree", h, t)
	}
	return data, nil
}

// replicaQueue orders commits newest first, by committer time.
type replicaQueue struct {
	c *replicaCheck
	h []plumbing.Hash
}

func (q *replicaQueue) Len() int { return len(q.h) }
func (q *replicaQueue) Less(i, j int) bool {
	return q.c.commits[q.h[i]].time > q.c.commits[q.h[j]].time
}
func (q *replicaQueue) Swap(i, j int) { q.h[i], q.h[j] = q.h[j], q.h[i] }
func (q *replicaQueue) Push(x any)    { q.h = append(q.h, x.(plumbing.Hash)) }
func (q *replicaQueue) Pop() any {
	x := q.h[len(q.h)-1]
	q.h = q.h[:len(q.h)-1]
	return x
}

func (q *replicaQueue) allUninteresting() bool {
	for _, h := range q.h {
		if !q.c.commits[h].uninteresting {
			return false
		}
	}
	return true
}

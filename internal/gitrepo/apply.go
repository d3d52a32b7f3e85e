package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gitproto"
)

// Update is one ref update from Old (zero: the ref must not exist) to New;
// a zero New deletes the ref, which must be at Old.
type Update struct {
	Name     plumbing.ReferenceName
	Old, New plumbing.Hash
}

// ErrStale means a ref moved since it was read: read again and retry.
var ErrStale = errors.New("a ref moved since it was read")

// Apply moves the refs. The objects must already be in Storer.
//
// On a remote repository all updates go in one atomic push: the server
// moves every ref or none, deletions included (receive-pack's delete-refs
// and atomic). On a local one the refs that live in packed-refs (or do
// not exist yet) move together, in one new packed-refs renamed into place,
// and a ref that has a file of its own is compare-and-swapped alone (a
// deletion removes its file after packed-refs is written). The last update
// is applied last: put the ref others read first there.
func (r *Repo) Apply(ctx context.Context, updates []Update) error {
	if len(updates) == 0 {
		return nil
	}
	for _, u := range updates {
		if err := checkRefName(u.Name); err != nil {
			return err
		}
		if u.New.IsZero() && u.Old.IsZero() {
			return fmt.Errorf("update %s: neither an old nor a new value", u.Name)
		}
	}
	if !r.Remote {
		t0 := time.Now()
		defer phase("refs", &t0)
		return r.applyLocal(updates)
	}
	for _, u := range updates {
		// The mirror is ours alone; the push below is what must not lose
		// an update.
		err := r.repo.Storer.SetReference(plumbing.NewHashReference(u.Name, u.New))
		if u.New.IsZero() {
			err = r.repo.Storer.RemoveReference(u.Name)
		}
		if err != nil {
			return fmt.Errorf("update %s in the mirror: %w", u.Name, err)
		}
	}
	if r.proto != nil {
		return r.pushProto(ctx, updates)
	}
	specs := make([]config.RefSpec, len(updates))
	require := make([]config.RefSpec, 0, len(updates))
	for i, u := range updates {
		specs[i] = config.RefSpec(u.Name + ":" + u.Name)
		if u.New.IsZero() {
			specs[i] = config.RefSpec(":" + u.Name)
		}
		if !u.Old.IsZero() {
			require = append(require, config.RefSpec(u.Old.String()+":"+u.Name.String()))
		}
	}
	err := r.remote().PushContext(ctx, &git.PushOptions{
		RemoteName:        remoteName,
		RefSpecs:          specs,
		RequireRemoteRefs: require,
		Atomic:            true,
		Auth:              r.auth,
	})
	if err == nil || errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil
	}
	if r.moved(ctx, updates, err) {
		return fmt.Errorf("push %s: %w: %v", gitproto.Redact(r.Location), ErrStale, redactErr(err, r.Location))
	}
	return fmt.Errorf("push %s: %w", gitproto.Redact(r.Location), redactErr(err, r.Location))
}

// moved reports whether a push failed because a ref moved on the remote.
// The error's words say so for the checks the client makes; when the
// server refuses (an atomic transaction that failed to lock a ref), the
// remote's refs are listed and compared with what the updates expected.
func (r *Repo) moved(ctx context.Context, updates []Update, pushErr error) bool {
	msg := pushErr.Error()
	for _, s := range []string{"non-fast-forward", "required to be", "stale info"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	refs, err := r.remote().ListContext(ctx, &git.ListOptions{Auth: r.auth})
	if err != nil {
		return false
	}
	remote := map[plumbing.ReferenceName]plumbing.Hash{}
	for _, ref := range refs {
		remote[ref.Name()] = ref.Hash()
	}
	for _, u := range updates {
		if remote[u.Name] != u.Old {
			return true
		}
	}
	return false
}

// pushProto is the atomic push with gitproto's receive-pack client.
func (r *Repo) pushProto(ctx context.Context, updates []Update) error {
	ups := make([]gitproto.RefUpdate, len(updates))
	for i, u := range updates {
		ups[i] = gitproto.RefUpdate{Name: u.Name, Old: u.Old, New: u.New}
	}
	err := r.proto.Push(ctx, r.st, ups...)
	if err == nil {
		return nil
	}
	if errors.Is(err, gitproto.ErrStale) {
		return fmt.Errorf("%w: %w", ErrStale, err)
	}
	if _, ok := errors.AsType[*gitproto.PushError](err); ok {
		// An atomic push refused as a whole may hide which ref moved:
		// compare the remote's refs with what the updates expected.
		prefixes := make([]string, len(updates))
		for i, u := range updates {
			prefixes[i] = u.Name.String()
		}
		if remote, lerr := r.proto.LsRefs(ctx, prefixes...); lerr == nil {
			for _, u := range updates {
				if remote[u.Name] != u.Old {
					return fmt.Errorf("%w: %w", ErrStale, err)
				}
			}
		}
	}
	return err
}

// checkRefName refuses names git would refuse and names that cannot be
// written on one line of packed-refs.
func checkRefName(name plumbing.ReferenceName) error {
	s := name.String()
	bad := !strings.HasPrefix(s, "refs/") || strings.HasSuffix(s, "/") || strings.HasSuffix(s, ".lock") ||
		strings.Contains(s, "..") || strings.Contains(s, "//") || strings.Contains(s, "@{") || strings.Contains(s, "/.")
	for _, c := range s {
		if c <= ' ' || c == 0x7f || strings.ContainsRune("~^:?*[\\", c) {
			bad = true
		}
	}
	if bad {
		return fmt.Errorf("update %q: not a valid ref name", s)
	}
	return nil
}

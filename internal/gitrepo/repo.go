package gitrepo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"nuon.dev/nuon/internal/gitobj"
)

// Repo is the tenant repository, or a local mirror of it.
type Repo struct {
	// Location is what the user named: a path or a URL.
	Location string
	// Remote is true when Location is reached over a transport and the
	// objects live in a local mirror.
	Remote bool

	repo *git.Repository
	// st reads the objects of repo; on disk, through a gitobj.Store.
	st   storer.Storer
	auth transport.AuthMethod
}

// IsURL reports whether location names a remote repository rather than a
// local path.
func IsURL(location string) bool {
	u, err := url.Parse(location)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "http", "https", "ssh", "git", "file":
		return true
	}
	// scp-like syntax: user@host:path
	if i := strings.IndexByte(location, ':'); i > 0 {
		return strings.Contains(location[:i], "@") && !strings.Contains(location[:i], "/")
	}
	return false
}

// Option configures Open.
type Option func(*options)

type options struct {
	cacheDir string
	auth     transport.AuthMethod
}

// WithCacheDir sets where mirrors of remote repositories are kept; default
// the user's cache directory under nuon/repos.
func WithCacheDir(dir string) Option { return func(o *options) { o.cacheDir = dir } }

// WithAuth sets transport credentials for a remote repository.
func WithAuth(a transport.AuthMethod) Option { return func(o *options) { o.auth = a } }

// Open opens a local repository (bare or not) or prepares the local mirror
// of a remote one. Call Fetch before reading a mirror.
func Open(location string, opts ...Option) (*Repo, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if !IsURL(location) {
		r, err := git.PlainOpenWithOptions(location, &git.PlainOpenOptions{EnableDotGitCommonDir: true})
		if err != nil {
			return nil, fmt.Errorf("open repository %s: %w", location, err)
		}
		return &Repo{Location: location, repo: r, st: objectStorer(r)}, nil
	}
	if o.cacheDir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("mirror of %s: %w", location, err)
		}
		o.cacheDir = filepath.Join(base, "nuon", "repos")
	}
	sum := sha256.Sum256([]byte(location))
	dir := filepath.Join(o.cacheDir, hex.EncodeToString(sum[:8])+".git")
	r, err := git.PlainOpen(dir)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		r, err = git.PlainInit(dir, true)
	}
	if err != nil {
		return nil, fmt.Errorf("mirror of %s at %s: %w", location, dir, err)
	}
	return &Repo{Location: location, Remote: true, repo: r, st: objectStorer(r), auth: o.auth}, nil
}

// objectStorer returns the storage of r, its object reads going straight
// to the pack files when it is on disk.
func objectStorer(r *git.Repository) storer.Storer {
	if fs, ok := r.Storer.(*filesystem.Storage); ok {
		return gitobj.NewStore(fs)
	}
	return r.Storer
}

// remoteName names the tenant repository inside a mirror.
const remoteName = "tenant"

// remote is the tenant repository as a go-git remote of the mirror.
func (r *Repo) remote() *git.Remote {
	return git.NewRemote(r.repo.Storer, &config.RemoteConfig{Name: remoteName, URLs: []string{r.Location}})
}

// Storer is where the repository's objects and refs are read and written.
func (r *Repo) Storer() storer.Storer { return r.st }

// Git is the underlying go-git repository.
func (r *Repo) Git() *git.Repository { return r.repo }

// Fetch brings the refs under each prefix (for example "refs/heads/") of a
// remote repository into the mirror under the same names, removing refs
// the remote no longer has. On a local repository it does nothing.
func (r *Repo) Fetch(ctx context.Context, prefixes ...string) error {
	if !r.Remote {
		return nil
	}
	specs := make([]config.RefSpec, len(prefixes))
	for i, p := range prefixes {
		specs[i] = config.RefSpec("+" + p + "*:" + p + "*")
	}
	err := r.remote().FetchContext(ctx, &git.FetchOptions{
		RemoteName: remoteName,
		RefSpecs:   specs,
		Auth:       r.auth,
		Tags:       git.NoTags,
		Force:      true,
		Prune:      true,
	})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		if errors.Is(err, transport.ErrEmptyRemoteRepository) {
			return nil
		}
		return fmt.Errorf("fetch %s: %w", r.Location, err)
	}
	return nil
}

// Resolve returns the commit a ref name, branch or hex id names.
func (r *Repo) Resolve(rev string) (plumbing.Hash, error) {
	if plumbing.IsHash(rev) {
		return plumbing.NewHash(rev), nil
	}
	for _, name := range []string{rev, "refs/heads/" + rev, "refs/tags/" + rev} {
		ref, err := storer.ResolveReference(r.repo.Storer, plumbing.ReferenceName(name))
		if err == nil {
			return ref.Hash(), nil
		}
	}
	return plumbing.ZeroHash, fmt.Errorf("resolve %s in %s: no such ref", rev, r.Location)
}

// Refs returns every ref whose name starts with prefix, name to commit.
//
// When no ref file has such a name, it reads packed-refs itself: go-git
// parses all of it into references, and a tenant has thousands.
func (r *Repo) Refs(prefix string) (map[plumbing.ReferenceName]plumbing.Hash, error) {
	if fsys, ok := r.refsOnDisk(); ok && strings.HasPrefix(prefix, "refs/") && !hasLooseRefs(fsys, prefix) {
		data, err := readPackedRefsFile(fsys)
		if err != nil {
			return nil, fmt.Errorf("list refs: %w", err)
		}
		// Sized up front: a fleet has 100,000 install refs.
		out := make(map[plumbing.ReferenceName]plumbing.Hash, bytes.Count(data, []byte(prefix)))
		packedRefsWithPrefix(data, prefix, out)
		return out, nil
	}
	iter, err := r.repo.Storer.IterReferences()
	if err != nil {
		return nil, fmt.Errorf("list refs: %w", err)
	}
	out := map[plumbing.ReferenceName]plumbing.Hash{}
	err = iter.ForEach(func(ref *plumbing.Reference) error {
		if ref.Type() == plumbing.HashReference && strings.HasPrefix(ref.Name().String(), prefix) {
			out[ref.Name()] = ref.Hash()
		}
		return nil
	})
	return out, err
}

// Ref returns one ref's commit, or the zero hash when it does not exist.
func (r *Repo) Ref(name plumbing.ReferenceName) (plumbing.Hash, error) {
	if fsys, ok := r.refsOnDisk(); ok && strings.HasPrefix(name.String(), "refs/") {
		if _, err := fsys.Lstat(name.String()); errors.Is(err, fs.ErrNotExist) {
			data, err := readPackedRefsFile(fsys)
			if err != nil {
				return plumbing.ZeroHash, fmt.Errorf("read %s: %w", name, err)
			}
			h, _ := findPackedRef(data, name.String())
			return h, nil
		}
	}
	ref, err := r.repo.Storer.Reference(name)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return plumbing.ZeroHash, nil
	}
	if err != nil {
		return plumbing.ZeroHash, err
	}
	return ref.Hash(), nil
}

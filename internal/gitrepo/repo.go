package gitrepo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
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

	"nuon.dev/nuon/internal/gitauth"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitproto"
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
	// proto reaches an http(s):// or ssh remote with git's protocol
	// (version 2 ls-refs and fetch, receive-pack); go-git is kept for
	// file:// and git://, and when WithAuth gives go-git credentials.
	proto *gitproto.Client
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
	// scp-like syntax, [user@]host:path, as git reads it.
	_, ok, _ := gitproto.ParseSSH(location)
	return ok
}

// Option configures Open.
type Option func(*options)

type options struct {
	cacheDir string
	auth     transport.AuthMethod
	creds    *gitauth.Auth
	sign     func(*http.Request)
}

// WithCacheDir sets where mirrors of remote repositories are kept; default
// the user's cache directory under nuon/repos.
func WithCacheDir(dir string) Option { return func(o *options) { o.cacheDir = dir } }

// WithAuth sets transport credentials for a remote repository.
func WithAuth(a transport.AuthMethod) Option { return func(o *options) { o.auth = a } }

// WithCredentials sets the credentials of a remote repository from the
// options every command shares (gitauth); default none. The agent's Remote
// takes the same.
func WithCredentials(a *gitauth.Auth) Option { return func(o *options) { o.creds = a } }

// WithRequestAuth calls sign on every HTTP request to an http(s) remote
// before it is sent, in place of the credentials' header: a tenant
// server's operator endpoint wants each request signed (package
// internal/signature/request). Default none.
func WithRequestAuth(sign func(*http.Request)) Option { return func(o *options) { o.sign = sign } }

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
	if o.creds != nil && o.auth == nil && !speaksProto(location) {
		a, err := o.creds.GoGit(location)
		if err != nil {
			return nil, err
		}
		o.auth = a
	}
	if o.cacheDir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("mirror of %s: %w", gitproto.Redact(location), err)
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
		return nil, fmt.Errorf("mirror of %s at %s: %w", gitproto.Redact(location), dir, err)
	}
	repo := &Repo{Location: location, Remote: true, repo: r, st: objectStorer(r), auth: o.auth}
	if o.auth == nil && speaksProto(location) {
		if repo.proto, err = o.creds.Client(location, nil, nil); err != nil {
			return nil, err
		}
		if o.sign != nil {
			repo.proto.Auth = o.sign
		}
	}
	return repo, nil
}

// speaksProto says whether gitproto reaches location.
func speaksProto(location string) bool {
	if _, ok, _ := gitproto.ParseSSH(location); ok {
		return true
	}
	return strings.HasPrefix(location, "http://") || strings.HasPrefix(location, "https://")
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
	if r.proto != nil {
		return r.fetchProto(ctx, prefixes)
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
		return fmt.Errorf("fetch %s: %w", gitproto.Redact(r.Location), redactErr(err, r.Location))
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
	return plumbing.ZeroHash, fmt.Errorf("resolve %s in %s: no such ref", rev, gitproto.Redact(r.Location))
}

// Refs returns every ref whose name starts with prefix, name to commit.
//
// On disk it reads packed-refs and the ref files itself (RefList): go-git
// parses all of packed-refs into references, and a tenant has thousands.
func (r *Repo) Refs(prefix string) (map[plumbing.ReferenceName]plumbing.Hash, error) {
	if _, ok := r.refsOnDisk(); ok && strings.HasPrefix(prefix, "refs/") {
		refs, err := r.RefList(prefix)
		if err != nil {
			return nil, err
		}
		// Sized up front: a fleet has 100,000 install refs.
		out := make(map[plumbing.ReferenceName]plumbing.Hash, len(refs))
		for _, ref := range refs {
			out[plumbing.ReferenceName(ref.Name)] = ref.Hash
		}
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

// redactErr keeps a URL's user information out of an error from go-git,
// which may quote the URL it was given.
func redactErr(err error, location string) error {
	u, perr := url.Parse(location)
	if perr != nil || u.User == nil || !strings.Contains(err.Error(), u.User.String()) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), u.User.String()+"@", ""))
}

// fetchProto is Fetch with gitproto: one ls-refs for the prefixes, one
// fetch of what the mirror lacks, then the mirror's refs set and pruned.
func (r *Repo) fetchProto(ctx context.Context, prefixes []string) error {
	remote, err := r.proto.LsRefs(ctx, prefixes...)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", gitproto.Redact(r.Location), err)
	}
	wants := make([]plumbing.Hash, 0, len(remote))
	for _, h := range remote {
		wants = append(wants, h)
	}
	var haves []plumbing.Hash
	local := map[plumbing.ReferenceName]plumbing.Hash{}
	for _, p := range prefixes {
		refs, err := r.Refs(p)
		if err != nil {
			return fmt.Errorf("fetch %s: %w", gitproto.Redact(r.Location), err)
		}
		for n, h := range refs {
			local[n] = h
			haves = append(haves, h)
		}
	}
	if _, err := r.proto.Fetch(ctx, r.repo.Storer, wants, haves); err != nil {
		return fmt.Errorf("fetch %s: %w", gitproto.Redact(r.Location), err)
	}
	for n, h := range remote {
		if local[n] == h {
			continue
		}
		if err := r.repo.Storer.SetReference(plumbing.NewHashReference(n, h)); err != nil {
			return fmt.Errorf("fetch %s: update %s: %w", gitproto.Redact(r.Location), n, err)
		}
	}
	for n := range local {
		if _, ok := remote[n]; !ok {
			if err := r.repo.Storer.RemoveReference(n); err != nil {
				return fmt.Errorf("fetch %s: prune %s: %w", gitproto.Redact(r.Location), n, err)
			}
		}
	}
	return nil
}

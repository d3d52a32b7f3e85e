package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage"

	"nuon.dev/nuon/internal/gitauth"
	"nuon.dev/nuon/internal/gitproto"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
)

// Remote is the agent's one connection to the tenant repository: read two
// refs, fetch one commit's objects, push one ref.
type Remote interface {
	// Heads returns the commits of the named refs; an absent ref is left
	// out. It is one small request however many refs the repository has.
	Heads(ctx context.Context, names ...plumbing.ReferenceName) (map[plumbing.ReferenceName]plumbing.Hash, error)
	// Fetch stores in st every object reachable from want that st lacks.
	Fetch(ctx context.Context, st storage.Storer, want plumbing.Hash) error
	// Push moves ref on the remote from old (zero: absent) to new,
	// sending the objects from st; it fails if the ref is not at old.
	Push(ctx context.Context, st storage.Storer, ref plumbing.ReferenceName, old, new plumbing.Hash) error
}

// RemoteOption configures NewRemote.
type RemoteOption func(*remoteOptions)

type remoteOptions struct {
	signer *request.Signer
	auth   *gitauth.Auth
	http   *http.Client
	log    *slog.Logger
}

// WithGitAuth sets the credentials for the repository; default none.
func WithGitAuth(a *gitauth.Auth) RemoteOption { return func(o *remoteOptions) { o.auth = a } }

// WithHTTPClient sets the client that sends every HTTP request to the
// repository, ls-refs, fetch and push alike, e.g. to sign each one in its
// Transport; default http.DefaultClient.
func WithHTTPClient(c *http.Client) RemoteOption { return func(o *remoteOptions) { o.http = c } }

// WithRequestSigner signs every HTTP request with the install's key, as
// the tenant server (nuon server) requires: no token or password. It wraps
// the transport of WithHTTPClient's client (default http.DefaultClient).
func WithRequestSigner(s *request.Signer) RemoteOption {
	return func(o *remoteOptions) { o.signer = s }
}

// WithRemoteLogger sets where the remote's one warning goes (a server
// that speaks only git protocol version 0); default nowhere.
func WithRemoteLogger(l *slog.Logger) RemoteOption { return func(o *remoteOptions) { o.log = l } }

// NewRemote returns the Remote for a repository location: git protocol v2
// over HTTP(S) and SSH (ssh:// and user@host:path) through gitproto, so a
// poll costs one small exchange whatever the size of the fleet, falling
// back to version 0 with a warning when the server has only that; go-git
// for paths and file://. Nil options are skipped. A configuration error
// (credentials that cannot be used for location) is returned by every
// method.
func NewRemote(location string, opts ...RemoteOption) Remote {
	var o remoteOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if !gitrepo.IsURL(location) || strings.HasPrefix(location, "file://") {
		return goGitRemote{url: location}
	}
	if o.signer != nil {
		base := http.DefaultClient
		if o.http != nil {
			base = o.http
		}
		signed := *base
		rt := base.Transport
		if rt == nil {
			rt = http.DefaultTransport
		}
		signed.Transport = o.signer.Transport(rt)
		o.http = &signed
	}
	c, err := o.auth.Client(location, o.http, o.log)
	if err != nil {
		return errRemote{err}
	}
	return &netRemote{client: c}
}

// netRemote speaks git's protocol itself: ls-refs and fetch in version 2,
// push with receive-pack, all through the one gitproto.Client.
type netRemote struct {
	client *gitproto.Client
}

func (r *netRemote) Heads(ctx context.Context, names ...plumbing.ReferenceName) (map[plumbing.ReferenceName]plumbing.Hash, error) {
	prefixes := make([]string, len(names))
	for i, n := range names {
		prefixes[i] = n.String()
	}
	refs, err := r.client.LsRefs(ctx, prefixes...)
	if err != nil {
		return nil, err
	}
	out := map[plumbing.ReferenceName]plumbing.Hash{}
	for _, n := range names {
		if h, ok := refs[n]; ok {
			out[n] = h
		}
	}
	return out, nil
}

func (r *netRemote) Fetch(ctx context.Context, st storage.Storer, want plumbing.Hash) error {
	_, err := r.client.Fetch(ctx, st, []plumbing.Hash{want}, localHeads(st))
	return err
}

func (r *netRemote) Push(ctx context.Context, st storage.Storer, ref plumbing.ReferenceName, old, new plumbing.Hash) error {
	return r.client.Push(ctx, st, gitproto.RefUpdate{Name: ref, Old: old, New: new})
}

// errRemote is a Remote that could not be configured.
type errRemote struct{ err error }

func (r errRemote) Heads(context.Context, ...plumbing.ReferenceName) (map[plumbing.ReferenceName]plumbing.Hash, error) {
	return nil, r.err
}
func (r errRemote) Fetch(context.Context, storage.Storer, plumbing.Hash) error { return r.err }
func (r errRemote) Push(context.Context, storage.Storer, plumbing.ReferenceName, plumbing.Hash, plumbing.Hash) error {
	return r.err
}

// localHeads lists what the local store has, so a fetch sends only what is
// new.
func localHeads(st storer.ReferenceStorer) []plumbing.Hash {
	var out []plumbing.Hash
	iter, err := st.IterReferences()
	if err != nil {
		return nil
	}
	_ = iter.ForEach(func(r *plumbing.Reference) error {
		if r.Type() == plumbing.HashReference {
			out = append(out, r.Hash())
		}
		return nil
	})
	return out
}

// goGitRemote reaches a repository on a local path with go-git.
type goGitRemote struct {
	url  string
	auth transport.AuthMethod
}

func (r goGitRemote) remote(st storage.Storer) *git.Remote {
	return git.NewRemote(st, &config.RemoteConfig{Name: "tenant", URLs: []string{r.url}})
}

func (r goGitRemote) Heads(ctx context.Context, names ...plumbing.ReferenceName) (map[plumbing.ReferenceName]plumbing.Hash, error) {
	refs, err := git.NewRemote(nil, &config.RemoteConfig{Name: "tenant", URLs: []string{r.url}}).ListContext(ctx, &git.ListOptions{Auth: r.auth})
	if err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return nil, fmt.Errorf("list %s: %w", r.url, err)
	}
	want := map[plumbing.ReferenceName]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[plumbing.ReferenceName]plumbing.Hash{}
	for _, ref := range refs {
		if want[ref.Name()] && ref.Type() == plumbing.HashReference {
			out[ref.Name()] = ref.Hash()
		}
	}
	return out, nil
}

// fetchRef is where a fetched desired commit is kept in the local store.
const fetchRef = "refs/nuon/fetched"

func (r goGitRemote) Fetch(ctx context.Context, st storage.Storer, want plumbing.Hash) error {
	if _, err := st.EncodedObject(plumbing.CommitObject, want); err == nil {
		return nil
	}
	// go-git fetches by ref name; fetch every ref that points at want.
	heads, err := r.remote(st).ListContext(ctx, &git.ListOptions{Auth: r.auth})
	if err != nil {
		return fmt.Errorf("list %s: %w", r.url, err)
	}
	var specs []config.RefSpec
	for _, h := range heads {
		if h.Type() == plumbing.HashReference && h.Hash() == want {
			specs = append(specs, config.RefSpec("+"+h.Name().String()+":"+fetchRef))
			break
		}
	}
	if len(specs) == 0 {
		return fmt.Errorf("fetch %s: no ref points at %s any more", r.url, want)
	}
	err = r.remote(st).FetchContext(ctx, &git.FetchOptions{RemoteName: "tenant", RefSpecs: specs, Auth: r.auth, Tags: git.NoTags, Force: true})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return fmt.Errorf("fetch %s: %w", r.url, err)
	}
	return nil
}

func (r goGitRemote) Push(ctx context.Context, st storage.Storer, ref plumbing.ReferenceName, old, new plumbing.Hash) error {
	var require []config.RefSpec
	if !old.IsZero() {
		require = []config.RefSpec{config.RefSpec(old.String() + ":" + ref.String())}
	}
	spec := config.RefSpec(ref.String() + ":" + ref.String())
	if strings.HasPrefix(ref.String(), schemas.LivenessRefPrefix) {
		// The liveness ref keeps only its tip: each beat replaces it,
		// still only from the old tip read (RequireRemoteRefs).
		spec = "+" + spec
	}
	err := r.remote(st).PushContext(ctx, &git.PushOptions{
		RemoteName:        "tenant",
		RefSpecs:          []config.RefSpec{spec},
		RequireRemoteRefs: require,
		Auth:              r.auth,
	})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return fmt.Errorf("push %s to %s: %w", ref, r.url, err)
	}
	return nil
}

var (
	_ Remote = (*netRemote)(nil)
	_ Remote = errRemote{}
	_ Remote = goGitRemote{}
)

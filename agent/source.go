package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage"

	"nuon.dev/nuon/internal/gitproto"
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

// NewRemote returns the Remote for a repository location: git protocol v2
// over HTTP(S) for http:// and https:// URLs, so a poll costs one request
// whatever the size of the fleet, and go-git for paths, file:// and ssh://.
// An auth that can set a request's headers (a go-git HTTP AuthMethod such as
// request.Signer) is applied to the protocol v2 requests too.
func NewRemote(location string, auth transport.AuthMethod) Remote {
	if strings.HasPrefix(location, "http://") || strings.HasPrefix(location, "https://") {
		c := &gitproto.Client{URL: location}
		if a, ok := auth.(interface{ SetAuth(*http.Request) }); ok {
			c.Auth = a.SetAuth
		}
		return &httpRemote{client: c, gogit: goGitRemote{url: location, auth: auth}}
	}
	return goGitRemote{url: location, auth: auth}
}

// httpRemote reads with protocol v2 and pushes with go-git (receive-pack
// has no v2; pushes happen only when the status changes).
type httpRemote struct {
	client *gitproto.Client
	gogit  goGitRemote
}

func (r *httpRemote) Heads(ctx context.Context, names ...plumbing.ReferenceName) (map[plumbing.ReferenceName]plumbing.Hash, error) {
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

func (r *httpRemote) Fetch(ctx context.Context, st storage.Storer, want plumbing.Hash) error {
	_, err := r.client.Fetch(ctx, st, []plumbing.Hash{want}, localHeads(st))
	return err
}

func (r *httpRemote) Push(ctx context.Context, st storage.Storer, ref plumbing.ReferenceName, old, new plumbing.Hash) error {
	return r.gogit.Push(ctx, st, ref, old, new)
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
	err := r.remote(st).PushContext(ctx, &git.PushOptions{
		RemoteName:        "tenant",
		RefSpecs:          []config.RefSpec{config.RefSpec(ref.String() + ":" + ref.String())},
		RequireRemoteRefs: require,
		Auth:              r.auth,
	})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return fmt.Errorf("push %s to %s: %w", ref, r.url, err)
	}
	return nil
}

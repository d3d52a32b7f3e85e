package oci

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Client reaches OCI registries. It keeps one authenticated transport per
// registry (per repository and access for registries that hand out
// repository-scoped tokens), so the authentication handshake, a GET /v2/
// and perhaps a token request, happens once per process rather than once
// per call: a check of a present artifact then costs one request.
//
// A Client remembers transports, never content: every call asks the
// registry again.
type Client struct {
	keychain authn.Keychain
	base     http.RoundTripper

	mu         sync.Mutex
	challenges map[string]string // registry → auth scheme of its ping
	transports map[string]http.RoundTripper
}

// ClientOption configures NewClient.
type ClientOption func(*clientConfig) error

type clientConfig struct {
	keychain authn.Keychain
	static   map[string]authn.Authenticator
	roots    *x509.CertPool
	base     http.RoundTripper
	http1    bool
	backoff  transport.Backoff
}

// Defaults of a Client.
var (
	// DefaultBackoff retries a failed request twice within about a
	// second; longer outages are for the caller to retry.
	DefaultBackoff = transport.Backoff{Duration: 200 * time.Millisecond, Factor: 3, Jitter: 0.1, Steps: 3}
)

// WithKeychain resolves credentials of registries that WithAuth does not
// name; default authn.DefaultKeychain (the docker config file). Nil means
// anonymous.
func WithKeychain(k authn.Keychain) ClientOption {
	return func(c *clientConfig) error { c.keychain = k; return nil }
}

// WithAuth uses a for the registry host (host[:port]).
func WithAuth(host string, a authn.Authenticator) ClientOption {
	return func(c *clientConfig) error {
		if a == nil {
			a = authn.Anonymous
		}
		c.static[host] = a
		return nil
	}
}

// WithCAFile trusts the PEM certificates in file besides the system's.
func WithCAFile(file string) ClientOption {
	return func(c *clientConfig) error {
		pem, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("registry CA: %w", err)
		}
		if !c.roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("registry CA %s: no PEM certificate", file)
		}
		return nil
	}
}

// WithTransport replaces the HTTP transport (tests count requests with
// it). CA options do not apply to it.
func WithTransport(t http.RoundTripper) ClientOption {
	return func(c *clientConfig) error { c.base = t; return nil }
}

// WithHTTP1 keeps to HTTP/1.1: one TCP connection per blob in flight
// instead of streams sharing one connection's flow-control window, which
// on a fast network moves large blobs faster. Default true.
func WithHTTP1(on bool) ClientOption {
	return func(c *clientConfig) error { c.http1 = on; return nil }
}

// WithBackoff sets how requests that fail for a temporary reason are
// retried; default DefaultBackoff.
func WithBackoff(b transport.Backoff) ClientOption {
	return func(c *clientConfig) error { c.backoff = b; return nil }
}

// NewClient returns a Client.
func NewClient(opts ...ClientOption) (*Client, error) {
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	cfg := &clientConfig{keychain: authn.DefaultKeychain, static: map[string]authn.Authenticator{}, roots: roots, http1: true, backoff: DefaultBackoff}
	for _, o := range opts {
		if err := o(cfg); err != nil {
			return nil, err
		}
	}
	base := cfg.base
	if base == nil {
		t := &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:       &tls.Config{RootCAs: cfg.roots, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2:     !cfg.http1,
			MaxIdleConns:          100,
			MaxIdleConnsPerHost:   50,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
			ReadBufferSize:        128 << 10,
			WriteBufferSize:       128 << 10,
		}
		if cfg.http1 {
			t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		base = t
	}
	base = transport.NewRetry(base, transport.WithRetryBackoff(cfg.backoff))
	base = transport.NewUserAgent(base, "nuon")
	kc := cfg.keychain
	if kc == nil {
		kc = authn.NewMultiKeychain() // anonymous
	}
	if len(cfg.static) > 0 {
		kc = authn.NewMultiKeychain(staticKeychain(cfg.static), kc)
	}
	return &Client{keychain: kc, base: base, challenges: map[string]string{}, transports: map[string]http.RoundTripper{}}, nil
}

// staticKeychain answers for the registries it names.
type staticKeychain map[string]authn.Authenticator

func (k staticKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if a, ok := k[r.RegistryStr()]; ok {
		return a, nil
	}
	return authn.Anonymous, nil
}

// Remote returns the options for go-containerregistry's remote package
// to reach repo, for pulling, or for pushing and pulling when push is set.
func (c *Client) Remote(ctx context.Context, repo name.Repository, push bool) ([]remote.Option, error) {
	t, err := c.transport(ctx, repo, push)
	if err != nil {
		return nil, err
	}
	return []remote.Option{remote.WithTransport(t), remote.WithContext(ctx)}, nil
}

// Forget drops the transports of registry, so the next call shakes hands
// again (after its credentials changed, say).
func (c *Client) Forget(registry string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.challenges, registry)
	for k := range c.transports {
		if k == registry || strings.HasPrefix(k, registry+"/") {
			delete(c.transports, k)
		}
	}
}

func (c *Client) transport(ctx context.Context, repo name.Repository, push bool) (http.RoundTripper, error) {
	reg := repo.Registry
	host := reg.RegistryStr()
	c.mu.Lock()
	scheme, pinged := c.challenges[host]
	c.mu.Unlock()
	if !pinged {
		ch, err := transport.Ping(ctx, reg, c.base)
		if err != nil {
			return nil, fmt.Errorf("registry %s: %w", host, err)
		}
		scheme = strings.ToLower(ch.Scheme)
		c.mu.Lock()
		c.challenges[host] = scheme
		c.mu.Unlock()
	}
	key := host
	scopes := []string{repo.Scope(transport.PullScope)}
	if push {
		scopes = []string{repo.Scope(transport.PushScope)}
	}
	if scheme == "bearer" {
		// Tokens are scoped to a repository and an access.
		key = host + "/" + repo.RepositoryStr() + "#" + scopes[0]
	}
	c.mu.Lock()
	t, ok := c.transports[key]
	c.mu.Unlock()
	if ok {
		return t, nil
	}
	auth, err := authn.Resolve(ctx, c.keychain, reg)
	if err != nil {
		return nil, fmt.Errorf("registry %s credentials: %w", host, err)
	}
	t, err = transport.NewWithContext(ctx, reg, auth, c.base, scopes)
	if err != nil {
		return nil, fmt.Errorf("registry %s: %w", host, err)
	}
	c.mu.Lock()
	c.transports[key] = t
	c.mu.Unlock()
	return t, nil
}

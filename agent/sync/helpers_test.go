package sync_test

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/sigstore/pkg/signature"

	"nuon.dev/nuon/agent/sync"
	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/oci/ocitest"
	"nuon.dev/nuon/schemas"
)

const (
	fixtures   = "../../fixtures"
	fixtureApp = "../../fixtures/tenant/nuon.yaml"
)

// vendorKey is the sample vendor's cosign key (fixtures/keys/cosign.key),
// loaded once: key derivation is slow under the race detector.
var vendorKey = stdsync.OnceValues(func() (signature.SignerVerifier, error) {
	return builder.LoadKey(filepath.Join(fixtures, "keys", "cosign.key"), nil)
})

// otherKey is a key the install does not trust.
var otherKey = stdsync.OnceValues(func() (signature.SignerVerifier, error) {
	kb, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return nil, nil })
	if err != nil {
		return nil, err
	}
	return cosign.LoadPrivateKey(kb.PrivateBytes, nil, nil)
})

func key(t testing.TB, f func() (signature.SignerVerifier, error)) signature.SignerVerifier {
	t.Helper()
	k, err := f()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// world is a vendor registry (plain HTTP) and an install registry (TLS and
// basic auth, as ECR), both real Distribution servers.
type world struct {
	vendor, install *ocitest.Registry
	// vendorHost is where the vendor registry is reached: the registry,
	// or a proxy in front of it.
	vendorHost string
	client     *oci.Client
	app        schemas.App
}

func newWorld(t testing.TB) *world {
	t.Helper()
	w := &world{
		vendor:  ocitest.Start(t, ocitest.Options{}),
		install: ocitest.Start(t, ocitest.Options{TLS: true, Username: "nuon", Password: "install-secret"}),
	}
	w.vendorHost = w.vendor.Host
	w.client = w.newClient(t)
	w.setApp(t)
	return w
}

func (w *world) newClient(t testing.TB, extra ...oci.ClientOption) *oci.Client {
	t.Helper()
	opts := append(w.install.ClientOptions(), oci.WithAuth(w.vendor.Host, nil),
		oci.WithBackoff(transport.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Steps: 2}))
	c, err := oci.NewClient(append(opts, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// setApp loads the sample app with its repositories in the vendor
// registry, as reached at vendorHost.
func (w *world) setApp(t testing.TB) {
	t.Helper()
	app, err := builder.LoadApp(fixtureApp)
	if err != nil {
		t.Fatal(err)
	}
	app.Components = slices.Clone(app.Components)
	for i, c := range app.Components {
		app.Components[i].Repository = w.vendorHost + strings.TrimPrefix(c.Repository, "registry.vendor.example")
	}
	w.app = app
}

// build builds the named fixture components (all when none) into the
// vendor registry, signed with k.
func (w *world) build(t testing.TB, k signature.SignerVerifier, names ...string) []builder.Artifact {
	t.Helper()
	targets, err := builder.Targets(w.app, fixtures, nil, names)
	if err != nil {
		t.Fatal(err)
	}
	arts, err := builder.Build(context.Background(), targets, builder.Options{Client: w.client, Signer: k})
	if err != nil {
		t.Fatal(err)
	}
	return arts
}

// artifacts are built artifacts as the renderer pins them for install
// acme, whose registry prefix is INSTALL/nuon-acme.
func (w *world) artifacts(arts []builder.Artifact) []schemas.Artifact {
	var out []schemas.Artifact
	for _, a := range arts {
		_, path, _ := strings.Cut(a.Repository, "/")
		out = append(out, schemas.Artifact{
			Name:      a.Name,
			Source:    a.Ref(),
			Local:     w.install.Host + "/nuon-acme/" + path + "@" + a.Digest,
			Digest:    a.Digest,
			MediaType: a.MediaType,
		})
	}
	return out
}

func (w *world) syncer(t testing.TB, opts ...func(*sync.Config)) *sync.Syncer {
	t.Helper()
	pub, err := vendorKey()
	if err != nil {
		t.Fatal(err)
	}
	cfg := sync.Config{Client: w.client, Key: pub, Backoff: 10 * time.Millisecond, Logger: testLogger(t)}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := sync.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// present reports whether the install registry has ref's manifest.
func (w *world) present(t testing.TB, ref string) bool {
	t.Helper()
	d, err := name.NewDigest(ref)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := w.client.Head(context.Background(), d, false)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// proxy serves the vendor registry through a proxy whose behaviour a test
// changes: it can flip a byte of blob downloads, or fail every request.
type proxy struct {
	host string
	// down makes every request fail with a dropped connection.
	down atomic.Bool
	// tamper flips the last byte of blob downloads whose path contains it.
	tamper atomic.Value
	// failAfter, when positive, takes the proxy down after that many blob
	// bytes were served.
	failAfter atomic.Int64
	served    atomic.Int64
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	p := &proxy{}
	p.tamper.Store("")
	u, _ := url.Parse("http://" + target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = nil
	rp.ModifyResponse = func(r *http.Response) error {
		if r.Request.Method != http.MethodGet || !strings.Contains(r.Request.URL.Path, "/blobs/") || r.StatusCode != http.StatusOK {
			return nil
		}
		if part := p.tamper.Load().(string); part != "" && strings.Contains(r.Request.URL.Path, part) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return err
			}
			b[len(b)-1] ^= 1
			r.Body = io.NopCloser(strings.NewReader(string(b)))
		}
		r.Body = &countingBody{ReadCloser: r.Body, p: p}
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if p.down.Load() {
			hj, ok := rw.(http.Hijacker)
			if ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close()
					return
				}
			}
			http.Error(rw, "down", http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(rw, r)
	}))
	t.Cleanup(srv.Close)
	p.host = strings.TrimPrefix(srv.URL, "http://")
	return p
}

type countingBody struct {
	io.ReadCloser
	p *proxy
}

func (b *countingBody) Read(buf []byte) (int, error) {
	if b.p.down.Load() {
		return 0, io.ErrUnexpectedEOF
	}
	n, err := b.ReadCloser.Read(buf)
	if limit := b.p.failAfter.Load(); limit > 0 && b.p.served.Add(int64(n)) > limit {
		b.p.down.Store(true)
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

// bigModule writes a module with a file of size random bytes, which do
// not compress.
func bigModule(t testing.TB, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte("resource \"terraform_data\" \"x\" {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, size)
	rand.NewChaCha8([32]byte{byte(size)}).Read(b)
	if err := os.WriteFile(filepath.Join(dir, "blob.bin"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// syncBuffer is a buffer safe for concurrent writes, for logs.
type syncBuffer struct {
	mu  stdsync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

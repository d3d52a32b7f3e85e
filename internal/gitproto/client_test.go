package gitproto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/internal/gittest"
)

// advertisement is git 2.39's protocol v2 capability advertisement.
const advertisement = "000eversion 2\n0015agent=git/2.39.5\n0013ls-refs=unborn\n0020fetch=shallow wait-for-done\n0017object-format=sha1\n0000"

// fakeServer answers info/refs with a protocol v2 advertisement and every
// POST with handler.
func fakeServer(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/info/refs") {
			w.Header().Set("Content-Type", typeAdvertisement)
			fmt.Fprint(w, advertisement)
			return
		}
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/r.git"
}

// answer is a handler that sends body as an upload-pack result.
func answer(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", typeResult)
		fmt.Fprint(w, body)
	}
}

// v0Server is git's http-backend without the Git-Protocol header passed
// through: a server that only speaks protocol version 0. It serves a
// repository with a commit, old.git, and an empty one, empty.git.
func v0Server(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	gittest.InitBare(t, filepath.Join(root, "empty.git"))
	gittest.InitBare(t, filepath.Join(root, "old.git"))
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"README.md": "old\n"})
	gittest.CommitDir(t, filepath.Join(root, "old.git"), "main", src, "first")
	backend := &cgi.Handler{
		Path:       gittest.HTTPBackend,
		Env:        []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
		InheritEnv: []string{"PATH", "HOME"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// http-backend reads the header from HTTP_GIT_PROTOCOL itself.
		r.Header.Del("Git-Protocol")
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestErrors(t *testing.T) {
	s := gittest.NewServer(t)
	s.InitBare(t, "tenant.git")
	gittest.Git(t, "", "init", "--quiet", "--bare", "--object-format=sha256", filepath.Join(s.Root, "sha256.git"))
	down := gittest.NewServer(t)
	down.InitBare(t, "tenant.git")
	down.Down()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	tests := []struct {
		name      string
		url       string
		ctx       func(t *testing.T) context.Context
		is        []error // errors.Is must hold for each
		status    int     // the HTTPError's status, if any
		remote    string  // in the RemoteError's message, if any
		temporary bool
	}{
		{name: "server down", url: down.URL("tenant.git"), status: 503, temporary: true},
		{name: "connection refused", url: closed.URL + "/r.git", temporary: true},
		{name: "missing repository", url: s.URL("missing.git"), status: 404},
		{name: "sha256 repository", url: s.URL("sha256.git"), is: []error{ErrUnsupported, ErrProtocol}},
		{name: "garbage", url: fakeServer(t, answer("hello, world\n")), is: []error{ErrProtocol}},
		{name: "oversized packet", url: fakeServer(t, answer("fff5")), is: []error{ErrProtocol}},
		{name: "delim in ls-refs", url: fakeServer(t, answer("0001")), is: []error{ErrProtocol}},
		{name: "bad ref line", url: fakeServer(t, answer(pkt("not-a-ref\n")+"0000")), is: []error{ErrProtocol}},
		{name: "wrong content type", url: fakeServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<html>")
		}), is: []error{ErrProtocol}},
		{name: "truncated response", url: fakeServer(t, answer("0032abc")), is: []error{io.ErrUnexpectedEOF}, temporary: true},
		{name: "missing flush", url: fakeServer(t, answer("")), is: []error{io.ErrUnexpectedEOF}, temporary: true},
		{name: "ERR packet", url: fakeServer(t, answer(pkt("ERR access denied"))), remote: "access denied"},
		{name: "html everywhere", url: htmlServer(t), is: []error{ErrUnsupported}},
		{
			name: "canceled", url: s.URL("tenant.git"), is: []error{context.Canceled},
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			},
		},
		{
			name: "deadline while the server stalls",
			url: fakeServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", typeResult)
				fmt.Fprint(w, "0049")
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			}),
			is: []error{context.DeadlineExceeded},
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				t.Cleanup(cancel)
				return ctx
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.ctx != nil {
				ctx = tt.ctx(t)
			}
			_, err := (&Client{URL: tt.url}).LsRefs(ctx, "refs/heads/main")
			if err == nil {
				t.Fatal("LsRefs succeeded")
			}
			t.Logf("error: %v", err)
			for _, target := range tt.is {
				if !errors.Is(err, target) {
					t.Errorf("errors.Is(err, %v) = false", target)
				}
			}
			he, ok := errors.AsType[*HTTPError](err)
			if tt.status != 0 && (!ok || he.StatusCode != tt.status) {
				t.Errorf("want an HTTPError with status %d", tt.status)
			}
			if tt.status == 0 && ok {
				t.Errorf("unexpected HTTPError %v", he)
			}
			re, ok := errors.AsType[*RemoteError](err)
			if tt.remote != "" && (!ok || !strings.Contains(re.Message, tt.remote)) {
				t.Errorf("want a RemoteError with %q", tt.remote)
			}
			if got := Temporary(err); got != tt.temporary {
				t.Errorf("Temporary = %v, want %v", got, tt.temporary)
			}
		})
	}
}

// htmlServer answers everything with a web page, as a misconfigured proxy
// or a wrong URL does.
func htmlServer(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<html><body>Sign in</body></html>")
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/r.git"
}

// TestServerRecovers is the poller's view: a failure while the server is
// down is temporary, and the same Client works once it is back.
func TestServerRecovers(t *testing.T) {
	f := newFixture(t, 3)
	c := &Client{URL: f.url}
	ctx := context.Background()
	f.srv.Down()
	if _, err := c.LsRefs(ctx, string(installRef(1))); !Temporary(err) {
		t.Fatalf("LsRefs while down: %v, want a temporary error", err)
	}
	if _, err := c.Fetch(ctx, memory.NewStorage(), []plumbing.Hash{f.commits[1]}, nil); !Temporary(err) {
		t.Fatalf("Fetch while down: %v, want a temporary error", err)
	}
	f.srv.Up()
	refs, err := c.LsRefs(ctx, string(installRef(1)))
	if err != nil {
		t.Fatal(err)
	}
	if refs[installRef(1)] != f.commits[1] {
		t.Errorf("%s = %s, want %s", installRef(1), refs[installRef(1)], f.commits[1])
	}
}

func TestAuth(t *testing.T) {
	f := newFixture(t, 1)
	backend, err := url.Parse(f.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: backend.Scheme, Host: backend.Host})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, pass, ok := r.BasicAuth(); !ok || user != "agent" || pass != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	repo := srv.URL + backend.Path
	ctx := context.Background()

	_, err = (&Client{URL: repo}).LsRefs(ctx, "refs/heads/main")
	if he, ok := errors.AsType[*HTTPError](err); !ok || he.StatusCode != 401 || Temporary(err) {
		t.Errorf("LsRefs without credentials: %v, want a permanent HTTP 401", err)
	}

	calls := 0
	c := &Client{URL: repo, Discover: true, Auth: func(r *http.Request) { calls++; r.SetBasicAuth("agent", "s3cret") }}
	for range 2 {
		if refs, err := c.LsRefs(ctx, "refs/heads/main"); err != nil || refs["refs/heads/main"] != f.commits[1] {
			t.Fatalf("LsRefs with Auth = %v, %v", refs, err)
		}
	}
	if calls != 3 {
		t.Errorf("Auth called %d times, want 3 (a GET and two POSTs)", calls)
	}

	u, _ := url.Parse(repo)
	u.User = url.UserPassword("agent", "s3cret")
	if _, err := (&Client{URL: u.String()}).LsRefs(ctx, "refs/heads/main"); err != nil {
		t.Errorf("LsRefs with credentials in the URL: %v", err)
	}
	u.User = url.UserPassword("agent", "wrong-s3cret")
	_, err = (&Client{URL: u.String()}).LsRefs(ctx, "refs/heads/main")
	if err == nil || strings.Contains(err.Error(), "wrong-s3cret") {
		t.Errorf("LsRefs with a wrong password in the URL: %v, want an error without the password", err)
	}
}

func TestBadURL(t *testing.T) {
	for _, u := range []string{"ssh://example.com/r.git", "file:///tmp/r.git", "http://example.com/r.git?x=1", "::"} {
		if _, err := (&Client{URL: u}).LsRefs(context.Background()); err == nil || Temporary(err) {
			t.Errorf("LsRefs on %q: %v, want a permanent error", u, err)
		}
	}
}

// pkt encodes s as one data packet.
func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

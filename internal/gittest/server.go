package gittest

import (
	"bytes"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// HTTPBackend is where Debian's git package installs the smart-HTTP server.
const HTTPBackend = "/usr/lib/git-core/git-http-backend"

// Server is git's http-backend serving every repository under Root over
// loopback HTTP. Pushes are allowed. It counts requests and bytes sent.
type Server struct {
	// Root holds the served repositories; a repository at Root/NAME is
	// reached at URL(NAME).
	Root string

	srv      *httptest.Server
	requests atomic.Int64
	bytes    atomic.Int64
	reqBytes atomic.Int64
	down     atomic.Bool
	// auth, if set, is the Authorization header every request must carry.
	auth atomic.Pointer[string]

	mu  sync.Mutex
	log []Request
}

// Request is one request the server answered.
type Request struct {
	Method, Path, Query string
	Status              int
	Bytes               int64
}

// NewServer starts a smart-HTTP git server on loopback; it stops when the
// test ends.
func NewServer(tb testing.TB) *Server {
	tb.Helper()
	if _, err := os.Stat(HTTPBackend); err != nil {
		tb.Fatalf("git http-backend: %v", err)
	}
	s := &Server{Root: tb.TempDir()}
	backend := &cgi.Handler{
		Path: HTTPBackend,
		Env: []string{
			"GIT_PROJECT_ROOT=" + s.Root,
			"GIT_HTTP_EXPORT_ALL=1",
		},
		InheritEnv: []string{"PATH", "HOME"},
	}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.down.Load() {
			http.Error(w, "server is down", http.StatusServiceUnavailable)
			return
		}
		if want := s.auth.Load(); want != nil && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(*want)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			s.requests.Add(1)
			s.mu.Lock()
			s.log = append(s.log, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Status: http.StatusUnauthorized})
			s.mu.Unlock()
			return
		}
		cw := &countingWriter{ResponseWriter: w, status: http.StatusOK}
		r.Body = &countingBody{ReadCloser: r.Body, n: &s.reqBytes}
		// git-http-backend reads the protocol version from GIT_PROTOCOL; the
		// CGI handler passes request headers as HTTP_* only.
		h := backend
		if v := r.Header.Get("Git-Protocol"); v != "" {
			hh := *backend
			hh.Env = append(append([]string(nil), backend.Env...), "GIT_PROTOCOL="+v)
			h = &hh
		}
		h.ServeHTTP(cw, r)
		s.requests.Add(1)
		s.bytes.Add(cw.n)
		s.mu.Lock()
		s.log = append(s.log, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Status: cw.status, Bytes: cw.n})
		s.mu.Unlock()
	}))
	tb.Cleanup(s.srv.Close)
	return s
}

// URL is the address of the repository Root/name.
func (s *Server) URL(name string) string { return s.srv.URL + "/" + name }

// RequireToken makes the server answer 401 to every request without
// "Authorization: Bearer token".
func (s *Server) RequireToken(token string) {
	h := "Bearer " + token
	s.auth.Store(&h)
}

// RequireBasic makes the server answer 401 to every request without basic
// auth as user with password.
func (s *Server) RequireBasic(user, password string) {
	h := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
	s.auth.Store(&h)
}

// Down makes every request fail with 503 until Up is called.
func (s *Server) Down() { s.down.Store(true) }

// Up undoes Down.
func (s *Server) Up() { s.down.Store(false) }

// Requests is the number of requests answered since the last Reset.
func (s *Server) Requests() int64 { return s.requests.Load() }

// Bytes is the number of response body bytes sent since the last Reset.
func (s *Server) Bytes() int64 { return s.bytes.Load() }

// RequestBytes is the number of request body bytes received since the
// last Reset.
func (s *Server) RequestBytes() int64 { return s.reqBytes.Load() }

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	k, err := b.ReadCloser.Read(p)
	b.n.Add(int64(k))
	return k, err
}

// Log returns the requests answered since the last Reset.
func (s *Server) Log() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.log...)
}

// Reset zeroes the counters.
func (s *Server) Reset() {
	s.requests.Store(0)
	s.bytes.Store(0)
	s.reqBytes.Store(0)
	s.mu.Lock()
	s.log = nil
	s.mu.Unlock()
}

// InitBare makes a bare repository Root/name that accepts pushes and
// returns its path.
func (s *Server) InitBare(tb testing.TB, name string) string {
	tb.Helper()
	dir := filepath.Join(s.Root, name)
	InitBare(tb, dir)
	Git(tb, dir, "config", "http.receivepack", "true")
	return dir
}

type countingWriter struct {
	http.ResponseWriter
	n      int64
	status int
}

func (w *countingWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

func (w *countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// InitBare makes a bare repository at dir with main as its default branch.
func InitBare(tb testing.TB, dir string) {
	tb.Helper()
	Git(tb, "", "init", "--quiet", "--bare", "--initial-branch=main", dir)
}

// Git runs the git CLI in dir with a fixed identity and returns its
// trimmed standard output; the test fails if git does.
func Git(tb testing.TB, dir string, args ...string) string {
	tb.Helper()
	out, err := Run(dir, nil, args...)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	return out
}

// Run is Git without a test: it returns git's error with its stderr.
func Run(dir string, stdin []byte, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=nuon test", "GIT_AUTHOR_EMAIL=test@nuon.invalid",
		"GIT_COMMITTER_NAME=nuon test", "GIT_COMMITTER_EMAIL=test@nuon.invalid",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
		"GIT_CONFIG_NOSYSTEM=1", "HOME="+os.TempDir(),
	)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// CommitDir commits the files under src as the whole tree of branch in the
// repository at repo (bare or not), on top of the branch's current commit if
// it has one, and returns the new commit id.
func CommitDir(tb testing.TB, repo, branch, src, message string) string {
	tb.Helper()
	idx := filepath.Join(tb.TempDir(), "index")
	gitDir := Git(tb, repo, "rev-parse", "--absolute-git-dir")
	env := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = src
		cmd.Env = append(os.Environ(),
			"GIT_INDEX_FILE="+idx, "GIT_WORK_TREE="+src, "GIT_DIR="+gitDir,
			"GIT_AUTHOR_NAME=nuon test", "GIT_AUTHOR_EMAIL=test@nuon.invalid",
			"GIT_COMMITTER_NAME=nuon test", "GIT_COMMITTER_EMAIL=test@nuon.invalid",
			"GIT_CONFIG_NOSYSTEM=1", "HOME="+os.TempDir(),
		)
		out, err := cmd.CombinedOutput()
		if err != nil {
			tb.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	env("add", "--all", ".")
	tree := env("write-tree")
	args := []string{"commit-tree", tree, "-m", message}
	if parent, err := Run(gitDir, nil, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch); err == nil && parent != "" {
		args = append(args, "-p", parent)
	}
	commit := env(args...)
	env("update-ref", "refs/heads/"+branch, commit)
	return commit
}

// FastImport commits files (path to content) on branch of the repository
// dir with git fast-import, on top of parent (a commit id; "" for a root
// commit, whose tree is then files alone), and returns the new commit id.
// Only the files given change: it writes 100,000 files in seconds where
// CommitDir would stage them one by one. Fewer than 100 objects are
// written loose, as git fetch writes a small change.
func FastImport(tb testing.TB, dir, branch, parent string, when time.Time, files map[string][]byte) string {
	tb.Helper()
	names := slices.Sorted(maps.Keys(files))
	var s bytes.Buffer
	fmt.Fprintf(&s, "commit %s\ncommitter nuon test <test@nuon.invalid> %d +0000\ndata 7\nsource\n", branch, when.Unix())
	if parent != "" {
		fmt.Fprintf(&s, "from %s\n", parent)
	}
	for _, name := range names {
		fmt.Fprintf(&s, "M 100644 inline %s\ndata %d\n", name, len(files[name]))
		s.Write(files[name])
		s.WriteByte('\n')
	}
	s.WriteString("\ndone\n")
	if _, err := Run(dir, s.Bytes(), "fast-import", "--quiet", "--done", "--force"); err != nil {
		tb.Fatal(err)
	}
	return Git(tb, dir, "rev-parse", branch)
}

// Files reads every file under dir, path (slash-separated, relative to
// dir) to content: a tree as FastImport takes it.
func Files(tb testing.TB, dir string) map[string][]byte {
	tb.Helper()
	files := map[string][]byte{}
	err := fs.WalkDir(os.DirFS(dir), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files[p], err = os.ReadFile(filepath.Join(dir, p))
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return files
}

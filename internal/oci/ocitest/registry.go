// Package ocitest runs OCI registries for tests: Debian's docker-registry
// (CNCF Distribution 2.8) as a real server on a loopback port, with TLS
// and basic auth as ECR has them, and go-containerregistry's in-process
// registry for quick unit tests.
package ocitest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/registry"

	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/testenv"
)

// Binary is the registry server Start runs; `make registry` installs it.
const Binary = "docker-registry"

// Options configure Start.
type Options struct {
	// TLS serves HTTPS with a self-signed certificate for 127.0.0.1.
	TLS bool
	// Username and Password, when set, require basic auth (htpasswd).
	Username, Password string
}

// Registry is a running docker-registry.
type Registry struct {
	// Host is 127.0.0.1:PORT.
	Host string
	// CAFile, CertFile and KeyFile are set with TLS; CAFile is the
	// self-signed certificate itself.
	CAFile, CertFile, KeyFile string
	Username, Password        string
	// Dir is the storage root.
	Dir string

	t      testing.TB
	config string
	stderr *syncBuffer

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	lines   []string
	markers int
}

// Require reports each tool that is not installed with testenv.Missing:
// the test is skipped, or fails in CI, where every real part must run.
func Require(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, "%s is not installed: run `make registry`", tool)
		}
	}
}

// Start runs docker-registry on a free loopback port until the test ends.
func Start(t testing.TB, o Options) *Registry {
	t.Helper()
	tools := []string{Binary}
	if o.TLS {
		tools = append(tools, "openssl")
	}
	if o.Username != "" {
		tools = append(tools, "htpasswd")
	}
	Require(t, tools...)
	dir := t.TempDir()
	r := &Registry{t: t, Dir: filepath.Join(dir, "data"), Username: o.Username, Password: o.Password, stderr: &syncBuffer{}}
	if o.TLS {
		r.CertFile, r.KeyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
		r.CAFile = r.CertFile
		run(t, "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
			"-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
			"-keyout", r.KeyFile, "-out", r.CertFile)
	}
	htpasswd := ""
	if o.Username != "" {
		htpasswd = filepath.Join(dir, "htpasswd")
		out := run(t, "htpasswd", "-Bbn", o.Username, o.Password)
		if err := os.WriteFile(htpasswd, out, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		r.Host = freePort(t)
		r.config = filepath.Join(dir, "config.yml")
		if err := os.WriteFile(r.config, []byte(r.configFile(htpasswd)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err = r.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("start %s: %v\n%s", Binary, err, r.stderr.String())
	}
	t.Cleanup(r.Stop)
	return r
}

func (r *Registry) configFile(htpasswd string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `version: 0.1
log:
  level: error
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %s
  secret: ocitest
`, r.Dir, r.Host)
	if r.CertFile != "" {
		fmt.Fprintf(&b, "  tls:\n    certificate: %s\n    key: %s\n", r.CertFile, r.KeyFile)
	}
	if htpasswd != "" {
		fmt.Fprintf(&b, "auth:\n  htpasswd:\n    realm: ocitest\n    path: %s\n", htpasswd)
	}
	return b.String()
}

// start runs the server and waits until it answers.
func (r *Registry) start() error {
	cmd := exec.Command(Binary, "serve", r.config)
	cmd.Stderr = r.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		// The access log: one line per request, written as it completes.
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			r.mu.Lock()
			r.lines = append(r.lines, sc.Text())
			r.mu.Unlock()
		}
		_ = cmd.Wait()
		close(done)
	}()
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	client := r.httpClient()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return errors.New("the server exited")
		default:
		}
		resp, err := client.Get(r.URL() + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.Stop()
	return errors.New("the server did not answer within 10s")
}

// Stop kills the server; Restart starts it again with the same storage.
func (r *Registry) Stop() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart starts a stopped server again on the same port and storage.
func (r *Registry) Restart(t testing.TB) {
	t.Helper()
	if err := r.start(); err != nil {
		t.Fatalf("restart %s: %v\n%s", Binary, err, r.stderr.String())
	}
}

// URL is the registry's base URL.
func (r *Registry) URL() string {
	if r.CertFile != "" {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

// RootCAs holds the registry's certificate (nil without TLS).
func (r *Registry) RootCAs() *x509.CertPool {
	if r.CAFile == "" {
		return nil
	}
	pem, err := os.ReadFile(r.CAFile)
	if err != nil {
		r.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return pool
}

func (r *Registry) httpClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: r.RootCAs()}
	return &http.Client{Transport: t, Timeout: 5 * time.Second}
}

// Auth is the registry's credentials (anonymous without them).
func (r *Registry) Auth() authn.Authenticator {
	if r.Username == "" {
		return authn.Anonymous
	}
	return &authn.Basic{Username: r.Username, Password: r.Password}
}

// ClientOptions trust the registry's certificate and use its credentials.
func (r *Registry) ClientOptions() []oci.ClientOption {
	opts := []oci.ClientOption{oci.WithKeychain(authn.NewMultiKeychain()), oci.WithAuth(r.Host, r.Auth())}
	if r.CAFile != "" {
		opts = append(opts, oci.WithCAFile(r.CAFile))
	}
	return opts
}

var requestLine = regexp.MustCompile(`"(GET|HEAD|POST|PUT|PATCH|DELETE) (/v2/[^ ]*) HTTP`)

// Requests returns the requests the registry served since the last call
// (or since it started), as "METHOD PATH" lines from its access log. It
// first sends a marker request and waits for it in the log, so every
// request answered before the call is counted.
func (r *Registry) Requests(t testing.TB) []string {
	t.Helper()
	r.mu.Lock()
	r.markers++
	marker := fmt.Sprintf("/v2/ocitest-marker-%d/tags/list", r.markers)
	r.mu.Unlock()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, r.URL()+marker, nil)
	if r.Username != "" {
		req.SetBasicAuth(r.Username, r.Password)
	}
	resp, err := r.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		for i, l := range r.lines {
			if strings.Contains(l, marker) {
				var out []string
				for _, l := range r.lines[:i] {
					if m := requestLine.FindStringSubmatch(l); m != nil && !strings.Contains(m[2], "/ocitest-marker-") {
						out = append(out, m[1]+" "+m[2])
					}
				}
				r.lines = slices.Clone(r.lines[i+1:])
				r.mu.Unlock()
				return out
			}
		}
		r.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("%s: the marker request did not reach the access log", r.Host)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// InProcess serves go-containerregistry's in-memory registry on loopback
// until the test ends and returns its host.
func InProcess(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func run(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, stderr.String())
	}
	return out
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

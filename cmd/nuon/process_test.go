package main

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/testenv"
)

// The tests that run the binaries as long-lived processes (nuon server,
// nuon-agent without --once) start them with these helpers, which stop
// them when the test ends.

// lockedBuffer collects a process's output while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startProcess starts a binary; it is stopped when the test ends.
func startProcess(tb testing.TB, env []string, bin string, args ...string) (*exec.Cmd, *lockedBuffer) {
	tb.Helper()
	out := &lockedBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { stopProcess(cmd) })
	return cmd, out
}

// stopProcess stops a process group started by startProcess: SIGTERM,
// then SIGKILL.
func stopProcess(cmd *exec.Cmd) {
	if cmd.ProcessState != nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

func freeAddr(tb testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitFor(tb testing.TB, what string, d time.Duration, logs func() string, ok func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s\n%s", what, logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func httpStatus(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// nuonServer is a `nuon server` process started by startServer.
type nuonServer struct {
	url  string        // http://127.0.0.1:PORT, where it listens
	log  *lockedBuffer // its standard output and error
	cmd  *exec.Cmd
	bin  string
	env  []string
	args []string // "server" and its flags, --listen included
}

// startServer starts bin as `nuon server` with flags, listening on a free
// loopback address, with env added to this process's environment. It
// does not wait for the server: see waitReady. The server is stopped when
// the test ends, or earlier by stop.
func startServer(tb testing.TB, bin string, env []string, flags ...string) *nuonServer {
	tb.Helper()
	addr := freeAddr(tb)
	args := append(append([]string{"server"}, flags...), "--listen", addr)
	return serverProcess(tb, bin, env, args, "http://"+addr)
}

func serverProcess(tb testing.TB, bin string, env, args []string, url string) *nuonServer {
	tb.Helper()
	cmd, log := startProcess(tb, env, bin, args...)
	return &nuonServer{url: url, log: log, cmd: cmd, bin: bin, env: env, args: args}
}

// restart starts another `nuon server` with the same flags on the same
// address, once this one is stopped.
func (s *nuonServer) restart(tb testing.TB) *nuonServer {
	tb.Helper()
	return serverProcess(tb, s.bin, s.env, s.args, s.url)
}

// stop stops the server: SIGTERM, then SIGKILL.
func (s *nuonServer) stop() { stopProcess(s.cmd) }

// pid is the server's process id.
func (s *nuonServer) pid() int { return s.cmd.Process.Pid }

// ready tells whether the server's /readyz answers 200 OK.
func (s *nuonServer) ready() bool { return httpStatus(s.url+"/readyz") == http.StatusOK }

// waitReady waits up to d until the server is ready; the test fails with
// the server's log if it is not.
func (s *nuonServer) waitReady(tb testing.TB, d time.Duration) {
	tb.Helper()
	waitFor(tb, "nuon server at "+s.url+" to be ready", d, s.log.String, s.ready)
}

// serverTenant is the sample tenant (fixtures/tenant) on main of a bare
// repository, for the tests that run nuon server in front of it and
// nuon-agent behind the server.
type serverTenant struct {
	repo  string   // the bare tenant repository
	src   string   // the tree committed as main: change it and commit it again with gittest.CommitDir
	work  string   // the test's folder; the agents' workdirs are in it
	keys  string   // fixtures/keys
	trust string   // allowed_signers that trusts the renderer's key
	env   []string // the binaries' environment: terraform's CLI config, the license secret
	nuon  string   // the nuon binary
	agent string   // the nuon-agent binary
}

// newServerTenant builds the binaries and commits the sample tenant. It
// needs terraform (testenv.TerraformConfig).
func newServerTenant(t testing.TB) *serverTenant {
	t.Helper()
	st := &serverTenant{
		work:  t.TempDir(),
		keys:  filepath.Join(repoRoot(), "fixtures", "keys"),
		env:   e2eEnv(t),
		nuon:  nuonBinary(t),
		agent: agentBinary(t),
	}
	st.repo = filepath.Join(st.work, "tenant.git")
	gittest.InitBare(t, st.repo)
	st.src, st.trust = commitTenant(t, st.repo, nil)
	return st
}

// commitTenant copies the sample tenant into a folder of its own, lets
// edit (when not nil) change it there, commits it as main of the bare
// repository at bare, and returns the folder and an allowed_signers file
// that trusts the renderer's key.
func commitTenant(tb testing.TB, bare string, edit func(src string)) (src, trust string) {
	tb.Helper()
	root := repoRoot()
	src = tb.TempDir()
	if err := os.CopyFS(src, os.DirFS(filepath.Join(root, "fixtures", "tenant"))); err != nil {
		tb.Fatal(err)
	}
	if edit != nil {
		edit(src)
	}
	gittest.CommitDir(tb, bare, "main", src, "shop")
	trust = filepath.Join(tb.TempDir(), "allowed_signers")
	pub, err := os.ReadFile(filepath.Join(root, "fixtures", "keys", "render.pub"))
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(trust, []byte("renderer "+string(pub)), 0o644); err != nil {
		tb.Fatal(err)
	}
	return src, trust
}

// e2eEnv is the binaries' environment in end-to-end tests: terraform's
// CLI configuration (testenv.TerraformConfig, which it needs) and the
// license secret the sample tenant's database reads.
func e2eEnv(tb testing.TB) []string {
	tb.Helper()
	return []string{"TF_CLI_CONFIG_FILE=" + testenv.TerraformConfig(tb), "NUON_SECRET_LICENSE_KEY=e2e-license-77", "CHECKPOINT_DISABLE=1"}
}

// startServer starts nuon server on the tenant repository, rendering with
// fixtures/keys/render and polling main every 200ms, with flags added.
func (st *serverTenant) startServer(t *testing.T, flags ...string) *nuonServer {
	t.Helper()
	return startServer(t, st.nuon, st.env, append([]string{"--repo", st.repo, "--render-key", filepath.Join(st.keys, "render"),
		"--poll-interval", "200ms"}, flags...)...)
}

// startAgent starts nuon-agent for install id against srv, with signed
// requests (--server-auth), its key fixtures/keys/ID, the fixture modules'
// artifacts unverified and a 500ms interval, with flags added; it returns
// the agent's output.
func (st *serverTenant) startAgent(t *testing.T, srv *nuonServer, id string, flags ...string) *lockedBuffer {
	t.Helper()
	_, log := startProcess(t, st.env, st.agent, append([]string{"agent", "--server-auth",
		"--repo", srv.url + "/tenant.git", "--install", id, "--trust", st.trust,
		"--key", filepath.Join(st.keys, id), "--workdir", filepath.Join(st.work, id),
		"--artifacts", fixtureLayout(t), "--insecure-skip-artifact-verification",
		"--interval", "500ms"}, flags...)...)
	return log
}

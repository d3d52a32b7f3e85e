package main

import (
	"bytes"
	"net"
	"net/http"
	"nuon.dev/nuon/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

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
func startProcess(t *testing.T, env []string, bin string, args ...string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	out := &lockedBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopProcess(cmd) })
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

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitFor(t *testing.T, what string, d time.Duration, logs func() string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\n%s", what, logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestServerDownIsHarmless runs the real binaries: nuon server in front of
// the tenant repository and nuon-agent for acme talking only to it, with
// signed requests. The agent applies and reports through the server; with
// the server stopped it keeps running, backs off and loses nothing; when
// the server returns with a new main it catches up.
func TestServerDownIsHarmless(t *testing.T) {
	tf := testenv.TerraformConfig(t)
	root := repoRoot()
	keys := filepath.Join(root, "fixtures", "keys")
	nuonBin, agentBin := nuonBinary(t), agentBinary(t)
	work := t.TempDir()
	repo := filepath.Join(work, "tenant.git")
	gittest.InitBare(t, repo)
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS(filepath.Join(root, "fixtures", "tenant"))); err != nil {
		t.Fatal(err)
	}
	gittest.CommitDir(t, repo, "main", src, "shop")
	trust := filepath.Join(work, "allowed_signers")
	pub, _ := os.ReadFile(filepath.Join(keys, "render.pub"))
	if err := os.WriteFile(trust, []byte("renderer "+string(pub)), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"TF_CLI_CONFIG_FILE=" + tf, "NUON_SECRET_LICENSE_KEY=e2e-license-77", "CHECKPOINT_DISABLE=1"}
	addr := freeAddr(t)
	serverArgs := []string{"server", "--repo", repo, "--render-key", filepath.Join(keys, "render"), "--listen", addr, "--poll-interval", "200ms"}
	srv, srvLog := startProcess(t, env, nuonBin, serverArgs...)
	status := schemas.StatusRef("acme")
	ref := func(name string) string {
		out, _ := gittest.Run(repo, nil, "rev-parse", "--verify", "--quiet", name)
		return out
	}
	waitFor(t, "the first render", 30*time.Second, srvLog.String, func() bool { return ref(schemas.InstallRef("acme")) != "" })

	_, agentLog := startProcess(t, env, agentBin, "agent", "--server-auth",
		"--repo", "http://"+addr+"/tenant.git", "--install", "acme", "--trust", trust,
		"--key", filepath.Join(keys, "acme"), "--workdir", filepath.Join(work, "acme"),
		"--artifacts", filepath.Join(root, "fixtures", "modules"),
		"--interval", "500ms", "--max-backoff", "2s")
	logs := func() string { return "server:\n" + srvLog.String() + "\nagent:\n" + agentLog.String() }
	generation := func() string {
		out, _ := gittest.Run(repo, nil, "log", "-1", "--format=%(trailers:key="+schemas.TrailerGeneration+",valueonly)", status)
		return strings.TrimSpace(out)
	}
	waitFor(t, "acme's first status through the server", 3*time.Minute, logs, func() bool { return generation() == "1" })

	// The server goes away.
	stopProcess(srv)
	applied := ref(status)
	before := len(agentLog.String())
	time.Sleep(5 * time.Second)
	if strings.Contains(agentLog.String()[before:], `"phase":"Deleting"`) || ref(status) != applied {
		t.Fatalf("something changed while the server was down\n%s", logs())
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Fatal("server still answers")
	}
	// The agent is still running and retrying.
	if n := strings.Count(agentLog.String()[before:], "connection refused"); n < 2 {
		t.Fatalf("agent retried %d times in 5s with the server down\n%s", n, logs())
	}

	// A promotion lands on main while the server is down; it returns.
	stable := filepath.Join(src, "channels", "stable.yaml")
	b, _ := os.ReadFile(stable)
	if err := os.WriteFile(stable, bytes.Replace(b, []byte("database: 1.0.0"), []byte("database: 1.1.0"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.CommitDir(t, repo, "main", src, "promote database")
	_, srvLog2 := startProcess(t, env, nuonBin, serverArgs...)
	logs = func() string { return "server:\n" + srvLog2.String() + "\nagent:\n" + agentLog.String() }
	waitFor(t, "acme to catch up to generation 2", 3*time.Minute, logs, func() bool { return generation() == "2" })
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/builder/buildreq"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// addBuildAgent makes a second build agent's key, build-agent-2, and
// lists it in trust/build-agents on the tenant's main.
func (w *buildAgentWorld) addBuildAgent(t *testing.T) string {
	t.Helper()
	key := filepath.Join(t.TempDir(), "build-agent-2")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "build-agent-2", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(t.TempDir(), "work")
	gittest.Git(t, "", "clone", "--quiet", w.tenant, work)
	f, err := os.OpenFile(filepath.Join(work, schemas.BuildAgentTrustFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("build-agent-2 " + strings.Join(strings.Fields(string(pub))[:2], " ") + "\n")
	f.Close()
	gittest.Git(t, work, "commit", "--quiet", "-am", "trust build-agent-2")
	gittest.Git(t, work, "push", "--quiet", "origin", "main")
	return key
}

// status reads a request's state from the server as vendor CI.
func (w *buildAgentWorld) status(url, id string) *schemas.BuildStatus {
	st, err := buildreq.NewClient(url, w.ci).Status(context.Background(), id, 0)
	if err != nil {
		return nil
	}
	return st
}

// TestBuildRemoteDurable runs the queue's promises as processes: a build
// agent killed mid-build → its lease runs out and another agent finishes
// the request, released once; requests queued when the server is killed →
// the restarted server keeps them, nuon build --remote reconnects, they
// complete; a request id filed before → refused after the restart too.
// durableLease is TestBuildRemoteDurable's build lease: short, so that a
// killed agent's request is queued again within seconds, and long enough
// that a live agent's renewals (every third of it) are not missed on a
// machine loaded by parallel fuzzing, which took a 2 s lease from an
// agent still checking out.
const durableLease = "5s"

func TestBuildRemoteDurable(t *testing.T) {
	w := newBuildAgentWorld(t)
	keys := filepath.Join(repoRoot(), "fixtures", "keys")
	key2 := w.addBuildAgent(t)
	env := append(e2eEnv(t), "COSIGN_PASSWORD=")
	srv := startServer(t, w.agent.Exe, env, "--repo", w.tenant, "--render-key", filepath.Join(keys, "render"), "--poll-interval", "200ms")
	srv.waitReady(t, 30*time.Second)
	agentArgs := func(key string, extra ...string) []string {
		return append([]string{"build-agent", "--server", srv.url, "--key", key, "--repo", w.tenant,
			"--cosign-key", filepath.Join(keys, "cosign.key"), "--work-dir", t.TempDir(), "--lease", durableLease}, extra...)
	}
	remote := func(id, component, version string) (*exec.Cmd, *lockedBuffer) {
		return startProcess(t, env, w.agent.Exe, "build", "--remote", "--server", srv.url, "--key", filepath.Join(keys, "ci"),
			"--source-repository", w.source, "--ref", "refs/heads/main", "--requester", "vendor-ci", "--version", version,
			component, "--commit", w.commit, "--request-id", id)
	}
	wait := func(cmd *exec.Cmd, out *lockedBuffer, what string) string {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v\n%s\nserver:\n%s", what, err, out.String(), srv.log.String())
			}
		case <-time.After(3 * time.Minute):
			t.Fatalf("%s did not finish\n%s\nserver:\n%s", what, out.String(), srv.log.String())
		}
		return out.String()
	}

	// 1. The first agent's builds hang in the build (a wrapper that
	// sleeps before nuon build); it dies there, and with it the build.
	pidFile := filepath.Join(t.TempDir(), "build.pid")
	wrapper := filepath.Join(t.TempDir(), "slow-nuon")
	os.WriteFile(wrapper, []byte("#!/bin/sh\necho $$ > "+pidFile+"\nsleep 60\nexec "+w.agent.Exe+" \"$@\"\n"), 0o755)
	agent1, agent1Log := startProcess(t, env, w.agent.Exe, agentArgs(filepath.Join(keys, "build-agent"), "--build-exe", wrapper)...)
	cmd, out := remote("slow-1", "network", "7.0.0")
	waitFor(t, "build-agent-1 to build slow-1", time.Minute, agent1Log.String, func() bool {
		st := w.status(srv.url, "slow-1")
		return st != nil && st.Agent == "build-agent-1" && st.Phase == builder.PhaseBuild
	})
	syscall.Kill(-agent1.Process.Pid, syscall.SIGKILL)
	if data, err := os.ReadFile(pidFile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	agent1.Wait()
	start := time.Now()
	agent2, agent2Log := startProcess(t, env, w.agent.Exe, agentArgs(key2)...)
	text := wait(cmd, out, "nuon build --remote slow-1")
	t.Logf("agent killed mid-build → released by another agent: %s\n%s", time.Since(start), text)
	for _, want := range []string{"taken by build-agent-1 (attempt 1)", "taken by build-agent-1 (attempt 1), building: build",
		"the lease of build agent build-agent-1 ", "taken by build-agent-2 (attempt 2)", "released by build-agent-2 in"} {
		if !strings.Contains(text, want) {
			t.Errorf("nuon build --remote did not say %q:\n%s\nagent 2:\n%s", want, text, agent2Log.String())
		}
	}
	if n := strings.Count(gittest.Git(t, w.tenant, "log", "--format=%H", "--grep", buildreq.TrailerBuildRequest+": slow-1", "main"), "\n") + 1; n != 1 {
		t.Errorf("slow-1 released %d times", n)
	}
	if rel := gittest.Git(t, w.tenant, "show", "main:releases/network.yaml"); !strings.Contains(rel, "7.0.0") {
		t.Errorf("releases/network.yaml lacks 7.0.0:\n%s", rel)
	}

	// 2. No agent: requests wait in the queue while the server is killed
	// and started again.
	stopProcess(agent2)
	comps := []string{"database", "api", "dashboards"}
	cmds := map[string]*exec.Cmd{}
	outs := map[string]*lockedBuffer{}
	for _, c := range comps {
		cmds[c], outs[c] = remote("dur-"+c, c, "7.1.0")
	}
	waitFor(t, "the requests to be queued", time.Minute, srv.log.String, func() bool {
		for _, c := range comps {
			if st := w.status(srv.url, "dur-"+c); st == nil || st.State != schemas.BuildQueued {
				return false
			}
		}
		return true
	})
	syscall.Kill(-srv.pid(), syscall.SIGKILL)
	srv.cmd.Wait()
	time.Sleep(1500 * time.Millisecond) // the clients notice
	srv = srv.restart(t)
	srv.waitReady(t, 30*time.Second)
	for _, c := range comps {
		if st := w.status(srv.url, "dur-"+c); st == nil || st.State != schemas.BuildQueued {
			t.Errorf("dur-%s after the restart: %+v", c, st)
		}
	}
	// The same id again: refused, as before the restart.
	dup := exec.Command(w.agent.Exe, "build", "--remote", "--server", srv.url, "--key", filepath.Join(keys, "ci"),
		"--source-repository", w.source, "--ref", "refs/heads/main", "--requester", "vendor-ci", "--version", "7.1.1",
		"database", "--commit", w.commit, "--request-id", "dur-database")
	dup.Env = append(os.Environ(), env...)
	if out, err := dup.CombinedOutput(); err == nil || !strings.Contains(string(out), "replay") {
		t.Errorf("a duplicate request id after the restart: %v\n%s", err, out)
	}
	start = time.Now()
	startProcess(t, env, w.agent.Exe, agentArgs(key2, "--parallel", "3")...)
	for _, c := range comps {
		text := wait(cmds[c], outs[c], "nuon build --remote dur-"+c)
		for _, want := range []string{"queued", "lost the server", "the server is back", "released by build-agent-2 in"} {
			if !strings.Contains(text, want) {
				t.Errorf("nuon build --remote dur-%s did not say %q:\n%s", c, want, text)
			}
		}
		if rel := gittest.Git(t, w.tenant, "show", "main:releases/"+c+".yaml"); !strings.Contains(rel, "7.1.0") {
			t.Errorf("releases/%s.yaml lacks 7.1.0", c)
		}
	}
	t.Logf("3 requests queued across a server restart → released: %s", time.Since(start))
}

// BenchmarkBuildQueue measures a build request filed with nuon server to
// its answer with the release commit, through the durable queue, with
// nuon server and nuon build-agent (--parallel 5) as processes: one
// component, and every component of the sample app filed at once. Each
// iteration releases a new version; -benchtime=1x gives the cold figure.
func BenchmarkBuildQueue(b *testing.B) {
	w := newBuildAgentWorld(b)
	keys := filepath.Join(repoRoot(), "fixtures", "keys")
	env := append(e2eEnv(b), "COSIGN_PASSWORD=")
	srv := startServer(b, w.agent.Exe, env, "--repo", w.tenant, "--render-key", filepath.Join(keys, "render"), "--poll-interval", "200ms")
	srv.waitReady(b, 30*time.Second)
	startProcess(b, env, w.agent.Exe, "build-agent", "--server", srv.url, "--key", filepath.Join(keys, "build-agent"), "--repo", w.tenant,
		"--cosign-key", filepath.Join(keys, "cosign.key"), "--work-dir", b.TempDir(), "--parallel", "5")
	c := buildreq.NewClient(srv.url, w.ci)
	ctx := context.Background()
	build := func(id, component, version string) error {
		st, err := c.File(ctx, w.requestVersion(b, id, component, w.commit, version))
		for err == nil && (st.State == schemas.BuildQueued || st.State == schemas.BuildRunning) {
			st, err = c.Status(ctx, id, 10)
		}
		if err == nil && st.State != schemas.BuildSucceeded {
			err = errors.New(id + ": " + st.Error)
		}
		return err
	}
	n := 0
	b.Run("one", func(b *testing.B) {
		for b.Loop() {
			n++
			if err := build(fmt.Sprintf("q-one-%d", n), "network", fmt.Sprintf("8.0.%d", n)); err != nil {
				b.Fatal(err)
			}
		}
	})
	comps := []string{"network", "database", "api", "api-image", "dashboards"}
	b.Run("all-parallel", func(b *testing.B) {
		for b.Loop() {
			n++
			var wg sync.WaitGroup
			errs := make([]error, len(comps))
			for i, comp := range comps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = build(fmt.Sprintf("q-all-%d-%s", n, comp), comp, fmt.Sprintf("9.0.%d", n))
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				b.Fatal(err)
			}
		}
	})
}

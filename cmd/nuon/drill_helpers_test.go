package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// fleet is the rotation drill's running fleet: nuon server in front of
// the sample tenant (main in st.src, keys and the root's versions from
// the drill type of trustroot_e2e_test.go) and one long-running
// nuon-agent per install, each given what `nuon install create` hands an
// install once: its key (DIR/agent.key) and version 1 of the trust root
// (DIR/trust-root.json). Nothing in DIR is written by the drill except by
// `nuon install rotate-key`, whose job it is.
type fleet struct {
	st     *serverTenant
	d      *drill
	addr   string
	srv    *nuonServer
	ids    []string
	agents map[string]*exec.Cmd
	logs   map[string]*lockedBuffer
	layout string
	steps  []drillStep
}

// drillStep is one timed step of the drill, for the note.
type drillStep struct {
	name string
	took time.Duration
}

// dir is an install's own folder: the files it was given at creation.
func (f *fleet) dir(id string) string { return filepath.Join(f.st.work, id+"-dir") }

// serve (re)starts nuon server on the fleet's address, rendering with
// the render key named key; the agents keep their URL.
func (f *fleet) serve(t *testing.T, key string) {
	t.Helper()
	if f.srv != nil {
		f.srv.stop()
	}
	args := []string{"server", "--repo", f.st.repo, "--render-key", f.d.key(key), "--poll-interval", "200ms", "--listen", f.addr}
	f.srv = serverProcess(t, f.st.nuon, f.st.env, args, "http://"+f.addr)
	f.srv.waitReady(t, time.Minute)
}

// restartServer restarts nuon server with the same render key, after
// something moved refs behind its back (an attacker with write access to
// the server's storage: the ref table is read at start).
func (f *fleet) restartServer(t *testing.T) {
	t.Helper()
	f.srv.stop()
	f.srv = f.srv.restart(t)
	f.srv.waitReady(t, time.Minute)
}

// start starts the agent of install id with the files in its folder.
func (f *fleet) start(t *testing.T, id string) {
	t.Helper()
	cmd, log := startProcess(t, f.st.env, f.st.agent, "agent", "--server-auth",
		"--repo", "http://"+f.addr+"/tenant.git", "--install", id,
		"--trust-root", filepath.Join(f.dir(id), "trust-root.json"), "--key", filepath.Join(f.dir(id), "agent.key"),
		"--workdir", filepath.Join(f.st.work, id), "--artifacts", f.layout, "--insecure-skip-artifact-verification",
		"--interval", "1s", "--max-backoff", "2s")
	f.agents[id], f.logs[id] = cmd, log
}

// all is every log of the fleet, for a failure.
func (f *fleet) all() string {
	var b strings.Builder
	b.WriteString("server:\n" + tail(f.srv.log.String(), 60))
	for _, id := range f.ids {
		b.WriteString("\nagent " + id + ":\n" + tail(f.logs[id].String(), 40))
	}
	return b.String()
}

// desired is the tip of install id's desired ref.
func (f *fleet) desired(id string) string {
	out, _ := gittest.Run(f.st.repo, nil, "rev-parse", "--verify", "--quiet", schemas.InstallRef(id))
	return strings.TrimSpace(out)
}

// status reads the status install id's agent last pushed through the
// server (zero before the first).
func (f *fleet) status(id string) schemas.Status {
	var st schemas.Status
	out, err := gittest.Run(f.st.repo, nil, "show", schemas.StatusRef(id)+":"+schemas.StatusFile)
	if err == nil {
		_ = json.Unmarshal([]byte(out), &st)
	}
	return st
}

// converge waits until every install's agent reports its desired ref's
// tip taken, and returns how long that took.
func (f *fleet) converge(t *testing.T, what string, ids ...string) time.Duration {
	t.Helper()
	if len(ids) == 0 {
		ids = f.ids
	}
	start := time.Now()
	for _, id := range ids {
		waitFor(t, id+" to converge: "+what, 5*time.Minute, f.all, func() bool {
			st, want := f.status(id), f.desired(id)
			return want != "" && st.Desired == want && st.Refusal == nil
		})
	}
	return time.Since(start)
}

// step runs one drill step and keeps its time.
func (f *fleet) step(t *testing.T, name string, run func()) {
	t.Helper()
	start := time.Now()
	run()
	took := time.Since(start).Round(100 * time.Millisecond)
	f.steps = append(f.steps, drillStep{name, took})
	t.Logf("drill step %q: %s", name, took)
}

// configHashes hashes every file in each install's folder: what the
// install was given, which a rotation must not need to change.
func (f *fleet) configHashes(t *testing.T) map[string]string {
	t.Helper()
	sums := map[string]string{}
	for _, id := range f.ids {
		err := filepath.WalkDir(f.dir(id), func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(f.dir(id), p)
			sum := sha256.Sum256(b)
			sums[filepath.Join(id, rel)] = hex.EncodeToString(sum[:])
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return sums
}

// tips are the tips of every install's desired ref.
func (f *fleet) tips() map[string]string {
	tips := map[string]string{}
	for _, id := range f.ids {
		tips[id] = f.desired(id)
	}
	return tips
}

// moved waits until the server rendered every install again: each
// desired ref moved from was to a higher generation.
func (f *fleet) moved(t *testing.T, what string, was map[string]string) {
	t.Helper()
	waitFor(t, "the server to render "+what, 2*time.Minute, f.all, func() bool {
		for _, id := range f.ids {
			now := f.desired(id)
			if now == "" || now == was[id] {
				return false
			}
		}
		return true
	})
	for _, id := range f.ids {
		if was[id] != "" && gitGeneration(t, f.st.repo, f.desired(id)) <= gitGeneration(t, f.st.repo, was[id]) {
			t.Errorf("%s: the render of %s is not at a higher generation", id, what)
		}
	}
}

// sameConfig fails the test when a file in an install's folder changed,
// appeared or went away since before.
func sameConfig(t *testing.T, step string, before, after map[string]string) {
	t.Helper()
	for name, sum := range before {
		if after[name] != sum {
			t.Errorf("%s: %s changed inside the install", step, name)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			t.Errorf("%s: %s appeared inside the install", step, name)
		}
	}
}

// alive fails the test when an agent process of ids has exited.
func (f *fleet) alive(t *testing.T, step string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if f.agents[id].ProcessState != nil {
			t.Errorf("%s: %s's agent exited: %s", step, id, f.agents[id].ProcessState)
		}
		if err := f.agents[id].Process.Signal(syscall.Signal(0)); err != nil {
			t.Errorf("%s: %s's agent is gone: %v", step, id, err)
		}
	}
}

// note renders the step times as a table for the drill's note.
func (f *fleet) note() string {
	var b strings.Builder
	b.WriteString("| step | took |\n| --- | --- |\n")
	for _, s := range f.steps {
		fmt.Fprintf(&b, "| %s | %s |\n", s.name, s.took)
	}
	return b.String()
}

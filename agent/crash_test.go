package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// agentProcess runs an agent in this process, configured from the
// environment, so tests can kill it with SIGKILL. NUON_TEST_CRASH_AFTER
// makes it exit abruptly right after a point: "job:<component>" (the job
// finished, nothing recorded yet) or "status" (the status is committed
// locally, not pushed).
func agentProcess() int {
	env := os.Getenv
	trust, err := signature.ParseAllowedSigners([]byte(env("NUON_TEST_TRUST")))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	key, err := signature.LoadSigner(env("NUON_TEST_KEY"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	crash := env("NUON_TEST_CRASH_AFTER")
	var runner jobs.Runner = &jobs.Local{
		Command: []string{os.Args[0], "-test.run=^$"},
		Env:     []string{"NUON_AGENT_TEST_AGENT=", "NUON_AGENT_TEST_JOB=1", "GORACE=atexit_sleep_ms=0"},
	}
	remote := agent.NewRemote(env("NUON_TEST_REPO"), nil)
	if c, ok := strings.CutPrefix(crash, "job:"); ok {
		runner = crashRunner{Runner: runner, component: c}
	}
	if crash == "status" {
		remote = crashBeforePush{remote}
	}
	a, err := agent.New(agent.Config{
		Install:  env("NUON_TEST_INSTALL"),
		Remote:   remote,
		Trust:    trust,
		Key:      key,
		Workdir:  env("NUON_TEST_WORKDIR"),
		Runner:   runner,
		Plugins:  []string{schemas.TypeTerraform},
		Interval: 100 * time.Millisecond,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})),

		// The test plugin reads no artifacts.
		InsecureSkipArtifactVerification: true,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := a.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

type crashRunner struct {
	jobs.Runner
	component string
}

func (c crashRunner) Run(ctx context.Context, job *schemas.Job, dir string) (*schemas.JobResult, error) {
	res, err := c.Runner.Run(ctx, job, dir)
	if job.Component == c.component {
		os.Exit(99)
	}
	return res, err
}

type crashBeforePush struct{ agent.Remote }

func (c crashBeforePush) Push(context.Context, storage, refName, hash, hash) error {
	os.Exit(98)
	return nil
}

// startAgent runs agentProcess in a child process.
func (tn *tenant) startAgent(t *testing.T, id, dir, crash string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		"NUON_AGENT_TEST_AGENT=1",
		"NUON_TEST_REPO="+tn.srv.URL("tenant.git"),
		"NUON_TEST_INSTALL="+id,
		"NUON_TEST_TRUST=renderer "+tn.render.AuthorizedKey(),
		"NUON_TEST_KEY="+filepath.Join(fixtureKeys, id),
		"NUON_TEST_WORKDIR="+filepath.Join(dir, "work"),
		"NUON_TEST_RECORD="+filepath.Join(dir, "records"),
		"NUON_TEST_CRASH_AFTER="+crash,
		"GORACE=atexit_sleep_ms=0",
	)
	log, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		log.Close()
		if t.Failed() {
			t.Logf("agent log:\n%s", readFile(t, log.Name()))
		}
	})
	return cmd
}

// waitFor polls cond until it holds or the test's patience runs out.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (tn *tenant) serverStatus() string {
	s, _ := gittest.Run(tn.bare, nil, "show", "refs/heads/nuon/status/acme:status.json")
	return s
}

func count(list []string, s string) int {
	n := 0
	for _, e := range list {
		if e == s {
			n++
		}
	}
	return n
}

// TestKillDuringJob kills the agent with SIGKILL while b's job runs. The
// job outlives the agent (its own process group); the restarted agent waits
// for it, records its result and does not run it again.
func TestKillDuringJob(t *testing.T) {
	tn := newTenant(t)
	tn.setInstall("acme", tn.keys["acme"], "false", "2s")
	tn.commit("b takes a while")
	tn.renderMain()
	dir := t.TempDir()
	records := filepath.Join(dir, "records")

	first := tn.startAgent(t, "acme", dir, "")
	waitFor(t, "b's job to start", func() bool { return slices.Contains(runs(t, records), "acme_b_1.0.0_create") })
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = first.Process.Wait()
	if slices.Contains(runs(t, records), "acme_b_1.0.0_done") {
		t.Fatal("b finished before the kill; the test proves nothing")
	}

	tn.startAgent(t, "acme", dir, "")
	waitFor(t, "the install to converge", func() bool { return strings.Contains(tn.serverStatus(), `"phase": "Ready"`) })
	got := runs(t, records)
	for _, r := range []string{"acme_b_1.0.0_create", "acme_b_1.0.0_done", "acme_c_1.0.0_create"} {
		if n := count(got, r); n != 1 {
			t.Errorf("%s %d times, want once: %v", r, n, got)
		}
	}
	status := tn.serverStatus()
	if !strings.Contains(status, "b-g2-create-") {
		t.Errorf("status does not name b's first job:\n%s", status)
	}
	// The status commit that recorded the recovered job carries its
	// manifest, as a normal pass's does.
	var st schemas.Status
	if err := json.Unmarshal([]byte(status), &st); err != nil {
		t.Fatal(err)
	}
	job := st.Components["b"].Job
	found := false
	for _, c := range strings.Fields(tn.git("rev-list", "refs/heads/nuon/status/acme")) {
		if _, err := gittest.Run(tn.bare, nil, "cat-file", "-e", c+":jobs/"+job+".json"); err == nil {
			found = true
			if msg := tn.git("log", "-1", "--format=%B", c); !strings.Contains(msg, "created b 1.0.0") {
				t.Errorf("the status commit recording the recovered job does not say so:\n%s", msg)
			}
		}
	}
	if !found {
		t.Errorf("no status commit holds the manifest of the recovered job %s", job)
	}
}

// TestCrashPoints stops the agent abruptly at each point between a job and
// the status reaching the server, restarts it, and checks that no finished
// job runs again and the status arrives.
func TestCrashPoints(t *testing.T) {
	for _, point := range []string{"job:b", "status"} {
		t.Run(point, func(t *testing.T) {
			tn := newTenant(t)
			dir := t.TempDir()
			records := filepath.Join(dir, "records")
			first := tn.startAgent(t, "acme", dir, point)
			state, _ := first.Process.Wait()
			if code := state.ExitCode(); code != 99 && code != 98 {
				t.Fatalf("agent exited %d before reaching %s", code, point)
			}
			before := runs(t, records)
			tn.startAgent(t, "acme", dir, "")
			waitFor(t, "the install to converge", func() bool { return strings.Contains(tn.serverStatus(), `"phase": "Ready"`) })
			got := runs(t, records)
			for _, r := range before {
				if n := count(got, r); n != 1 {
					t.Errorf("%s ran %d times across the crash, want once: %v", r, n, got)
				}
			}
			if n := count(got, "acme_c_1.0.0_done"); n != 1 {
				t.Errorf("c done %d times: %v", n, got)
			}
		})
	}
}

// TestSIGTERMStopsCleanly stops the agent with SIGTERM during a job: the job
// is cancelled, the agent records it as interrupted, pushes that status and
// exits 0; the next agent runs the job again and converges.
func TestSIGTERMStopsCleanly(t *testing.T) {
	tn := newTenant(t)
	tn.setInstall("acme", tn.keys["acme"], "false", "30s")
	tn.commit("b takes a long while")
	tn.renderMain()
	dir := t.TempDir()
	records := filepath.Join(dir, "records")

	first := tn.startAgent(t, "acme", dir, "")
	waitFor(t, "b's job to start", func() bool { return slices.Contains(runs(t, records), "acme_b_1.0.0_create") })
	start := time.Now()
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	state, _ := first.Process.Wait()
	if state.ExitCode() != 0 || time.Since(start) > 10*time.Second {
		t.Fatalf("agent exited %d after %v", state.ExitCode(), time.Since(start))
	}
	status := tn.serverStatus()
	if !strings.Contains(status, "interrupted") {
		t.Fatalf("the pushed status does not say b was interrupted:\n%s", status)
	}
	if slices.Contains(runs(t, records), "acme_b_1.0.0_done") {
		t.Fatal("b finished although it was cancelled")
	}

	tn.setInstall("acme", tn.keys["acme"], "false", "0s")
	tn.commit("b is quick again")
	tn.renderMain()
	tn.startAgent(t, "acme", dir, "")
	waitFor(t, "the install to converge", func() bool {
		s := tn.serverStatus()
		return strings.Contains(s, `"phase": "Ready"`) && strings.Contains(s, `"generation": 3`)
	})
}

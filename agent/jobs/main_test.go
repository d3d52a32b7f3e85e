package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"nuon.dev/nuon/internal/atomicfile"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/jobrun"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// The test binary plays four parts. With envChild set it is a job
// process (`nuon job run MANIFEST`) with the test plugins; with envAgent
// set it is an agent that runs the job in envAgent and never returns
// (the test kills it); with envPod set it is a job's pod with the real
// terraform plugin (kubelet_test.go); otherwise it runs the tests.
const (
	envChild     = "NUON_JOBS_TEST_CHILD"
	envAgent     = "NUON_JOBS_TEST_AGENT"
	envArtifacts = "NUON_JOBS_TEST_ARTIFACTS"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(envChild) == "1":
		os.Exit(jobProcess())
	case os.Getenv(envAgent) != "":
		os.Exit(agentProcess(os.Getenv(envAgent)))
	case os.Getenv(envPod) == "1":
		os.Exit(podProcess())
	case os.Getenv(envContainer) != "":
		os.Exit(containerProcess(os.Getenv(envContainer)))
	}
	code := m.Run()
	if executorPath != "" {
		os.RemoveAll(filepath.Dir(executorPath))
	}
	if nodeBinDir != "" {
		os.RemoveAll(nodeBinDir)
	}
	os.Exit(code)
}

// jobProcess is what `nuon job run` does, with the test plugins.
func jobProcess() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	arts := oci.Layout{Path: os.Getenv(envArtifacts)}
	if err := jobrun.Main(ctx, os.Args[len(os.Args)-1], testPlugins, arts, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nuon:", err)
		return 1
	}
	return 0
}

// agentProcess runs the job whose directory is dir (its manifest is
// dir/job.json) with Local, as the agent would.
func agentProcess(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "job.json"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var job schemas.Job
	if err := json.Unmarshal(b, &job); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	l := &Local{Command: childCommand(), Env: childEnv()}
	if _, err := l.Run(context.Background(), &job, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func childCommand() []string { return []string{os.Args[0], "-test.run=^$"} }

// childEnv makes the test binary a job process. A race-enabled binary
// otherwise sleeps a second before a successful exit.
func childEnv() []string { return []string{envChild + "=1", "GORACE=atexit_sleep_ms=0"} }

// testPlugins are the plugins of the test job process. A manifest names a
// real component type, so the test plugin is the "terraform" one and it
// behaves as its job's component is named.
var testPlugins = map[string]reconciler.Plugin{schemas.TypeTerraform: behaviours}

// behaviours are the test plugins by component name.
var behaviours = byComponent{
	"echo":     echoPlugin{},
	"noisy":    funcPlugin(noisy),
	"fail":     funcPlugin(fail),
	"crash":    funcPlugin(crash),
	"panic":    funcPlugin(func(context.Context, *schemas.Job, reconciler.Env) (*schemas.JobResult, error) { panic("plugin bug") }),
	"sleep":    funcPlugin(sleep),
	"stubborn": funcPlugin(stubborn),
	"orphan":   funcPlugin(orphan),
	"wait":     funcPlugin(waitForRelease),
}

// byComponent is a plugin that hands a job to the plugin named by the
// job's component.
type byComponent map[string]reconciler.Plugin

func (b byComponent) plugin(job *schemas.Job) (reconciler.Plugin, error) {
	p, ok := b[job.Component]
	if !ok {
		return nil, fmt.Errorf("no test plugin %q", job.Component)
	}
	return p, nil
}

func (b byComponent) Apply(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	p, err := b.plugin(job)
	if err != nil {
		return nil, err
	}
	return p.Apply(ctx, job, env)
}

func (b byComponent) Destroy(ctx context.Context, job *schemas.Job, env reconciler.Env) error {
	p, err := b.plugin(job)
	if err != nil {
		return err
	}
	return p.Destroy(ctx, job, env)
}

// echoPlugin returns its inputs as outputs, marks "token" sensitive and
// extracts the job's artifacts into the state directory.
type echoPlugin struct{}

func (echoPlugin) Apply(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	fmt.Fprintf(env.Log, "echo: %s\n", job.Operation)
	env.Logger.Info("echoing", "inputs", len(job.Inputs))
	for _, a := range job.Artifacts {
		if err := env.Artifacts.Extract(ctx, a, filepath.Join(env.StateDir, a.Name)); err != nil {
			return nil, err
		}
	}
	res := &schemas.JobResult{Outputs: job.Inputs, Changed: true}
	if _, ok := job.Inputs["token"]; ok {
		res.Sensitive = []string{"token"}
	}
	return res, nil
}

func (echoPlugin) Destroy(ctx context.Context, job *schemas.Job, env reconciler.Env) error {
	fmt.Fprintln(env.Log, "echo: destroyed")
	return os.WriteFile(filepath.Join(env.StateDir, "destroyed"), nil, 0o600)
}

// funcPlugin is a plugin whose Apply and Destroy are one function.
type funcPlugin func(context.Context, *schemas.Job, reconciler.Env) (*schemas.JobResult, error)

func (f funcPlugin) Apply(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	return f(ctx, job, env)
}

func (f funcPlugin) Destroy(ctx context.Context, job *schemas.Job, env reconciler.Env) error {
	_, err := f(ctx, job, env)
	return err
}

func noisy(context.Context, *schemas.Job, reconciler.Env) (*schemas.JobResult, error) {
	fmt.Fprintln(os.Stdout, "line on stdout")
	fmt.Fprintln(os.Stderr, "line on stderr")
	return &schemas.JobResult{}, nil
}

func fail(context.Context, *schemas.Job, reconciler.Env) (*schemas.JobResult, error) {
	return &schemas.JobResult{Outputs: map[string]any{"partial": true}}, errors.New("bucket already exists")
}

func crash(context.Context, *schemas.Job, reconciler.Env) (*schemas.JobResult, error) {
	fmt.Fprintln(os.Stderr, "crashing hard")
	os.Exit(3)
	return nil, nil
}

// startSleeper starts `sleep 60` in the job's process group and records
// its pid in the state directory.
func startSleeper(env reconciler.Env) error {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait()
	return atomicfile.Write(filepath.Join(env.StateDir, "sleeper.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600)
}

// sleep starts a grandchild and blocks until the job's ctx ends.
func sleep(ctx context.Context, _ *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	if err := startSleeper(env); err != nil {
		return nil, err
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// stubborn ignores its ctx; only SIGKILL ends it.
func stubborn(context.Context, *schemas.Job, reconciler.Env) (*schemas.JobResult, error) {
	time.Sleep(time.Minute)
	return nil, nil
}

// orphan succeeds but leaves a grandchild running.
func orphan(_ context.Context, _ *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	return &schemas.JobResult{}, startSleeper(env)
}

// waitForRelease records its pid in the state directory as "started",
// then waits until the test creates "release" there.
func waitForRelease(ctx context.Context, _ *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	if err := atomicfile.Write(filepath.Join(env.StateDir, "started"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return nil, err
	}
	for {
		if _, err := os.Stat(filepath.Join(env.StateDir, "release")); err == nil {
			return &schemas.JobResult{Outputs: map[string]any{"waited": true}}, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// testRunner returns a Local that runs the test binary as the job process.
func testRunner(t *testing.T) *Local {
	return &Local{
		Command:       childCommand(),
		Env:           childEnv(),
		Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
		KillGrace:     500 * time.Millisecond,
		TimeoutMargin: 500 * time.Millisecond,
	}
}

// testJob returns a valid job for the test plugin behaviour, with its own
// state directory.
func testJob(t *testing.T, behaviour string) *schemas.Job {
	return &schemas.Job{
		APIVersion: schemas.APIVersion,
		Kind:       schemas.KindJob,
		ID:         "j-" + behaviour,
		Install:    "inst-1",
		Component:  behaviour,
		Operation:  schemas.OpCreate,
		Plugin:     schemas.TypeTerraform,
		Version:    "1.0.0",
		Generation: 1,
		Commit:     strings.Repeat("a", 40),
		Timeout:    "30s",
		StateDir:   filepath.Join(t.TempDir(), "state"),
	}
}

// awaitFile waits for path to exist and returns its content.
func awaitFile(path string) (string, error) {
	end := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil || time.Now().After(end) {
			return string(b), err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gone reports whether process pid has exited (a zombie counts).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) state ...
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// pidIn reads a pid written by a test plugin.
func pidIn(t *testing.T, path string) int {
	t.Helper()
	s, err := awaitFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// killAtEnd kills pid, and its group, when the test ends, in case the test
// fails before the process ends by itself.
func killAtEnd(t *testing.T, pid int) {
	t.Cleanup(func() {
		if !gone(pid) {
			syscall.Kill(-pid, syscall.SIGKILL)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

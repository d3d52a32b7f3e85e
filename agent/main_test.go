package agent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"nuon.dev/nuon/internal/debugcmd"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/redact/redacttest"
	"nuon.dev/nuon/jobrun"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/reconciler/terraform"
	"nuon.dev/nuon/schemas"
)

// TestMain doubles as the job process: the agent under test spawns this
// binary with NUON_AGENT_TEST_JOB=1 to run a job, as it spawns `nuon job
// run` in production.
func TestMain(m *testing.M) {
	if os.Getenv("NUON_AGENT_TEST_JOB") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		manifest := os.Args[len(os.Args)-1]
		plugins := map[string]reconciler.Plugin{schemas.TypeTerraform: recorder{}}
		var artifacts reconciler.ArtifactSource
		if layout := os.Getenv("NUON_TEST_LAYOUT"); layout != "" {
			// The real terraform, its modules from an OCI image layout
			// (sandbox_test.go).
			plugins[schemas.TypeTerraform] = &terraform.Plugin{}
			artifacts = oci.Layout{Path: layout}
		}
		if err := jobrun.Main(ctx, manifest, plugins, artifacts, os.Stdout, jobrun.WithStdio()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv("NUON_AGENT_TEST_AGENT") == "1" {
		os.Exit(agentProcess())
	}
	os.Exit(m.Run())
}

// recorder is the test plugin: it appends one line per call to the file
// NUON_TEST_RECORD names, outputs id = "<component>-id" plus its string
// inputs, fails when input fail is "true" and sleeps for input sleep.
type recorder struct{}

func (recorder) Apply(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	if err := record(job, job.Operation); err != nil {
		return nil, err
	}
	if d, ok := job.Inputs["sleep"].(string); ok {
		dur, _ := time.ParseDuration(d)
		select {
		case <-time.After(dur):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if dir, ok := job.Inputs["barrier"].(string); ok && dir != "" {
		if err := barrier(ctx, job, dir); err != nil {
			return nil, err
		}
	}
	if job.Inputs["fail"] == "true" {
		if s, ok := os.LookupEnv("NUON_SECRET_LEAK"); ok {
			// As terraform reports a variable validation that quotes
			// the value: HCL-escaped, word-wrapped in its frame.
			fmt.Fprintf(os.Stderr, "plan failed: %s\n", s)
			return nil, fmt.Errorf("the component says no:\n%s", terraformDiag("The license "+redacttest.Encodings[hclEncoding].Encode(s)+" given in var.license is not valid for this install: ask the vendor for a new one."))
		}
		return nil, errors.New("the component says no")
	}
	outs := map[string]any{"id": job.Component + "-id"}
	for k, v := range job.Inputs {
		if s, ok := v.(string); ok && k != "sleep" {
			outs["in_"+k] = s
		}
	}
	if err := record(job, "done"); err != nil {
		return nil, err
	}
	return &schemas.JobResult{Outputs: outs, Sensitive: []string{"token"}, Changed: true, Health: &schemas.Health{Status: schemas.HealthReady}}, nil
}

// Drift records the call and reports drift while the file
// NUON_TEST_DRIFT/<component> exists: its content names the resource.
func (recorder) Drift(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	if err := record(job, "drift"); err != nil {
		return nil, err
	}
	res := &schemas.JobResult{Health: &schemas.Health{Status: schemas.HealthReady}}
	if data, err := os.ReadFile(filepath.Join(os.Getenv("NUON_TEST_DRIFT"), job.Component)); err == nil {
		res.Drift = []schemas.ResourceDrift{{Address: strings.TrimSpace(string(data)), Action: schemas.DriftChanged, Fields: []string{"content"}}}
	}
	return res, nil
}

var _ reconciler.DriftChecker = recorder{}

// Debug records the call and answers with the parsed command and, when
// NUON_SECRET_LEAK is set, that secret (which the agent must redact).
func (recorder) Debug(ctx context.Context, job *schemas.Job, env reconciler.Env, cmd debugcmd.Command, out io.Writer) error {
	if err := record(job, "debug"); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: %s\n", job.Component, strings.Join(cmd.Words(), " "))
	if s, ok := os.LookupEnv("NUON_SECRET_LEAK"); ok {
		fmt.Fprintf(out, "token=%s\n", s)
	}
	return nil
}

var _ reconciler.Debugger = recorder{}

func (recorder) Destroy(ctx context.Context, job *schemas.Job, env reconciler.Env) error {
	return record(job, "delete")
}

// barrier records when the job started in DIR/<component>.start, waits
// (at most 10s) until barrier_n jobs have started, holds on for 100ms and
// records when it ended in DIR/<component>.end: with n independent jobs
// and a concurrency bound k, the first k wait for each other, so the bound
// is reached, and none more can start until one ends.
func barrier(ctx context.Context, job *schemas.Job, dir string) error {
	stamp := func(what string) error {
		return os.WriteFile(filepath.Join(dir, job.Component+"."+what), []byte(strconv.FormatInt(time.Now().UnixNano(), 10)), 0o644)
	}
	if err := stamp("start"); err != nil {
		return err
	}
	n, _ := strconv.Atoi(fmt.Sprint(job.Inputs["barrier_n"]))
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		started, _ := filepath.Glob(filepath.Join(dir, "*.start"))
		if len(started) >= n {
			break
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	time.Sleep(100 * time.Millisecond)
	return stamp("end")
}

func record(job *schemas.Job, what string) error {
	f, err := os.OpenFile(os.Getenv("NUON_TEST_RECORD"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "%s %s %s %s\n", job.Install, job.Component, job.Version, what)
	return err
}

// hclEncoding is the index of terraform's string escaping in
// redacttest.Encodings.
var hclEncoding = func() int {
	for i, e := range redacttest.Encodings {
		if e.Name == "hcl" {
			return i
		}
	}
	panic("no hcl encoding")
}()

// terraformDiag frames msg as terraform prints an error: word-wrapped at
// 40 columns, each line behind "│ ".
func terraformDiag(msg string) string {
	var lines []string
	line := ""
	for _, w := range strings.Split(msg, " ") {
		if line != "" && len(line)+1+len(w) > 40 {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	lines = append(lines, line)
	return "╷\n│ Error: Invalid value for variable\n│\n│ " + strings.Join(lines, "\n│ ") + "\n╵"
}

// runs reads the record file: one entry per plugin call, "install
// component version what".
func runs(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(data)), " ", "_"))
}

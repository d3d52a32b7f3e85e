package jobrun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/internal/redact/redacttest"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// leakySecret has quotes, HTML characters, HCL's ${ and spaces.
const leakySecret = `lic "k3y" <&> ${x} with spaces and more`

// leaky prints the job's secret every way a plugin or its tools may: to
// the job's log in two writes, through slog, to os.Stdout and os.Stderr,
// from a child process that inherits them, word-wrapped as terraform
// does, in its outputs and in its error.
var leaky = funcPlugin(func(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	s, ok := os.LookupEnv("NUON_SECRET_LICENSE")
	if !ok {
		return nil, errors.New("no secret in the environment")
	}
	half := len(s) / 2
	fmt.Fprintf(env.Log, "log: %s", s[:half])
	fmt.Fprintf(env.Log, "%s\n", s[half:])
	env.Logger.Info("slog", "value", s)
	fmt.Printf("stdout: %q\n", s)
	fmt.Fprintf(os.Stderr, "stderr: %s\n", strings.ReplaceAll(s, " ", "\n│ "))
	cmd := exec.CommandContext(ctx, "sh", "-c", `echo "child: $NUON_SECRET_LICENSE"; echo "child err: $NUON_SECRET_LICENSE" >&2`)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, err
	}
	return &schemas.JobResult{Outputs: map[string]any{"echo": "value " + s, "n": []any{s}},
			Plan: &schemas.PlanRecord{Component: "network", Hash: "sha256:" + strings.Repeat("0", 64), Diff: "~ license = " + s}},
		fmt.Errorf("terraform apply: variable license: invalid value %q", s)
})

// TestHelperJobProcess is the job process of TestJobRedacts.
func TestHelperJobProcess(t *testing.T) {
	manifest := os.Getenv("NUON_TEST_JOB_MANIFEST")
	if manifest == "" {
		t.Skip("run by TestJobRedacts")
	}
	plugins := map[string]reconciler.Plugin{schemas.TypeTerraform: leaky}
	err := Main(context.Background(), manifest, plugins, nil, os.Stdout, WithStdio())
	fmt.Fprintln(os.Stderr, "job error:", err)
	os.Exit(0)
}

// TestJobRedacts runs a job process whose plugin prints its secret
// everywhere: neither its output (stdout and stderr) nor its result holds
// any of it.
func TestJobRedacts(t *testing.T) {
	data, result := manifest(t, "leaky", nil)
	path := writeManifestFile(t, data)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperJobProcess$")
	cmd.Env = append(os.Environ(), "NUON_TEST_JOB_MANIFEST="+path, "NUON_SECRET_LICENSE="+leakySecret, "NUON_SECRET_SHORT=abc")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("job process: %v\n%s", err, out)
	}
	res, err := os.ReadFile(result)
	if err != nil {
		t.Fatalf("%v\noutput:\n%s", err, out)
	}
	t.Logf("output:\n%s\nresult:\n%s", out, res)
	for name, text := range map[string]string{"output": string(out), "result": string(res)} {
		if leaks := redacttest.Leaks(text, leakySecret); leaks != nil {
			t.Errorf("the job's %s leaks %v:\n%s", name, leaks, text)
		}
	}
	for _, want := range []string{"log: " + redact.Marker, "stdout: \"" + redact.Marker, "child: " + redact.Marker, "child err: " + redact.Marker, "NUON_SECRET_SHORT: too short", "job error: job j-leaky: terraform apply"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(string(res), `"diff": "~ license = `+redact.Marker) {
		t.Errorf("result's plan record lacks its redacted diff:\n%s", res)
	}
	if !strings.Contains(string(res), `"error": "terraform apply: variable license: invalid value \"[redacted]\""`) {
		t.Errorf("result:\n%s", res)
	}
}

package stack

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// awsCLIConfig is the terraformrc of the schema-only aws provider mirror
// (`make tf-aws`). Without it the test skips, unless CI is set.
func awsCLIConfig(t *testing.T) string {
	t.Helper()
	rc := os.Getenv("NUON_TF_AWS_CLI_CONFIG")
	if _, err := os.Stat(rc); rc != "" && err == nil {
		if _, err := exec.LookPath("terraform"); err == nil {
			return rc
		}
	}
	msg := "the schema-only aws provider is not built (NUON_TF_AWS_CLI_CONFIG=" + rc + "): run `make tf-aws`"
	if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
		t.Fatalf("%s (CI=%s)", msg, ci)
	}
	t.Skip(msg)
	return ""
}

// TestTerraformModule checks the Terraform variant for real: terraform
// fmt, validate against the aws 6.25.0 schema, and terraform test with a
// mock provider (testdata/stack.tftest.hcl).
func TestTerraformModule(t *testing.T) {
	rc := awsCLIConfig(t)
	dir := t.TempDir()
	tf, err := Terraform(opts())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), tf, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join("testdata", "stack.tftest.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "tests"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tests", "stack.tftest.hcl"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "terraform", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	run("fmt", "-check", "-diff", "main.tf")
	run("init", "-backend=false", "-input=false", "-no-color")
	run("validate", "-no-color")
	if out := run("test", "-no-color"); !strings.Contains(out, " passed, 0 failed.") {
		t.Fatalf("terraform test did not report success:\n%s", out)
	}
}

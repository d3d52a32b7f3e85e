package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The child tests run only inside the test binary started by
// TestMissingInCI, with the environment it sets.
const envChild = "NUON_TESTENV_CHILD"

func TestChildMissing(t *testing.T) {
	if os.Getenv(envChild) == "" {
		t.Skip("run by TestMissingInCI")
	}
	Missing(t, "no frobnicator: run `make frobnicator`")
}

func TestChildTerraformConfig(t *testing.T) {
	if os.Getenv(envChild) == "" {
		t.Skip("run by TestMissingInCI")
	}
	t.Log("config:", TerraformConfig(t))
}

// TestMissingInCI runs the child tests in a test binary of their own: a
// missing tool skips them, unless CI is set, when it fails them.
func TestMissingInCI(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "terraformrc")
	if err := os.WriteFile(cfg, []byte("provider_installation {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noCache := "XDG_CACHE_HOME=" + t.TempDir()
	tests := []struct {
		name, run string
		env       []string
		wantFail  bool
		want      string
	}{
		{name: "missing, locally", run: "TestChildMissing", env: []string{"CI=", RequireTools + "="}, want: "--- SKIP"},
		{name: "missing, CI=false", run: "TestChildMissing", env: []string{"CI=false", RequireTools + "="}, want: "--- SKIP"},
		{name: "missing, CI=0", run: "TestChildMissing", env: []string{"CI=0", RequireTools + "="}, want: "--- SKIP"},
		{name: "missing, in CI", run: "TestChildMissing", env: []string{"CI=true"}, wantFail: true, want: "no frobnicator: run `make frobnicator` (CI=\"true\""},
		{name: "missing, make test", run: "TestChildMissing", env: []string{"CI=", RequireTools + "=1"}, wantFail: true, want: "no frobnicator"},
		{name: "no mirror, locally", run: "TestChildTerraformConfig", env: []string{"CI=", RequireTools + "=", "NUON_TF_CLI_CONFIG=/nonexistent", "TF_CLI_CONFIG_FILE=", noCache}, want: "--- SKIP"},
		{name: "no mirror, in CI", run: "TestChildTerraformConfig", env: []string{"CI=1", "NUON_TF_CLI_CONFIG=/nonexistent", "TF_CLI_CONFIG_FILE=", noCache}, wantFail: true, want: "run `make tf-providers` (CI=\"1\""},
		{name: "mirror", run: "TestChildTerraformConfig", env: []string{"CI=1", "NUON_TF_CLI_CONFIG=", "TF_CLI_CONFIG_FILE=" + cfg, noCache}, want: "config: " + cfg},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^"+tt.run+"$", "-test.v")
			cmd.Env = append(os.Environ(), append([]string{envChild + "=1"}, tt.env...)...)
			out, err := cmd.CombinedOutput()
			if failed := err != nil; failed != tt.wantFail {
				t.Errorf("failed = %v, want %v (%v)\n%s", failed, tt.wantFail, err, out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("output lacks %q:\n%s", tt.want, out)
			}
		})
	}
}

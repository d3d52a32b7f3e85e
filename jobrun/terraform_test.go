package jobrun

import (
	"encoding/json"
	"errors"
	"nuon.dev/nuon/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"nuon.dev/nuon/internal/debugcmd"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/reconciler/terraform"
	"nuon.dev/nuon/schemas"
)

// TestTerraformOperations runs the real terraform plugin through the job
// process: an apply, a drift check with nothing to find and one after a
// hand edit, a debug command whose answer holds a secret (redacted) and
// a refused one. It does so twice: with the plugin in the job process,
// and with the plugin in a process of its own behind the plugin protocol
// (this test binary serving it, as `nuon plugin serve terraform` does).
func TestTerraformOperations(t *testing.T) {
	cfg := testenv.TerraformConfig(t)
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Fatalf("terraform: %v", err)
	}
	t.Run("in process", func(t *testing.T) {
		testTerraformOperations(t, &terraform.Plugin{CLIConfig: cfg})
	})
	t.Run("plugin protocol", func(t *testing.T) {
		testTerraformOperations(t, servedTerraform(t, cfg))
	})
}

func testTerraformOperations(t *testing.T, tf reconciler.Plugin) {
	const license = "lic-SECRET-7f3a9c"
	t.Setenv("NUON_SECRET_LICENSE", license)
	plugins := map[string]reconciler.Plugin{schemas.TypeTerraform: tf}
	artifacts := dirArtifacts{root: filepath.Join("..", "fixtures", "modules")}
	stateDir, dataDir := t.TempDir(), t.TempDir()

	var plan *schemas.JobPlan
	runJob := func(t *testing.T, op string, dbg *schemas.DebugRequest) (*schemas.JobResult, string, error) {
		t.Helper()
		job := testJob(t, "database")
		job.Operation, job.Debug, job.StateDir, job.Plan = op, dbg, stateDir, plan
		job.ResultFile = filepath.Join(t.TempDir(), ResultFile)
		job.Artifacts = []schemas.Artifact{{Name: terraform.ModuleArtifact, Local: "r.example/database@" + digest, Digest: digest}}
		job.Inputs = map[string]any{"vpc_id": "vpc-1", "dir": dataDir, "license_key": "${secrets.license}"}
		b, err := json.Marshal(job)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		runErr := Main(t.Context(), writeManifestFile(t, b), plugins, artifacts, &out)
		res, err := readResult(job.ResultFile)
		if err != nil {
			t.Fatalf("no result: %v (job: %v)\n%s", err, runErr, out.String())
		}
		raw, _ := os.ReadFile(job.ResultFile)
		if strings.Contains(string(raw), license) || strings.Contains(out.String(), license) {
			t.Errorf("the result or the log holds the secret:\n%s\n%s", raw, out.String())
		}
		return res, out.String(), runErr
	}

	if _, log, err := runJob(t, schemas.OpCreate, nil); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	res, log, err := runJob(t, schemas.OpDrift, nil)
	if err != nil || len(res.Drift) != 0 || res.Changed {
		t.Fatalf("drift check after the apply: %v, drift %+v, changed %v\n%s", err, res.Drift, res.Changed, log)
	}
	if err := os.WriteFile(filepath.Join(dataDir, "app.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, log, err = runJob(t, schemas.OpDrift, nil)
	if err != nil || len(res.Drift) != 1 || res.Drift[0].Address != "local_file.config" {
		t.Fatalf("drift check after a hand edit: %v, drift %+v\n%s", err, res.Drift, log)
	}

	// An approval's plan: recorded (the plan record comes back through
	// the protocol too), nothing applied; then exactly that plan applied.
	plan = &schemas.JobPlan{Mode: schemas.PlanRecordMode}
	res, log, err = runJob(t, schemas.OpUpdate, nil)
	if err != nil || res.Plan == nil || !schemas.ValidPlanHash(res.Plan.Hash) || !slices.Contains(slices.Concat(res.Plan.Summary.Create, res.Plan.Summary.Update, res.Plan.Summary.Replace), "local_file.config") {
		t.Fatalf("plan record: %v, %+v\n%s", err, res.Plan, log)
	}
	if strings.Contains(res.Plan.Diff, license) {
		t.Errorf("the plan's diff holds the secret:\n%s", res.Plan.Diff)
	}
	if b, _ := os.ReadFile(filepath.Join(dataDir, "app.json")); string(b) != "{}" {
		t.Fatalf("recording a plan applied it: %s", b)
	}
	plan = &schemas.JobPlan{Mode: schemas.PlanApplyMode, Hash: res.Plan.Hash}
	if res, log, err = runJob(t, schemas.OpUpdate, nil); err != nil || !res.Changed {
		t.Fatalf("apply the saved plan: %v, %+v\n%s", err, res, log)
	}
	plan = nil
	if res, log, err = runJob(t, schemas.OpDrift, nil); err != nil || len(res.Drift) != 0 {
		t.Fatalf("drift after the saved plan: %v, %+v\n%s", err, res.Drift, log)
	}

	res, log, err = runJob(t, schemas.OpDebug, &schemas.DebugRequest{Command: []string{"state", "show", "local_file.config"}})
	if err != nil || res.Answer == nil {
		t.Fatalf("debug: %v, %+v\n%s", err, res, log)
	}
	if !strings.Contains(res.Answer.Output, "license_key") || !strings.Contains(res.Answer.Output, "redacted") {
		t.Errorf("answer lacks the redacted license key:\n%s", res.Answer.Output)
	}

	res, _, err = runJob(t, schemas.OpDebug, &schemas.DebugRequest{Command: []string{"state", "rm", "local_file.config"}})
	if !errors.Is(err, debugcmd.ErrRefused) || res.Answer != nil || !res.Refused || !strings.HasPrefix(res.Error, "debug command refused: ") {
		t.Errorf("state rm: error %v, result %+v; want a refusal", err, res)
	}
}

package terraform

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"nuon.dev/nuon/internal/testenv"
	"nuon.dev/nuon/policy/plans"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// BenchmarkPlanRecord1000 records the plan of a module that creates 1,000
// resources and reports the size of the record the agent publishes in its
// status (record-bytes: bounded by the diff cut and the address cap), the
// saved plan it keeps (plan-bytes) and the readable diff before the cut
// (diff-bytes).
//
//	go test -run '^$' -bench BenchmarkPlanRecord1000 -benchtime=1x ./reconciler/terraform/
func BenchmarkPlanRecord1000(b *testing.B) {
	benchPlanRecord1000(b, `
variable "n" { type = number }
resource "terraform_data" "r" {
  count = var.n
  input = { index = count.index, name = "resource-${count.index}", tier = "gold" }
}
`)
}

// BenchmarkPlanRecord1000Random is BenchmarkPlanRecord1000 with the
// random provider (offline: the Makefile's TF_CLI_CONFIG_FILE).
//
//	go test -run '^$' -bench BenchmarkPlanRecord1000Random -benchtime=1x ./reconciler/terraform/
func BenchmarkPlanRecord1000Random(b *testing.B) {
	benchPlanRecord1000(b, `
variable "n" { type = number }
resource "random_pet" "r" {
  count  = var.n
  length = 2
  keepers = { index = count.index, tier = "gold" }
}
`)
}

// benchPlanRecord1000 records the plan of module (1,000 resources) and
// reports the record's sizes, the record job's time and the time of one
// evaluation of the fixture tenant's plan policies on the plan (policy-ms).
func benchPlanRecord1000(b *testing.B, module string) {
	p := &Plugin{CLIConfig: testenv.TerraformConfig(b)}
	mod := b.TempDir()
	if err := os.WriteFile(filepath.Join(mod, "main.tf"), []byte(module), 0o600); err != nil {
		b.Fatal(err)
	}
	policies := map[string]string{}
	for _, name := range []string{"no-data-loss.rego", "no-public-bucket.rego"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "tenant", "policies", name))
		if err != nil {
			b.Fatal(err)
		}
		policies["policies/"+name] = string(data)
	}
	set, err := plans.Compile(policies)
	if err != nil {
		b.Fatal(err)
	}
	var rec *schemas.PlanRecord
	var full int
	var record, evaluate time.Duration
	for b.Loop() {
		stateDir := b.TempDir()
		env := newEnv(stateDir)
		job := newJob("big", mod, map[string]any{"n": 1000})
		job.Plan = &schemas.JobPlan{Mode: schemas.PlanRecordMode}
		began := time.Now()
		res, err := p.Apply(context.Background(), job, env.Env)
		if err != nil {
			b.Fatal(err)
		}
		record += time.Since(began)
		rec = res.Plan
		full = len(env.log.String())
		plan, err := savedPlanJSONUnder(stateDir, rec.Hash)
		if err != nil {
			b.Fatal(err)
		}
		began = time.Now()
		if _, err := set.Evaluate(context.Background(), map[string]any{"install": "inst-1", "component": "big", "type": schemas.TypeTerraform, "plan": plan}); err != nil {
			b.Fatal(err)
		}
		evaluate += time.Since(began)
	}
	if rec.Summary.Counts[schemas.ChangeCreate] != 1000 || len(rec.Summary.Create) != schemas.MaxPlanAddresses || rec.Summary.Truncated != 1000-schemas.MaxPlanAddresses || !rec.DiffTruncated {
		b.Fatalf("record: counts %v, %d listed, %d truncated, diff cut %v", rec.Summary.Counts, len(rec.Summary.Create), rec.Summary.Truncated, rec.DiffTruncated)
	}
	data, err := json.Marshal(rec)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(data)), "record-bytes")
	b.ReportMetric(float64(rec.Size), "plan-bytes")
	b.ReportMetric(float64(full), "log-bytes")
	b.ReportMetric(record.Seconds()*1000/float64(b.N), "record-ms")
	b.ReportMetric(evaluate.Seconds()*1000/float64(b.N), "policy-ms")
}

// savedPlanJSONUnder finds the saved plan hash's JSON form anywhere under
// dir (the state directory's layout is the plugin's).
func savedPlanJSONUnder(dir, hash string) (map[string]any, error) {
	matches, _ := filepath.Glob(filepath.Join(dir, "*", reconciler.PlansDir))
	matches2, _ := filepath.Glob(filepath.Join(dir, "*", "*", reconciler.PlansDir))
	matches3, _ := filepath.Glob(filepath.Join(dir, reconciler.PlansDir))
	for _, m := range append(append(matches3, matches...), matches2...) {
		if plan, err := reconciler.SavedPlanJSON(filepath.Dir(m), hash); err == nil {
			return plan, nil
		}
	}
	return nil, os.ErrNotExist
}

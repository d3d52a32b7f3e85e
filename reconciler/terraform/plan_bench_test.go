package terraform

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"nuon.dev/nuon/internal/testenv"
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
	p := &Plugin{CLIConfig: testenv.TerraformConfig(b)}
	mod := b.TempDir()
	if err := os.WriteFile(filepath.Join(mod, "main.tf"), []byte(`
variable "n" { type = number }
resource "terraform_data" "r" {
  count = var.n
  input = { index = count.index, name = "resource-${count.index}", tier = "gold" }
}
`), 0o600); err != nil {
		b.Fatal(err)
	}
	var rec *schemas.PlanRecord
	var full int
	for b.Loop() {
		env := newEnv(b.TempDir())
		job := newJob("big", mod, map[string]any{"n": 1000})
		job.Plan = &schemas.JobPlan{Mode: schemas.PlanRecordMode}
		res, err := p.Apply(context.Background(), job, env.Env)
		if err != nil {
			b.Fatal(err)
		}
		rec = res.Plan
		full = len(env.log.String())
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
}

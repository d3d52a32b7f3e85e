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

// TestPlanTooLargeToRecord: a plan whose diff and addresses exceed what a
// record holds is recorded bounded (diff cut, addresses capped, counts
// exact), and is still approvable by its hash: the apply of that hash
// applies every change of the saved plan, not only the ones the record
// lists.
func TestPlanTooLargeToRecord(t *testing.T) {
	p := &Plugin{CLIConfig: testenv.TerraformConfig(t)}
	mod := t.TempDir()
	if err := os.WriteFile(filepath.Join(mod, "main.tf"), []byte(`
variable "n" { type = number }
resource "terraform_data" "r" {
  count = var.n
  input = { index = count.index, name = "resource-${count.index}", padding = "${count.index}-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" }
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	const n = 400
	stateDir := t.TempDir()
	run := func(plan *schemas.JobPlan) *schemas.JobResult {
		t.Helper()
		env := newEnv(stateDir)
		job := newJob("big", mod, map[string]any{"n": n})
		job.Plan = plan
		res, err := p.Apply(context.Background(), job, env.Env)
		if err != nil {
			t.Fatalf("%v\n%s", err, env.log)
		}
		return res
	}
	rec := run(&schemas.JobPlan{Mode: schemas.PlanRecordMode}).Plan
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.DiffTruncated || len(rec.Diff) > schemas.MaxPlanDiff || rec.Summary.Counts[schemas.ChangeCreate] != n ||
		len(rec.Summary.Create) != schemas.MaxPlanAddresses || rec.Summary.Truncated != n-schemas.MaxPlanAddresses {
		t.Fatalf("record not bounded: diff %d bytes (cut %v), counts %v, %d listed, %d truncated",
			len(rec.Diff), rec.DiffTruncated, rec.Summary.Counts, len(rec.Summary.Create), rec.Summary.Truncated)
	}
	if len(data) > schemas.MaxPlanDiff+schemas.MaxPlanAddresses*64+4096 {
		t.Errorf("the record is %d bytes", len(data))
	}
	res := run(&schemas.JobPlan{Mode: schemas.PlanApplyMode, Hash: rec.Hash})
	if res.Plan == nil || res.Plan.Hash != rec.Hash {
		t.Fatalf("apply of the bounded plan: %+v", res.Plan)
	}
	// Everything was applied: a new plan has nothing to do.
	if again := run(&schemas.JobPlan{Mode: schemas.PlanRecordMode}).Plan; len(again.Summary.Kinds()) != 0 {
		t.Fatalf("after applying the bounded plan, a re-plan still changes %v", again.Summary.Counts)
	}
}

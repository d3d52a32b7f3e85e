package manifests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/policy/plans"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// BenchmarkPlanRecord500 records the plan of a 500-object manifests
// change (250 ConfigMaps, 250 Deployments, all created), applies it by its
// hash, records the plan of a change to 50 of them, and evaluates the
// fixture tenant's policies on the 500-change plan. Reported: the record's
// size as the status carries it, the saved set's size, the time of each
// record job and of one policy evaluation.
func BenchmarkPlanRecord500(b *testing.B) {
	const n = 500
	srv := kubetest.Shared(b)
	v1, v2 := b.TempDir(), b.TempDir()
	benchObjects(b, v1, n, 0)
	benchObjects(b, v2, n, 50)
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
	var recordCreate, recordUpdate, evaluate time.Duration
	var recBytes, savedBytes, updBytes int
	for b.Loop() {
		ns := srv.Namespace(b)
		p, _ := testPlugin(b, srv)
		stateDir := b.TempDir()
		run := func(dir string, plan *schemas.JobPlan) *schemas.JobResult {
			env, log := testEnv(b, stateDir)
			job := newJob("bench", ns, dir, nil)
			job.Plan = plan
			res, err := p.Apply(b.Context(), job, env)
			if err != nil {
				b.Fatalf("%v\n%s", err, log)
			}
			return res
		}
		began := time.Now()
		res := run(v1, &schemas.JobPlan{Mode: schemas.PlanRecordMode})
		recordCreate += time.Since(began)
		if c := res.Plan.Summary.Counts[schemas.ChangeCreate]; c != n {
			b.Fatalf("%d creates, want %d", c, n)
		}
		rj, _ := json.Marshal(res.Plan)
		recBytes, savedBytes = len(rj), int(res.Plan.Size)
		plan, err := reconciler.SavedPlanJSON(stateDir, res.Plan.Hash)
		if err != nil {
			b.Fatal(err)
		}
		began = time.Now()
		if _, err := set.Evaluate(b.Context(), map[string]any{"install": "acme", "component": "bench", "type": schemas.TypeManifests, "plan": plan}); err != nil {
			b.Fatal(err)
		}
		evaluate += time.Since(began)
		run(v1, &schemas.JobPlan{Mode: schemas.PlanApplyMode, Hash: res.Plan.Hash})
		began = time.Now()
		res = run(v2, &schemas.JobPlan{Mode: schemas.PlanRecordMode})
		recordUpdate += time.Since(began)
		if c := res.Plan.Summary.Counts[schemas.ChangeUpdate]; c != 50 {
			b.Fatalf("%d updates, want 50", c)
		}
		rj, _ = json.Marshal(res.Plan)
		updBytes = len(rj)
	}
	runs := float64(b.N)
	b.ReportMetric(float64(recBytes), "record-bytes")
	b.ReportMetric(float64(savedBytes), "saved-bytes")
	b.ReportMetric(float64(updBytes), "update-record-bytes")
	b.ReportMetric(recordCreate.Seconds()*1000/runs, "record-create-ms")
	b.ReportMetric(recordUpdate.Seconds()*1000/runs, "record-update-ms")
	b.ReportMetric(evaluate.Seconds()*1000/runs, "policy-ms")
}

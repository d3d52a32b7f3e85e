package agent_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/schemas"
)

// applyClock is a job runner that notes when the first apply of a saved
// plan starts.
type applyClock struct {
	jobs.Runner
	mu      sync.Mutex
	started time.Time
}

func (c *applyClock) Run(ctx context.Context, job *schemas.Job, dir string) (*schemas.JobResult, error) {
	if job.Plan != nil && job.Plan.Mode == schemas.PlanApplyMode {
		c.mu.Lock()
		if c.started.IsZero() {
			c.started = time.Now()
		}
		c.mu.Unlock()
	}
	return c.Runner.Run(ctx, job, dir)
}

func (c *applyClock) take() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.started
	c.started = time.Time{}
	return t
}

// BenchmarkApproveToApply measures, for a replace of db waiting for
// approval, the time from filing the signed approval (what `nuon approve`
// does: sign, commit to the approvals ref) through the render that puts
// it in the install's desired state, to the agent's pass starting the
// apply job of the saved plan (approve-ms: signing, commit and render;
// to-apply-ms: the pass up to the apply's start, fetch and verification of
// the new desired commit and the judging of the approval included;
// total-ms). Bytes: the signed approval as filed (approval-bytes) and the
// install's approvals.json in its desired tree (approvals-json-bytes).
//
//	go test -run '^$' -bench BenchmarkApproveToApply -benchtime=1x ./agent/
func BenchmarkApproveToApply(b *testing.B) {
	clk := &applyClock{}
	app := newApprovalAppOf(b, dbModule, `    inputs: {size: "${install.inputs.size}"}
    approval: {}
`, func(c *agent.Config) { clk.Runner = c.Runner; c.Runner = clk })
	tn, ia := app.tn, app.ia
	ia.reconcile(b) // the create, auto-approved
	size := []string{"large", "small"}
	var approve, toApply time.Duration
	var approvalBytes, jsonBytes int64
	i := 0
	for b.Loop() {
		setSize(tn, size[i%2])
		i++
		tn.commit("acme: db " + size[i%2])
		tn.renderMain()
		ia.reconcile(b)
		plan := serverStatus(b, tn).Components["db"].Plan
		if plan == nil {
			b.Fatal("no plan waits")
		}
		before := dirSize(b, app.approvals)
		clk.take()
		began := time.Now()
		app.file(b, "approver", schemas.Approval{Plan: plan.Hash})
		filed := time.Now()
		rep := ia.reconcile(b)
		started := clk.take()
		if started.IsZero() || len(rep.Jobs) != 1 || rep.Jobs[0].Plan.Hash != plan.Hash {
			b.Fatalf("the approval did not start the apply of %s: %v", plan.Hash, jobKinds(rep))
		}
		approve += filed.Sub(began)
		toApply += started.Sub(filed)
		approvalBytes += dirSize(b, app.approvals) - before
		jsonBytes = int64(len(tn.git("show", schemas.InstallRef("acme")+":"+schemas.ApprovalsFile)))
	}
	n := float64(b.N)
	b.ReportMetric(approve.Seconds()*1000/n, "approve-ms")
	b.ReportMetric(toApply.Seconds()*1000/n, "to-apply-ms")
	b.ReportMetric((approve+toApply).Seconds()*1000/n, "total-ms")
	b.ReportMetric(float64(approvalBytes)/n, "approval-bytes")
	b.ReportMetric(float64(jsonBytes), "approvals-json-bytes")
}

func dirSize(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

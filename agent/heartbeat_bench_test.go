package agent_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// BenchmarkHeartbeat measures what an idle install's heartbeat adds to
// the tenant repository: the objects of each heartbeat commit (commit,
// root tree, status.json) as the git server stores them
// (objectsize:disk), and that per day at the default 10m interval. Each
// op is 20 heartbeats of the four-component test install.
func BenchmarkHeartbeat(b *testing.B) {
	tn := newTenant(b)
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	a := tn.agent("acme", func(c *agent.Config) { c.Now = clk.Now; c.Heartbeat = 10 * time.Minute })
	if _, err := a.Reconcile(context.Background()); err != nil {
		b.Fatal(err)
	}
	const beats = 20
	var bytes, commits int
	for b.Loop() {
		start := gittest.Git(b, tn.bare, "rev-parse", schemas.StatusRef("acme"))
		for range beats {
			clk.Set(clk.Now().Add(10 * time.Minute))
			rep, err := a.Reconcile(context.Background())
			if err != nil || rep.Idle || rep.Status.Heartbeat == nil {
				b.Fatalf("no heartbeat: %v %+v", err, rep)
			}
		}
		end := gittest.Git(b, tn.bare, "rev-parse", schemas.StatusRef("acme"))
		objs := gittest.Git(b, tn.bare, "rev-list", "--objects", start+".."+end)
		var ids strings.Builder
		for _, line := range strings.Split(objs, "\n") {
			if f := strings.Fields(line); len(f) > 0 {
				ids.WriteString(f[0] + "\n")
			}
		}
		out, err := gittest.Run(tn.bare, []byte(ids.String()), "cat-file", "--batch-check=%(objectsize:disk)")
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range strings.Fields(string(out)) {
			n, _ := strconv.Atoi(s)
			bytes += n
		}
		commits += beats
	}
	per := float64(bytes) / float64(commits)
	b.ReportMetric(per, "bytes/heartbeat")
	b.ReportMetric(per*24*6, "bytes/install/day@10m")
}

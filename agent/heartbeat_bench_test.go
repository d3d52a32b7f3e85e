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

// BenchmarkHeartbeat measures what an idle install's heartbeat keeps in
// the tenant repository on a plain git host: the objects its refs reach
// (status and liveness), as the git server stores them
// (objectsize:disk), before and after 20 beats at 10m (one op). Beats
// replace the liveness ref's one commit and write no status, so what is
// kept does not grow with time (bytes-kept/install/day: 0); each beat
// sends one commit (bytes/heartbeat), which the host's gc drops once it
// is replaced. Through nuon server no beat is written at all.
func BenchmarkHeartbeat(b *testing.B) {
	tn := newTenant(b)
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	a := tn.agent("acme", func(c *agent.Config) { c.Now = clk.Now; c.Heartbeat = 10 * time.Minute })
	if _, err := a.Reconcile(context.Background()); err != nil {
		b.Fatal(err)
	}
	// A first beat makes the liveness ref: its one commit is what every
	// later beat replaces.
	clk.Set(clk.Now().Add(10 * time.Minute))
	if rep, err := a.Reconcile(context.Background()); err != nil || rep.Heartbeat.IsZero() {
		b.Fatalf("first beat: %v %+v", err, rep)
	}
	refs := []string{schemas.StatusRef("acme"), schemas.LivenessRef("acme")}
	kept := func() int {
		args := []string{"rev-list", "--objects", refs[0]}
		if _, err := gittest.Run(tn.bare, nil, "rev-parse", "--verify", "--quiet", refs[1]); err == nil {
			args = append(args, refs[1])
		}
		return diskSize(b, tn.bare, gittest.Git(b, tn.bare, args...))
	}
	const beats = 20
	var grown, beatBytes, n int
	for b.Loop() {
		before := kept()
		for range beats {
			clk.Set(clk.Now().Add(10 * time.Minute))
			rep, err := a.Reconcile(context.Background())
			if err != nil || !rep.Idle || rep.Heartbeat.IsZero() {
				b.Fatalf("no heartbeat: %v %+v", err, rep)
			}
			beatBytes += diskSize(b, tn.bare, gittest.Git(b, tn.bare, "rev-list", "--objects", rep.Heartbeat.String()))
		}
		grown += kept() - before
		n += beats
	}
	b.ReportMetric(float64(beatBytes)/float64(n), "bytes/heartbeat")
	b.ReportMetric(float64(grown)/float64(n)*24*6, "bytes-kept/install/day@10m")
}

// diskSize sums objectsize:disk of the objects rev-list listed.
func diskSize(b *testing.B, repo, objs string) int {
	var ids strings.Builder
	for _, line := range strings.Split(objs, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			ids.WriteString(f[0] + "\n")
		}
	}
	out, err := gittest.Run(repo, []byte(ids.String()), "cat-file", "--batch-check=%(objectsize:disk)")
	if err != nil {
		b.Fatal(err)
	}
	total := 0
	for _, s := range strings.Fields(string(out)) {
		v, _ := strconv.Atoi(s)
		total += v
	}
	return total
}

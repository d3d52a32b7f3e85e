package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/trusttest"
	"nuon.dev/nuon/trust"
)

// BenchmarkIdlePollTrustRoot measures the idle poll of an agent that
// follows the trust root, beside one given the deprecated trust file: a
// whole reconcile whose desired ref did not move, after the agent took a
// render carrying 1 or 10 versions of the root. The root's signatures
// are checked only when the desired ref moves, so the idle poll costs the
// same with the root as without it, whatever the chain's length: one
// small request and no verification. Run with -benchmem: the allocations
// per poll are the same in every case, where a chain walk of 10 versions
// (trust's BenchmarkChain, about a millisecond) would add its own.
func BenchmarkIdlePollTrustRoot(b *testing.B) {
	for _, versions := range []int{0, 1, 10} {
		name := "trust=file"
		if versions > 0 {
			name = fmt.Sprintf("root-versions=%d", versions)
		}
		b.Run(name, func(b *testing.B) {
			base := time.Now().UTC().Truncate(time.Second)
			tn := newTenant(b)
			var given *trust.Root
			if versions > 0 {
				for v := int64(1); v <= int64(versions); v++ {
					file := rootV(v, base, trusttest.RenderKey{Name: "render-a"}).File(b, "root-1", "root-2")
					tn.publishRoot(v, file)
					if v == 1 {
						var err error
						if given, err = trust.Parse(trust.FileName(1), file); err != nil {
							b.Fatal(err)
						}
					}
				}
				tn.render = trusttest.Key(b, "render-a")
			}
			tn.renderMain()
			a := tn.agentIn("acme", b.TempDir(), func(c *agent.Config) {
				if given != nil {
					c.Trust, c.TrustRoot = nil, given
				}
			})
			first, err := a.Reconcile(context.Background())
			if err != nil || first.Status.Refusal != nil {
				b.Fatalf("first poll: %v, refusal %+v", err, first.Status.Refusal)
			}
			if given != nil && a.Root().Version != int64(versions) {
				b.Fatalf("agent holds root version %d, want %d", a.Root().Version, versions)
			}
			tn.srv.Reset()
			for b.Loop() {
				rep, err := a.Reconcile(context.Background())
				if err != nil || !rep.Idle {
					b.Fatalf("poll: idle %v, %v", rep.Idle, err)
				}
			}
			b.ReportMetric(float64(tn.srv.Requests())/float64(b.N), "requests/op")
			b.ReportMetric(float64(tn.srv.Bytes())/float64(b.N), "bytes/op")
		})
	}
}

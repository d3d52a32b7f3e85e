package renderer_test

import (
	"bytes"
	"context"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

// BenchmarkRenderPinChange renders 10,000 installs whose channel stable
// has a rollout, its state a baseline of its pins, then changes stable's
// database pin on main and times the render that follows (ms/pin-change,
// its CPU time cpu-ms/pin-change): the rollout state gives every install
// its pins, so none moves (it checks), and the render need read none.
func BenchmarkRenderPinChange(b *testing.B) {
	const n = 10000
	files := fleet(b, n)
	files["channels/stable.yaml"] = append(files["channels/stable.yaml"], stableRollout...)
	dir := filepath.Join(b.TempDir(), "tenant.git")
	gittest.InitBare(b, dir)
	r, err := gitrepo.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	source := commitFiles(b, r, "refs/heads/main", plumbing.ZeroHash, files)
	pins := map[string]string{"network": "1.0.0", "database": "1.0.0", "api-image": "2.3.0", "api": "2.3.0", "dashboards": "1.1.0"}
	s := &schemas.RolloutState{APIVersion: schemas.APIVersion, Kind: schemas.KindRolloutState, Channel: "stable", Rollout: 0,
		Phase: schemas.RolloutFinished, From: pins, To: pins, Waves: []schemas.RolloutWaveState{},
		Decision: schemas.RolloutDecision{Kind: schemas.DecisionBaseline, At: renderTime, By: rollout.By}}
	batch := gitobj.NewBatch()
	tip, err := rollout.Commit(batch, plumbing.ZeroHash, s, loadSigner(b, "render"), object.Signature{Name: "nuon server", Email: "server@nuon.invalid", When: renderTime})
	if err != nil {
		b.Fatal(err)
	}
	if err := batch.Flush(r.Storer()); err != nil {
		b.Fatal(err)
	}
	if err := r.Apply(ctx, []gitrepo.Update{{Name: plumbing.ReferenceName(schemas.RolloutRef("stable")), New: tip}}); err != nil {
		b.Fatal(err)
	}
	opts := options(b)
	opts.Rollouts = map[string]plumbing.Hash{"stable": tip}
	render := func() *renderer.Result {
		repo, err := gitrepo.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		res, err := renderRepo(ctx, repo, "refs/heads/main", opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := apply(ctx, repo, res, res.Updates); err != nil {
			b.Fatal(err)
		}
		return res
	}
	if res := render(); res.ChangedCount() != n {
		b.Fatalf("cold render moved %d installs", res.ChangedCount())
	}
	var wall, cpu time.Duration
	loops := 0
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		from, to := "database: 1.0.0", "database: 1.1.0"
		if i%2 == 1 {
			from, to = to, from
		}
		files["channels/stable.yaml"] = bytes.Replace(files["channels/stable.yaml"], []byte(from), []byte(to), 1)
		source = commitFiles(b, r, "refs/heads/main", source, files)
		runtime.GC()
		c0, t0 := cpuTime(b), time.Now()
		b.StartTimer()
		res := render()
		b.StopTimer()
		wall += time.Since(t0)
		cpu += cpuTime(b) - c0
		loops++
		if res.ChangedCount() != 0 {
			b.Fatalf("the pin change moved %d installs", res.ChangedCount())
		}
		b.Logf("pin change: incremental %v, %d installs rendered", res.Incremental, len(res.Installs))
		b.StartTimer()
	}
	b.ReportMetric(float64(wall.Microseconds())/1000/float64(loops), "ms/pin-change")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(loops), "cpu-ms/pin-change")
}

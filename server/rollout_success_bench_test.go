package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

// rolloutSizes are the fleet sizes of the success benchmarks: 10,000,
// or those NUON_BENCH_ROLLOUT_SIZES lists (make bench-rollout: 10,000
// and 100,000).
func rolloutSizes(tb testing.TB) []int {
	s := os.Getenv("NUON_BENCH_ROLLOUT_SIZES")
	if s == "" {
		return []int{10000}
	}
	var out []int
	for f := range splitComma(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			tb.Fatalf("NUON_BENCH_ROLLOUT_SIZES: %q is not a fleet size", f)
		}
		out = append(out, n)
	}
	return out
}

func splitComma(s string) func(func(string) bool) {
	return func(yield func(string) bool) {
		start := 0
		for i := 0; i <= len(s); i++ {
			if i == len(s) || s[i] == ',' {
				if i > start && !yield(s[start:i]) {
					return
				}
				start = i + 1
			}
		}
	}
}

// BenchmarkRolloutMainChange measures what the rollout controller does
// when main moves: it assigns every channel's waves again. A pin change
// (no install file changed) and an install added are each timed, after
// a first read of main.
func BenchmarkRolloutMainChange(b *testing.B) {
	for _, n := range rolloutSizes(b) {
		b.Run(fmt.Sprintf("installs=%d", n), func(b *testing.B) {
			f := newRolloutFleetLoop(b, n, rollout.Halt, false)
			ctx := context.Background()
			must(b, f.srv.LoadRollouts(ctx))
			var pin, add time.Duration
			var pinCPU, addCPU time.Duration
			for i := 0; b.Loop(); i++ {
				from, to := "1.0.0", "1.1.0"
				if i%2 == 1 {
					from, to = to, from
				}
				f.commitPin(from, to)
				c0, t0 := cpuTime(), time.Now()
				must(b, f.srv.LoadRollouts(ctx))
				pin, pinCPU = time.Since(t0), cpuTime()-c0

				id := fmt.Sprintf("added%04d", i)
				y := fmt.Sprintf("channel: stable\ninputs: {cidr: 10.0.0.0/16, domain: %s.shop.example}\ncloud: {provider: aws, region: us-east-1, accountID: \"111111111111\"}\nsandbox: {name: aws-eks, version: 0.4.0}\nregistry: 111111111111.dkr.ecr.us-east-1.amazonaws.com/nuon-%s\nagentKey: %s\n", id, id, f.key.AuthorizedKey())
				must(b, os.WriteFile(filepath.Join(f.src, "installs", id+".yaml"), []byte(y), 0o644))
				gittest.CommitDir(b, f.dir, "main", f.src, "add "+id)
				c0, t0 = cpuTime(), time.Now()
				must(b, f.srv.LoadRollouts(ctx))
				add, addCPU = time.Since(t0), cpuTime()-c0
			}
			b.ReportMetric(float64(pin.Milliseconds()), "ms/pin-change")
			b.ReportMetric(float64(pinCPU.Milliseconds()), "cpu-ms/pin-change")
			b.ReportMetric(float64(add.Milliseconds()), "ms/install-added")
			b.ReportMetric(float64(addCPU.Milliseconds()), "cpu-ms/install-added")
		})
	}
}

// rolloutWatcher is one install's agent polling as agents do: the tip of
// its install ref, and a fetch of the commit when it moved. It talks to
// the fleet's counting listener, one watcher at a time, so that the
// bytes of each poll are known.
type rolloutWatcher struct {
	f      *rolloutFleet
	id     string
	st     *memory.Storage
	remote agent.Remote
	head   plumbing.Hash
}

func (f *rolloutFleet) watcher(id string) *rolloutWatcher {
	return &rolloutWatcher{f: f, id: id, st: memory.NewStorage(),
		remote: agent.NewRemote(f.watchURL, agent.WithRequestSigner(&request.Signer{Install: id, Key: f.key}))}
}

// poll polls once and returns the bytes it cost both ways and whether
// the install's desired commit moved.
func (w *rolloutWatcher) poll(ctx context.Context) (int64, bool) {
	w.f.tb.Helper()
	before := w.f.watched.in.Load() + w.f.watched.out.Load()
	ref := plumbing.ReferenceName(schemas.InstallRef(w.id))
	heads, err := w.remote.Heads(ctx, ref)
	must(w.f.tb, err)
	h := heads[ref]
	moved := h != w.head
	if moved {
		must(w.f.tb, w.remote.Fetch(ctx, w.st, h))
		must(w.f.tb, w.st.SetReference(plumbing.NewHashReference("refs/nuon/desired", h)))
		w.head = h
	}
	return w.f.watched.in.Load() + w.f.watched.out.Load() - before, moved
}

// successRun is what a rollout that succeeds end to end measured.
type successRun struct {
	waves [4]int
	// open[0] is the evaluation that starts the rollout, open[k] the one
	// whose decision opens wave k+1 (finishes, for k = 4), on the last
	// install's status: the decision, its signed commit and the render of
	// the wave's installs.
	open    [5]time.Duration
	openCPU [5]time.Duration
	// idleCPU[k] is an evaluation's CPU with wave k+1 open and no status
	// changed; changeCPU[k] one's with statusBatch statuses changed: the
	// CPU of the controller's own thread (EvaluateRolloutsCPU).
	idleCPU, changeCPU [4]time.Duration
	batch              [4]int
	// read[k] is the evaluation that reads the statuses of all but one
	// of wave k+1's installs (pushed since the last one), readCPU its
	// process CPU and readThread the controller's own.
	read, readCPU, readThread [4]time.Duration
	// pollMoving are the bytes of a poll of an install whose wave just
	// opened (its new commit fetched); pollOutside those of each poll of
	// an install outside the moving wave, and outsideMoved how many of
	// those polls saw their desired commit move (must be 0: then the poll
	// is one ls-refs exchange and nothing is fetched).
	pollMoving   [4]int64
	pollOutside  []int64
	outsideMoved int
}

// statusBatch is how many statuses change before an evaluation whose CPU
// is measured: fixed, so that the figure compares across fleet sizes.
const statusBatch = 50

// runSuccess drives a release of database 1.1.0 through a fleet of n
// installs whose agents all report healthy, evaluating the controller by
// hand between the steps so that each evaluation's cost is its own.
func runSuccess(tb testing.TB, n int) successRun {
	var run successRun
	f := newRolloutFleetLoop(tb, n, rollout.Halt, false)
	ctx := context.Background()
	if _, err := f.srv.EvaluateRollouts(ctx); err != nil {
		tb.Fatal(err)
	}
	f.waitFor(schemas.DecisionBaseline, time.Minute)
	// One watcher in each wave, from the assignment the controller makes.
	data, err := os.ReadFile(filepath.Join(f.src, "channels", "stable.yaml"))
	must(tb, err)
	p, err := rollout.Parse("channels/stable.yaml", data)
	must(tb, err)
	ids := make([]rollout.Install, n)
	for i := range n {
		ids[i] = rollout.Install{ID: benchInstall(i)}
	}
	assigned, err := rollout.Assign(p, ids)
	must(tb, err)
	var watchers [4]*rolloutWatcher
	for k, w := range assigned.Waves {
		watchers[k] = f.watcher(w.Installs[len(w.Installs)/2])
		watchers[k].poll(ctx)
	}
	f.pin("1.0.0", "1.1.0")
	for k, w := range watchers {
		if _, moved := w.poll(ctx); moved {
			tb.Fatalf("wave %d's %s moved on the pin change, before the rollout started", k+1, w.id)
		}
	}
	decide := func(kind string) (time.Duration, time.Duration) {
		tb.Helper()
		c0, t0 := cpuTime(), time.Now()
		out, err := f.srv.EvaluateRollouts(ctx)
		el, cpu := time.Since(t0), cpuTime()-c0
		must(tb, err)
		if len(out) != 1 || out[0].Decision.Kind != kind {
			s, _ := f.state()
			tb.Fatalf("evaluation decided %d, not %s; state %+v", len(out), kind, s.Decision)
		}
		return el, cpu
	}
	run.open[0], run.openCPU[0] = decide(schemas.DecisionStarted)
	for k := range 4 {
		s, _ := f.state()
		run.waves[k] = s.Waves[k].Size
		wave := s.Waves[k].Installs
		if !slices.Equal(wave, assigned.Waves[k].Installs) {
			tb.Fatalf("wave %d is not the assignment's", k+1)
		}
		for j, w := range watchers {
			b, moved := w.poll(ctx)
			switch {
			case j == k && !moved:
				tb.Fatalf("wave %d's %s did not move when its wave opened", k+1, w.id)
			case j == k:
				run.pollMoving[k] = b
			default:
				run.pollOutside = append(run.pollOutside, b)
				if moved {
					run.outsideMoved++
				}
			}
		}
		commits, versions := f.desired(wave...)
		for _, id := range wave {
			if versions[id] != "1.1.0" {
				tb.Fatalf("wave %d's %s has %s after its wave opened", k+1, id, versions[id])
			}
		}
		// An evaluation with nothing changed, then one with statusBatch
		// statuses changed (none decides: the wave is not all healthy).
		const idle = 10
		for range idle {
			out, cpu, err := f.srv.EvaluateRolloutsCPU(ctx)
			if err != nil || len(out) > 0 {
				tb.Fatalf("an idle evaluation decided %d: %v", len(out), err)
			}
			run.idleCPU[k] += cpu / idle
		}
		if batch := min(statusBatch, len(wave)-1); batch > 0 {
			f.pushAll(wave[:batch], commits, true, nil)
			out, cpu, err := f.srv.EvaluateRolloutsCPU(ctx)
			if err != nil || len(out) > 0 {
				tb.Fatalf("an evaluation of %d statuses decided %d: %v", batch, len(out), err)
			}
			run.changeCPU[k], run.batch[k] = cpu, batch
			wave = wave[batch:]
		}
		// All but one report: the evaluation reads their statuses and
		// decides nothing. The last one's report then decides, and its
		// evaluation's time is the decision and the render of the wave it
		// opens.
		f.pushAll(wave[:len(wave)-1], commits, true, nil)
		c0, t0 := cpuTime(), time.Now()
		out, cpu, err := f.srv.EvaluateRolloutsCPU(ctx)
		if err != nil || len(out) > 0 {
			tb.Fatalf("an evaluation with one install of wave %d waiting decided %d: %v", k+1, len(out), err)
		}
		run.read[k], run.readCPU[k], run.readThread[k] = time.Since(t0), cpuTime()-c0, cpu
		f.pushAll(wave[len(wave)-1:], commits, true, nil)
		kind := schemas.DecisionPassed
		if k == 3 {
			kind = schemas.DecisionFinished
		}
		run.open[k+1], run.openCPU[k+1] = decide(kind)
	}
	_, versions := f.desired()
	for id, v := range versions {
		if v != "1.1.0" {
			tb.Fatalf("%s has %s after the rollout finished", id, v)
		}
	}
	return run
}

// TestRolloutSuccess runs the success benchmark's release through a
// fleet of 400: every wave passes on its installs' healthy status, each
// install moves only when its wave opens, and the rollout finishes with
// every install on the new version.
func TestRolloutSuccess(t *testing.T) {
	run := runSuccess(t, 400)
	if run.outsideMoved != 0 {
		t.Fatalf("%d polls of installs outside the moving wave saw a change", run.outsideMoved)
	}
	t.Logf("%+v", run)
}

// BenchmarkRolloutSuccess measures a release that succeeds end to end
// through fleets of 10,000 installs (NUON_BENCH_ROLLOUT_SIZES lists
// others: make bench-rollout adds 100,000), waves of 1 %, 10 %, 50 % and
// the rest, every agent pushing healthy signed status through the real
// server: each decision's time with the render of the wave it opens, the
// controller's CPU per evaluation with nothing changed and per status
// changed, and the bytes an agent's poll costs inside and outside the
// moving wave.
func BenchmarkRolloutSuccess(b *testing.B) {
	for _, n := range rolloutSizes(b) {
		b.Run(fmt.Sprintf("installs=%d", n), func(b *testing.B) {
			var run successRun
			for b.Loop() {
				run = runSuccess(b, n)
			}
			if run.outsideMoved != 0 {
				b.Fatalf("%d polls of installs outside the moving wave saw a change", run.outsideMoved)
			}
			for k := range 4 {
				b.ReportMetric(float64(run.waves[k]), fmt.Sprintf("wave%d-installs", k+1))
			}
			b.ReportMetric(float64(run.open[0].Milliseconds()), "ms-start-wave1")
			for k := 1; k < 4; k++ {
				b.ReportMetric(float64(run.open[k].Milliseconds()), fmt.Sprintf("ms-open-wave%d", k+1))
			}
			b.ReportMetric(float64(run.open[4].Milliseconds()), "ms-finish")
			for k := range 4 {
				b.ReportMetric(float64(run.read[k].Milliseconds()), fmt.Sprintf("ms-read-wave%d", k+1))
				b.ReportMetric(float64(run.readThread[k].Milliseconds()), fmt.Sprintf("cpu-ms-read-wave%d", k+1))
			}
			var per float64
			var stages int
			for k := range 4 {
				b.ReportMetric(float64(run.idleCPU[k].Microseconds()), fmt.Sprintf("cpu-µs/idle-eval-wave%d", k+1))
				if run.batch[k] > 0 {
					b.ReportMetric(float64(run.changeCPU[k].Microseconds()), fmt.Sprintf("cpu-µs/eval-of-%d-wave%d", run.batch[k], k+1))
					per += float64((run.changeCPU[k] - run.idleCPU[k]).Microseconds()) / float64(run.batch[k])
					stages++
				}
			}
			if stages > 0 {
				b.ReportMetric(per/float64(stages), "cpu-µs/status-change")
			}
			var moving int64
			for _, m := range run.pollMoving {
				moving += m
			}
			b.ReportMetric(float64(moving/4), "B/poll-moving")
			slices.Sort(run.pollOutside)
			b.ReportMetric(float64(run.pollOutside[len(run.pollOutside)/2]), "B/poll-outside-median")
			b.ReportMetric(float64(run.pollOutside[len(run.pollOutside)-1]), "B/poll-outside-max")
			b.ReportMetric(float64(run.outsideMoved), "outside-moved")
		})
	}
}

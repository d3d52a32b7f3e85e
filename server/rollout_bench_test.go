package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// rolloutFleet is a tenant of n installs on channel stable, whose
// rollout has waves of 1 %, 10 %, 50 % and the rest (no bake, no failure
// budget; wave 2 does onFailure), served by a rendering server with its
// rollout controller running, and simulated agents that push real
// signed status over HTTP.
type rolloutFleet struct {
	tb    testing.TB
	n     int
	dir   string
	src   string
	srv   *server.Server
	url   string
	key   *signature.Signer
	heads sync.Map // install → its status ref's tip
	// watchURL is served on a listener of its own, which counts the
	// bytes of the agents that watch (rolloutWatcher).
	watchURL string
	watched  *countingListener
}

func newRolloutFleet(tb testing.TB, n int, onFailure string) *rolloutFleet {
	tb.Helper()
	return newRolloutFleetLoop(tb, n, onFailure, true)
}

// newRolloutFleetLoop is newRolloutFleet; without loop, the server's
// loops (the rollout controller's among them) do not run, and the
// controller evaluates only when EvaluateRollouts is called.
func newRolloutFleetLoop(tb testing.TB, n int, onFailure string, loop bool) *rolloutFleet {
	tb.Helper()
	f := &rolloutFleet{tb: tb, n: n}
	f.key, _ = loadKey(tb, "acme")
	render, _ := loadKey(tb, "render")
	root := tb.TempDir()
	f.dir = filepath.Join(root, "tenant.git")
	f.src = filepath.Join(root, "src")
	gittest.InitBare(tb, f.dir)
	for _, name := range []string{"nuon.yaml", "releases", "channels"} {
		if err := os.CopyFS(filepath.Join(f.src, name), os.DirFS(filepath.Join(fixtureTenant, name))); err != nil && name != "nuon.yaml" {
			tb.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(fixtureTenant, "nuon.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	os.RemoveAll(filepath.Join(f.src, "nuon.yaml"))
	must(tb, os.WriteFile(filepath.Join(f.src, "nuon.yaml"), b, 0o644))
	ch, err := os.ReadFile(filepath.Join(f.src, "channels", "stable.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	ch = append(ch, fmt.Sprintf(`rollout:
  waves:
    - {name: one, percent: 1}
    - {name: ten, percent: 10, onFailure: %s}
    - {name: fifty, percent: 50}
    - {name: rest, rest: true}
`, onFailure)...)
	must(tb, os.WriteFile(filepath.Join(f.src, "channels", "stable.yaml"), ch, 0o644))
	must(tb, os.MkdirAll(filepath.Join(f.src, "installs"), 0o755))
	for i := range n {
		id := benchInstall(i)
		y := fmt.Sprintf("channel: stable\ninputs: {cidr: 10.0.0.0/16, domain: %s.shop.example}\ncloud: {provider: aws, region: us-east-1, accountID: \"111111111111\"}\nsandbox: {name: aws-eks, version: 0.4.0}\nregistry: 111111111111.dkr.ecr.us-east-1.amazonaws.com/nuon-%s\nagentKey: %s\n", id, id, f.key.AuthorizedKey())
		must(tb, os.WriteFile(filepath.Join(f.src, "installs", id+".yaml"), []byte(y), 0o644))
	}
	gittest.CommitDir(tb, f.dir, "main", f.src, "fleet")
	// NUON_BENCH_ROLLOUT_LOG names a file for the server's log.
	var logw io.Writer = io.Discard
	if p := os.Getenv("NUON_BENCH_ROLLOUT_LOG"); p != "" {
		lf, err := os.Create(p)
		must(tb, err)
		tb.Cleanup(func() { lf.Close() })
		logw = lf
	}
	srv, err := server.New(context.Background(), server.Config{Dir: f.dir, RenderKey: render, PollInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(logw, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	f.srv = srv
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Sync(ctx); err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	wl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	f.watched = &countingListener{Listener: wl}
	hs := &http.Server{Handler: srv}
	go hs.Serve(ln)
	go hs.Serve(f.watched)
	done := make(chan struct{})
	if loop {
		go func() { srv.Run(ctx); close(done) }()
	} else {
		close(done)
	}
	tb.Cleanup(func() { hs.Close(); cancel(); <-done; srv.Close() })
	f.url = "http://" + ln.Addr().String() + "/tenant.git"
	f.watchURL = "http://" + wl.Addr().String() + "/tenant.git"
	return f
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// pin moves stable's database pin on main and has the server follow.
func (f *rolloutFleet) pin(from, to string) {
	f.tb.Helper()
	f.commitPin(from, to)
	must(f.tb, f.srv.Sync(context.Background()))
}

// commitPin moves stable's database pin on main.
func (f *rolloutFleet) commitPin(from, to string) {
	f.tb.Helper()
	p := filepath.Join(f.src, "channels", "stable.yaml")
	b, err := os.ReadFile(p)
	must(f.tb, err)
	must(f.tb, os.WriteFile(p, []byte(strings.Replace(string(b), "database: "+from, "database: "+to, 1)), 0o644))
	gittest.CommitDir(f.tb, f.dir, "main", f.src, "stable: database "+to)
}

// state reads stable's rollout state from the repository.
func (f *rolloutFleet) state() (*schemas.RolloutState, plumbing.Hash) {
	f.tb.Helper()
	repo, err := gitrepo.Open(f.dir)
	must(f.tb, err)
	tip, err := repo.Ref(plumbing.ReferenceName(schemas.RolloutRef("stable")))
	must(f.tb, err)
	if tip.IsZero() {
		return nil, tip
	}
	render, _ := loadKey(f.tb, "render")
	s, err := rollout.Read(repo.Storer(), "stable", tip, &signature.AllowedSigners{Signers: []signature.AllowedSigner{{Principals: []string{"r"}, Key: render.PublicKey()}}})
	must(f.tb, err)
	return s, tip
}

// waitFor waits until the rollout state's last decision is kind and
// returns it and when it was seen.
func (f *rolloutFleet) waitFor(kind string, within time.Duration) (*schemas.RolloutState, time.Time) {
	f.tb.Helper()
	deadline := time.Now().Add(within)
	for {
		if s, _ := f.state(); s != nil && s.Decision.Kind == kind {
			return s, time.Now()
		}
		if time.Now().After(deadline) {
			s, _ := f.state()
			f.tb.Fatalf("no %s decision within %s; last: %+v", kind, within, s)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// desired reads every install ref's commit and its database version, or
// those of ids only.
func (f *rolloutFleet) desired(ids ...string) (map[string]plumbing.Hash, map[string]string) {
	f.tb.Helper()
	repo, err := gitrepo.Open(f.dir)
	must(f.tb, err)
	refs, err := repo.RefList(schemas.InstallRefPrefix)
	must(f.tb, err)
	commits, versions := map[string]plumbing.Hash{}, map[string]string{}
	st := repo.Storer()
	only := map[string]bool{}
	for _, id := range ids {
		only[id] = true
	}
	for _, r := range refs {
		id := strings.TrimPrefix(r.Name, schemas.InstallRefPrefix)
		if len(only) > 0 && !only[id] {
			continue
		}
		commits[id] = r.Hash
		c, err := gitobj.ReadCommit(st, r.Hash)
		must(f.tb, err)
		tree, err := gitobj.ReadTree(st, c.TreeHash)
		must(f.tb, err)
		e, err := tree.FindEntry(schemas.ComponentStateFile("database"))
		must(f.tb, err)
		data, err := gitobj.ReadBlob(st, e.Hash, 1<<20)
		must(f.tb, err)
		var cs schemas.ComponentState
		must(f.tb, json.Unmarshal(data, &cs))
		versions[id] = cs.Version
	}
	return commits, versions
}

// push has install id's agent push a status of its desired commit:
// applied and healthy, or its database failed.
func (f *rolloutFleet) push(ctx context.Context, id string, desired plumbing.Hash, healthy bool) error {
	st := memory.NewStorage()
	status := schemas.Status{APIVersion: schemas.APIVersion, Kind: "Status", Install: id, Desired: desired.String(), Applied: desired.String(),
		Generation: 1, Phase: schemas.InstallReady, Components: map[string]schemas.ComponentStatus{}}
	for _, c := range []string{"network", "database", "api-image", "api", "dashboards"} {
		status.Components[c] = schemas.ComponentStatus{Phase: schemas.PhaseApplied, Health: &schemas.Health{Status: schemas.HealthReady}}
	}
	if !healthy {
		status.Phase = schemas.InstallDegraded
		status.Components["database"] = schemas.ComponentStatus{Phase: schemas.PhaseFailed, Error: "terraform apply: engine version not supported"}
	}
	data, err := json.Marshal(status)
	if err != nil {
		return err
	}
	bt := gitobj.NewBatch()
	blob := bt.Add(plumbing.BlobObject, data)
	tree := bt.Tree([]gitobj.Entry{{Name: schemas.StatusFile, Hash: blob, Mode: 0o100644}})
	var parents []plumbing.Hash
	var head plumbing.Hash
	if h, ok := f.heads.Load(id); ok {
		head = h.(plumbing.Hash)
		parents = []plumbing.Hash{head}
	}
	who := object.Signature{Name: "nuon agent " + id, Email: id + "@nuon.invalid", When: time.Now()}
	h, err := bt.Commit(gitobj.Commit{Tree: tree, Parents: parents, Author: who,
		Message: fmt.Sprintf("status\n\n%s: %s\n", schemas.TrailerInstall, id)}, f.key)
	if err != nil {
		return err
	}
	if err := bt.Flush(st); err != nil {
		return err
	}
	ref := plumbing.ReferenceName(schemas.StatusRef(id))
	if err := st.SetReference(plumbing.NewHashReference(ref, h)); err != nil {
		return err
	}
	remote := agent.NewRemote(f.url, agent.WithRequestSigner(&request.Signer{Install: id, Key: f.key}))
	if err := remote.Push(ctx, st, ref, head, h); err != nil {
		return err
	}
	f.heads.Store(id, h)
	return nil
}

// pushAll pushes the statuses of ids, 16 at a time; first is called
// once, when the first push is acknowledged.
func (f *rolloutFleet) pushAll(ids []string, desired map[string]plumbing.Hash, healthy bool, first func()) {
	f.tb.Helper()
	var next atomic.Int64
	var once sync.Once
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ids) {
					return
				}
				if err := f.push(context.Background(), ids[i], desired[ids[i]], healthy); err != nil {
					errs <- fmt.Errorf("push %s: %w", ids[i], err)
					return
				}
				if first != nil {
					once.Do(first)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		f.tb.Fatal(err)
	}
}

// rolloutRun is what one run of the fleet's rollout measured.
type rolloutRun struct {
	toHalt     time.Duration // first failing status to the halt commit
	toRollback time.Duration // first failing status to wave 2 back on 1.0.0
	outside    int           // installs of waves 3 and 4 on 1.1.0
	waves      [4]int
	idleEval   time.Duration // an evaluation with nothing changed
	evalCPU    time.Duration
	// wave1 is the evaluation that starts the rollout, its render of wave
	// 1 included; wave2 from the commit that opens wave 2 to its installs'
	// refs all moved.
	wave1, wave2 time.Duration
}

// runRollout drives a release of database 1.1.0 through the fleet: wave
// 1 healthy, wave 2 failing.
func runRollout(tb testing.TB, n int, onFailure string) rolloutRun {
	var run rolloutRun
	f := newRolloutFleet(tb, n, onFailure)
	ctx := context.Background()
	if _, err := f.srv.EvaluateRollouts(ctx); err != nil {
		tb.Fatal(err)
	}
	f.waitFor(schemas.DecisionBaseline, time.Minute)
	f.pin("1.0.0", "1.1.0")
	t1 := time.Now()
	if _, err := f.srv.EvaluateRollouts(ctx); err != nil {
		tb.Fatal(err)
	}
	run.wave1 = time.Since(t1)
	s, _ := f.waitFor(schemas.DecisionStarted, time.Minute)
	for i, w := range s.Waves {
		run.waves[i] = w.Size
	}
	wave1, wave2 := s.Waves[0].Installs, []string(nil)
	commits, _ := f.desired()
	f.pushAll(wave1, commits, true, nil)
	s, seen := f.waitFor(schemas.DecisionPassed, 2*time.Minute)
	wave2 = s.Waves[1].Installs
	for {
		_, versions := f.desired(wave2...)
		moved := 0
		for _, v := range versions {
			if v == "1.1.0" {
				moved++
			}
		}
		if moved == len(wave2) {
			run.wave2 = time.Since(seen)
			break
		}
		if time.Since(seen) > 2*time.Minute {
			tb.Fatalf("%d of wave 2's %d installs moved", moved, len(wave2))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The wave's render is done once the controller is idle again.
	if _, err := f.srv.EvaluateRollouts(ctx); err != nil {
		tb.Fatal(err)
	}
	commits, versions := f.desired()
	for _, id := range wave2 {
		if versions[id] != "1.1.0" {
			tb.Fatalf("wave 2's %s has %s after its wave opened", id, versions[id])
		}
	}
	// An evaluation with no status changed: what a tick costs.
	const evals = 20
	cpu0, t0 := cpuTime(), time.Now()
	for range evals {
		if _, err := f.srv.EvaluateRollouts(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	run.idleEval, run.evalCPU = time.Since(t0)/evals, (cpuTime()-cpu0)/evals

	var firstFail atomic.Int64 // unix nanoseconds
	halted := make(chan struct{})
	kind := schemas.DecisionHalted
	if onFailure == rollout.Rollback {
		kind = schemas.DecisionRolledBack
	}
	go func() {
		defer close(halted)
		_, at := f.waitFor(kind, 2*time.Minute)
		for firstFail.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		run.toHalt = at.Sub(time.Unix(0, firstFail.Load()))
	}()
	f.pushAll(wave2, commits, false, func() { firstFail.Store(time.Now().UnixNano()) })
	<-halted
	if onFailure == rollout.Rollback {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			_, versions := f.desired(wave2...)
			back := 0
			for _, id := range wave2 {
				if versions[id] == "1.0.0" {
					back++
				}
			}
			if back == len(wave2) {
				run.toRollback = time.Since(time.Unix(0, firstFail.Load()))
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("%d of wave 2's %d installs back on 1.0.0", back, len(wave2))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if _, err := f.srv.EvaluateRollouts(ctx); err != nil {
		tb.Fatal(err)
	}
	_, versions = f.desired()
	in12 := map[string]bool{}
	for _, id := range append(append([]string{}, wave1...), wave2...) {
		in12[id] = true
	}
	for id, v := range versions {
		if !in12[id] && v != "1.0.0" {
			run.outside++
		}
	}
	return run
}

// TestRolloutFleet runs the benchmark's release through a fleet of 300:
// wave 1 passes on its installs' healthy status, wave 2's failures halt
// the rollout (or roll wave 2 back), and no install of waves 3 and 4 ever
// gets the new version.
func TestRolloutFleet(t *testing.T) {
	for _, onFailure := range []string{rollout.Halt, rollout.Rollback} {
		t.Run(onFailure, func(t *testing.T) {
			run := runRollout(t, 300, onFailure)
			if run.outside != 0 {
				t.Fatalf("%d installs outside waves 1-2 got the new version", run.outside)
			}
			t.Logf("waves %v, halt %s after the first failing status, rollback %s", run.waves, run.toHalt, run.toRollback)
		})
	}
}

// BenchmarkRolloutHalt measures a release through a fleet of
// NUON_BENCH_ROLLOUT_INSTALLS (default 10,000) installs, waves of 1 %,
// 10 %, 50 % and the rest, whose second wave reports a regression in
// signed status pushed through the real server: the time from the first
// failing status acknowledged to the halt commit, installs outside waves
// 1–2 that received the new version (must be 0), the same with
// onFailure: rollback and the time until wave 2 is back on the old
// version; and the wall and CPU time of a controller evaluation with no
// status changed.
func BenchmarkRolloutHalt(b *testing.B) {
	n := 10000
	if s := os.Getenv("NUON_BENCH_ROLLOUT_INSTALLS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for _, onFailure := range []string{rollout.Halt, rollout.Rollback} {
		b.Run(fmt.Sprintf("installs=%d/onFailure=%s", n, onFailure), func(b *testing.B) {
			var run rolloutRun
			for b.Loop() {
				run = runRollout(b, n, onFailure)
			}
			if run.outside != 0 {
				b.Fatalf("%d installs outside waves 1-2 got the new version", run.outside)
			}
			b.ReportMetric(float64(run.toHalt.Milliseconds()), "ms-to-halt")
			if onFailure == rollout.Rollback {
				b.ReportMetric(float64(run.toRollback.Milliseconds()), "ms-to-rollback")
			}
			b.ReportMetric(float64(run.outside), "outside-installs")
			b.ReportMetric(float64(run.waves[0]), "wave1")
			b.ReportMetric(float64(run.waves[1]), "wave2")
			b.ReportMetric(float64(run.idleEval.Microseconds()), "µs/idle-eval")
			b.ReportMetric(float64(run.wave1.Milliseconds()), "ms-start-wave1")
			b.ReportMetric(float64(run.wave2.Milliseconds()), "ms-open-wave2")
			b.ReportMetric(float64(run.evalCPU.Microseconds()), "cpu-µs/idle-eval")
		})
	}
}

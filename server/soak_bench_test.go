package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// envInt is the integer in the environment variable name, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// soakAgent is a simulated install agent for the soak: it polls its
// desired ref and, on a change, pushes a real signed status commit (a
// status.json and applied/<component>.json for four components, as the
// agent writes them) on top of its last one.
type soakAgent struct {
	id     string
	key    *signature.Signer
	st     *memory.Storage
	head   plumbing.Hash
	remote agent.Remote
	n      int
}

var soakPhases = []string{schemas.InstallReady, schemas.InstallDegraded, schemas.InstallReady, schemas.InstallReady}

func (a *soakAgent) push(ctx context.Context, when time.Time) error {
	a.n++
	b := gitobj.NewBatch()
	comps := map[string]schemas.ComponentStatus{}
	var applied []gitobj.Entry
	for _, c := range []string{"sandbox", "database", "api", "dashboards"} {
		cs := schemas.ComponentStatus{Phase: schemas.PhaseApplied, Version: fmt.Sprintf("1.%d.0", a.n)}
		comps[c] = cs
		body, _ := json.MarshalIndent(map[string]any{"component": c, "version": cs.Version, "outputs": map[string]string{"endpoint": c + "." + a.id + ".internal"}}, "", "  ")
		applied = append(applied, gitobj.Entry{Name: c + ".json", Mode: filemode.Regular, Hash: b.Add(plumbing.BlobObject, body)})
	}
	phase := soakPhases[a.n%len(soakPhases)]
	st := schemas.Status{APIVersion: schemas.APIVersion, Kind: schemas.KindStatus, Install: a.id, Generation: int64(a.n),
		Phase: phase, HeartbeatEvery: "10m0s", Components: comps}
	body, _ := json.MarshalIndent(st, "", "  ")
	tree := b.Tree([]gitobj.Entry{
		{Name: schemas.StatusFile, Mode: filemode.Regular, Hash: b.Add(plumbing.BlobObject, body)},
		{Name: schemas.AppliedDir, Mode: filemode.Dir, Hash: b.Tree(applied)},
	})
	who := object.Signature{Name: "nuon agent " + a.id, Email: a.id + "@agent.nuon.invalid", When: when}
	var parents []plumbing.Hash
	if !a.head.IsZero() {
		parents = []plumbing.Hash{a.head}
	}
	h, err := b.Commit(gitobj.Commit{Tree: tree, Parents: parents, Author: who,
		Message: fmt.Sprintf("nuon: status %s generation %d: %s\n\nApplied 4 components.\n\n%s: %s\n%s: %d\n", a.id, a.n, phase,
			schemas.TrailerInstall, a.id, schemas.TrailerGeneration, a.n)}, a.key)
	if err != nil {
		return err
	}
	if err := b.Flush(a.st); err != nil {
		return err
	}
	ref := plumbing.ReferenceName(schemas.StatusRef(a.id))
	if err := a.remote.Push(ctx, a.st, ref, a.head, h); err != nil {
		return err
	}
	a.head = h
	return nil
}

func (a *soakAgent) poll(ctx context.Context) error {
	_, err := a.remote.Heads(ctx, plumbing.ReferenceName(schemas.InstallRef(a.id)), plumbing.ReferenceName(schemas.StatusRef(a.id)))
	return err
}

// repoBytes is the repository's object store, loose and packed, in
// bytes (git count-objects -v), and its loose object count.
func repoBytes(tb testing.TB, dir string) (bytes, loose int64) {
	out := gittest.Git(tb, dir, "count-objects", "-v")
	for _, line := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(line, ": ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "size", "size-pack":
			bytes += n * 1024
		case "count":
			loose = n
		}
	}
	return bytes, loose
}

// BenchmarkFleetSoak runs a fleet through the real server for a
// simulated week (make bench-fleet): NUON_BENCH_SOAK_INSTALLS installs
// (default 1,000 here; make bench-fleet asks 100,000), each simulated day
// compressed to one round in which every install polls once (its liveness:
// through the server no heartbeat commit is written) and
// NUON_BENCH_SOAK_CHANGES per mille of them (default 20: 2 %) push a real
// signed status after a change, followed by the server's repository
// maintenance while 4 pollers keep polling. Day 7 has no change at all.
// It reports the repository's growth per install per day over the week
// and on the idle day (goal: 0), the loose objects maintenance found, the
// longest maintenance, and poll p99 during maintenance (goal: < 50 ms)
// and overall; every install's status ref is its last push.
func BenchmarkFleetSoak(b *testing.B) {
	n := envInt("NUON_BENCH_SOAK_INSTALLS", 1000)
	perMille := envInt("NUON_BENCH_SOAK_CHANGES", 20)
	const days, workers = 7, 8
	key, _ := loadKey(b, "acme")
	dir := fleetRepo(b, n, key, false)
	srv, err := server.New(context.Background(), server.Config{Dir: dir, MaintenanceInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := &http.Server{Handler: srv}
	go hs.Serve(ln)
	b.Cleanup(func() { hs.Close(); srv.Close() })
	url := "http://" + ln.Addr().String() + "/tenant.git"
	ctx := context.Background()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	agents := make([]*soakAgent, n)
	for i := range agents {
		id := benchInstall(i)
		agents[i] = &soakAgent{id: id, key: key, st: memory.NewStorage(),
			remote: agent.NewRemote(url, agent.WithHTTPClient(client), agent.WithRequestSigner(&request.Signer{Install: id, Key: key}))}
	}
	if err := srv.Maintain(ctx); err != nil { // the fleet as built, packed
		b.Fatal(err)
	}

	// each runs f for every agent, on workers goroutines.
	each := func(sel []*soakAgent, f func(*soakAgent) error) (lat []time.Duration, errs int) {
		var mu sync.Mutex
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []time.Duration
				bad := 0
				for i := int(next.Add(1) - 1); i < len(sel); i = int(next.Add(1) - 1) {
					t0 := time.Now()
					if err := f(sel[i]); err != nil {
						if bad == 0 {
							b.Logf("%s: %v", sel[i].id, err)
						}
						bad++
						continue
					}
					mine = append(mine, time.Since(t0))
				}
				mu.Lock()
				lat, errs = append(lat, mine...), errs+bad
				mu.Unlock()
			}()
		}
		wg.Wait()
		return lat, errs
	}
	p99 := func(lat []time.Duration) float64 {
		if len(lat) == 0 {
			return 0
		}
		slices.Sort(lat)
		return float64(lat[len(lat)*99/100].Microseconds()) / 1000
	}

	for b.Loop() {
		rng := rand.New(rand.NewPCG(1, 2))
		start, _ := repoBytes(b, dir)
		simStart := time.Now()
		var allPolls, repackPolls []time.Duration
		var maxLoose int64
		var maxRepack time.Duration
		pushes, failures := 0, 0
		var idleGrowth int64
		for day := 1; day <= days; day++ {
			before, _ := repoBytes(b, dir)
			when := simStart.Add(time.Duration(day) * 24 * time.Hour)
			var changed []*soakAgent
			if day < days {
				for _, a := range agents {
					if rng.IntN(1000) < perMille {
						changed = append(changed, a)
					}
				}
			}
			_, errs := each(changed, func(a *soakAgent) error { return a.push(ctx, when) })
			pushes, failures = pushes+len(changed)-errs, failures+errs
			lat, errs := each(agents, func(a *soakAgent) error { return a.poll(ctx) })
			allPolls, failures = append(allPolls, lat...), failures+errs

			// Maintenance, with 4 pollers polling random installs
			// until it is over.
			_, loose := repoBytes(b, dir)
			maxLoose = max(maxLoose, loose)
			done := make(chan struct{})
			var mu sync.Mutex
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(day), uint64(w)))
					for {
						select {
						case <-done:
							return
						default:
						}
						t0 := time.Now()
						if err := agents[r.IntN(n)].poll(ctx); err != nil {
							mu.Lock()
							failures++
							mu.Unlock()
							continue
						}
						d := time.Since(t0)
						mu.Lock()
						repackPolls = append(repackPolls, d)
						mu.Unlock()
					}
				}()
			}
			t0 := time.Now()
			err := srv.Maintain(ctx)
			took := time.Since(t0)
			close(done)
			wg.Wait()
			if err != nil {
				b.Fatal(err)
			}
			maxRepack = max(maxRepack, took)
			after, _ := repoBytes(b, dir)
			if len(changed) == 0 {
				idleGrowth += after - before
			}
			b.Logf("day %d: %d status pushes, %d polls, %d loose objects before maintenance (%s), repository %d → %d bytes", day, len(changed), n, loose, took.Round(time.Millisecond), before, after)
		}
		end, loose := repoBytes(b, dir)
		for _, a := range agents[:min(n, 1000)] {
			if a.head.IsZero() {
				continue
			}
			if got := gittest.Git(b, dir, "rev-parse", schemas.StatusRef(a.id)); got != a.head.String() {
				b.Fatalf("status of %s = %s, want its last push %s", a.id, got, a.head)
			}
		}
		if failures > 0 {
			b.Errorf("%d polls or pushes failed", failures)
		}
		b.ReportMetric(float64(end-start)/float64(n)/days, "bytes/install/day")
		b.ReportMetric(float64(idleGrowth)/float64(n), "idle-bytes/install/day")
		b.ReportMetric(float64(pushes), "pushes")
		b.ReportMetric(float64(maxLoose), "max-loose-objects")
		b.ReportMetric(float64(loose), "loose-objects-end")
		b.ReportMetric(maxRepack.Seconds(), "max-maintenance-s")
		b.ReportMetric(p99(repackPolls), "poll-p99-ms-during-maintenance")
		b.ReportMetric(float64(len(repackPolls)), "polls-during-maintenance")
		b.ReportMetric(p99(allPolls), "poll-p99-ms")
	}
}

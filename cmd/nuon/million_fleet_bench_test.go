package main

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/gitproto"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
)

// BenchmarkMillionFleet measures, on the repositories BenchmarkMillion
// renders and caches (NUON_BENCH_MILLION installs, and 1,000 beside them
// in the same run), what issue 24 asks of one writer and its replicas at a
// million installs, with the built nuon binary:
//
//   - polls per replica: a writer (`nuon server`, rendering, serving its
//     replicas) and one read replica (`nuon server --mode replica`
//     following it, its mirror a copy of the writer's repository: a
//     replica that restarts with its mirror) on the same repository;
//     NUON_BENCH_FLEET_WORKERS workers (default 32), each polling 32
//     installs of its own spread over the fleet in turn on one keep-alive
//     connection, drive signed polls (ls-refs of the install's desired and
//     status refs, signed anew each, as agents do) for
//     NUON_BENCH_FLEET_SECONDS (default 10) against the writer, then the
//     replica: polls/s, p50 and p99, CPU per poll of the server process
//     (user + system of it and its waited-for git children, from
//     /proc/<pid>/stat: the comparable figure on a shared machine), wire
//     bytes per poll both ways, and the resident memory of each (writer-*,
//     replica-*);
//   - the replica's lag: one install's file changed on main (update-ref,
//     POST /hooks/main on the writer) to its desired ref moved on the
//     writer, and on the replica, which refreshes every
//     NUON_BENCH_FLEET_REFRESH (default 500ms): change-ms, replica-lag-ms
//     (from the writer's move to the replica's, waiting at most
//     NUON_BENCH_FLEET_LAG_MINUTES, default 10: replica-caught-up says
//     whether it moved, and the log names the git processes of both then),
//     and the CPU the refresh took on each side (change-replica-self-cpu-ms:
//     the replica process without its git children);
//     NUON_BENCH_FLEET_REPLICA_TRACE=FILE has the replica's git children
//     write git's performance trace there (GIT_TRACE2_PERF);
//     NUON_BENCH_FLEET_REPLICA=0 skips the replica and its lag;
//   - status pushes for a fleet-wide rollout: the replica stopped,
//     NUON_BENCH_FLEET_PUSHERS pushers (default 32) push, each for an
//     install of its own never pushed before (spread over the fleet), one
//     signed status commit of 4 applied components, as an agent does after
//     applying a new version, as fast as the writer accepts them, for
//     NUON_BENCH_FLEET_SECONDS or NUON_BENCH_FLEET_PUSHES pushes (default:
//     no limit but the installs): pushes/s, p50 and p99 of a push, the
//     writer's CPU per push, bytes per push, its resident memory, and from
//     pushes/s the time the status write-back of a rollout to every
//     install of the fleet takes on this machine (rollout-s). One push per
//     pusher goes first, not measured: the writer's first push after its
//     start reads main's installs/ folder for its key table
//     (first-push-ms, the slowest of them), and the rollout controller's
//     first look at main after them reads every install's file
//     (first-push-settle-s: until the writer is idle again). Every push is checked: the
//     writer's status ref of each install is the commit it pushed.
//
// No rollout is running while the statuses arrive (see the note of
// issue 24's fleetpush helper: a rollout over a million installs' channel
// needs a release on main and the wave's render first). NUON_BENCH_NUON
// names the nuon binary; default one built from this tree.
func BenchmarkMillionFleet(b *testing.B) {
	n := 0
	if s := os.Getenv("NUON_BENCH_MILLION"); s != "" && s != "0" {
		n = envInt(b, "NUON_BENCH_MILLION", 1000000)
	}
	if n == 0 {
		b.Skip("NUON_BENCH_MILLION is not set or 0 (make bench-fleet sets it to 1000000)")
	}
	bin := os.Getenv("NUON_BENCH_NUON")
	if bin == "" {
		bin = nuonBinary(b)
	}
	key, err := signature.LoadSigner(filepath.Join(repoRoot(), "fixtures", "keys", "acme"))
	if err != nil {
		b.Fatal(err)
	}
	refresh, err := time.ParseDuration(envString("NUON_BENCH_FLEET_REFRESH", "500ms"))
	if err != nil || refresh <= 0 {
		b.Fatalf("NUON_BENCH_FLEET_REFRESH: want a duration, e.g. 500ms")
	}
	o := fleetOpts{
		duration: time.Duration(envInt(b, "NUON_BENCH_FLEET_SECONDS", 10)) * time.Second,
		workers:  envInt(b, "NUON_BENCH_FLEET_WORKERS", 32),
		pushers:  envInt(b, "NUON_BENCH_FLEET_PUSHERS", 32),
		refresh:  refresh,
		lagWait:  time.Duration(envInt(b, "NUON_BENCH_FLEET_LAG_MINUTES", 10)) * time.Minute,
		replica:  os.Getenv("NUON_BENCH_FLEET_REPLICA") != "0",
	}
	if os.Getenv("NUON_BENCH_FLEET_PUSHES") != "" {
		o.pushes = envInt(b, "NUON_BENCH_FLEET_PUSHES", 0)
	}
	switch o.only = os.Getenv("NUON_BENCH_FLEET_ONLY"); o.only {
	case "", "polls", "pushes":
	default:
		b.Fatalf("NUON_BENCH_FLEET_ONLY=%q: want polls or pushes", o.only)
	}
	sizes := []int{1000}
	if n != 1000 {
		sizes = append(sizes, n)
	}
	for _, size := range sizes {
		b.Run(fmt.Sprintf("installs=%d", size), func(b *testing.B) {
			for b.Loop() {
				benchMillionFleet(b, bin, size, key, o)
			}
		})
	}
}

// fleetOpts are BenchmarkMillionFleet's sizes.
type fleetOpts struct {
	duration         time.Duration
	workers, pushers int
	pushes           int // at most; 0: as many as the duration and the installs allow
	refresh          time.Duration
	lagWait          time.Duration // how long the replica may take to catch up
	replica          bool          // false: no replica, no lag (the writer's polls and pushes alone)
	only             string        // "polls" or "pushes": that part alone
}

func envString(name, def string) string {
	if s := os.Getenv(name); s != "" {
		return s
	}
	return def
}

func benchMillionFleet(b *testing.B, bin string, n int, key *signature.Signer, o fleetOpts) {
	home, err := os.UserHomeDir()
	if err != nil {
		b.Fatal(err)
	}
	cache := filepath.Join(home, ".cache", "nuon", "bench", fmt.Sprintf("million-%s-%d", millionVersion, n))
	rendered, _ := millionRendered(b, bin, cache, n)

	// The writer and the replica's mirror are copies whose objects are
	// hard links to the cached ones: neither changes the cache.
	dir := gittest.LinkCopy(b, rendered, "tenant.git")
	mirror := gittest.LinkCopy(b, rendered, "mirror.git")
	token := filepath.Join(b.TempDir(), "replica-token")
	if err := os.WriteFile(token, []byte("million-fleet-replica-token\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	keys := filepath.Join(repoRoot(), "fixtures", "keys")
	load0 := loadAverage()
	t0 := time.Now()
	w := startServer(b, bin, nil, "--repo", dir, "--render-key", filepath.Join(keys, "render"),
		"--poll-interval", "1h", "--hook-open", "--hook-interval", "10ms", "--maintenance-interval", "0",
		"--replica-token-file", token, "--log-level", "warn")
	w.waitReady(b, 30*time.Minute)
	b.Logf("%d installs: writer ready in %s", n, time.Since(t0).Round(time.Millisecond))
	wpid := w.pid()
	// What the writer does once after its start (the rollout controller's
	// first read of main, ...) is not what a poll or a push costs.
	b.ReportMetric(settle(b, wpid).Seconds(), "writer-settle-s")

	var r *nuonServer
	if o.only != "pushes" && o.replica {
		t0 = time.Now()
		var env []string
		if f := os.Getenv("NUON_BENCH_FLEET_REPLICA_TRACE"); f != "" {
			// git's own account of the replica's git children.
			env = []string{"GIT_TRACE2_PERF=" + f}
		}
		r = startServer(b, bin, env, "--mode", "replica", "--writer", w.url, "--repo", mirror,
			"--replica-token-file", token, "--poll-interval", o.refresh.String(), "--log-level", "warn")
		r.waitReady(b, 30*time.Minute)
		rready := time.Since(t0)
		b.ReportMetric(rready.Seconds(), "replica-start-s")
		b.ReportMetric(float64(procStatus(b, r.pid(), "VmRSS"))/1024, "replica-start-rss-MB")
		b.ReportMetric(settle(b, r.pid()).Seconds(), "replica-settle-s")
	}
	if o.only != "pushes" {
		// The installs the pollers poll: workers × 32 of them, spread
		// over the fleet.
		ids := fleetIDs(n, o.workers*32)
		targets := []struct {
			name string
			srv  *nuonServer
		}{{"writer", w}, {"replica", r}}
		if r == nil {
			targets = targets[:1]
		}
		for _, t := range targets {
			settle(b, t.srv.pid())
			res := fleetPolls(b, t.srv.url+"/tenant.git", t.srv.pid(), ids, o.workers, o.duration, key)
			b.ReportMetric(res.polls/res.elapsed.Seconds(), t.name+"-polls/s")
			b.ReportMetric(float64(res.p50.Microseconds())/1000, t.name+"-p50-ms")
			b.ReportMetric(float64(res.p99.Microseconds())/1000, t.name+"-p99-ms")
			b.ReportMetric(float64(res.serverCPU.Microseconds())/res.polls, t.name+"-cpu-µs/poll")
			b.ReportMetric(float64(res.sent+res.received)/res.polls, t.name+"-B/poll")
			b.ReportMetric(float64(procStatus(b, t.srv.pid(), "VmRSS"))/1024, t.name+"-rss-MB")
			b.Logf("%d installs, %s: %.0f polls of %d installs by %d workers in %s, %.0f/s, p50 %s, p99 %s, server %.0f µs CPU/poll, generator %.0f µs CPU/poll; load average %s before, %s after",
				n, t.name, res.polls, len(ids), o.workers, res.elapsed.Round(time.Millisecond), res.polls/res.elapsed.Seconds(), res.p50, res.p99,
				float64(res.serverCPU.Microseconds())/res.polls, float64(res.genCPU.Microseconds())/res.polls, res.loadBefore, res.loadAfter)
		}

	}
	if o.only != "pushes" && r != nil {
		// The replica's lag behind a main change on the writer.
		id := millionInstall(n / 3)
		lag := fleetLag(b, w, r, dir, id, key, o.lagWait)
		b.ReportMetric(float64(lag.writer.Microseconds())/1000, "change-ms")
		b.ReportMetric(float64(lag.replica.Microseconds())/1000, "replica-lag-ms")
		b.ReportMetric(map[bool]float64{true: 1}[lag.caughtUp], "replica-caught-up")
		if !lag.caughtUp {
			b.Logf("%d installs: the replica had not caught up %s after the writer; its refresh then: %s", n, o.lagWait, lag.refreshing)
		}
		b.ReportMetric(float64(lag.writerCPU.Microseconds())/1000, "change-writer-cpu-ms")
		b.ReportMetric(float64(lag.replicaCPU.Microseconds())/1000, "change-replica-cpu-ms")
		b.ReportMetric(float64(lag.replicaSelfCPU.Microseconds())/1000, "change-replica-self-cpu-ms")
		b.ReportMetric(float64(procStatus(b, r.pid(), "VmHWM"))/1024, "replica-peak-MB")
		b.Logf("%d installs: a main change moved %s's desired ref on the writer in %s, on the replica %s later (refresh every %s); CPU: writer %s, replica %s (%s of it in its git children); load average %s",
			n, id, lag.writer.Round(time.Millisecond), lag.replica.Round(time.Millisecond), o.refresh, lag.writerCPU, lag.replicaCPU, lag.replicaCPU-lag.replicaSelfCPU, loadAverage())
		r.stop()
	}

	if o.only != "polls" {
		limit := n
		if o.pushes > 0 {
			limit = min(limit, o.pushers+o.pushes)
		}
		res, warm, settled := fleetPushes(b, w.url+"/tenant.git", wpid, dir, fleetIDs(n, limit), o.pushers, o.duration, key)
		rate := res.pushes / res.elapsed.Seconds()
		b.ReportMetric(float64(warm.Microseconds())/1000, "first-push-ms")
		b.ReportMetric(settled.Seconds(), "first-push-settle-s")
		b.ReportMetric(rate, "pushes/s")
		b.ReportMetric(float64(res.p50.Microseconds())/1000, "push-p50-ms")
		b.ReportMetric(float64(res.p99.Microseconds())/1000, "push-p99-ms")
		b.ReportMetric(float64(res.serverCPU.Microseconds())/res.pushes, "writer-cpu-µs/push")
		b.ReportMetric(float64(res.sent+res.received)/res.pushes, "B/push")
		b.ReportMetric(float64(procStatus(b, wpid, "VmRSS"))/1024, "writer-push-rss-MB")
		b.ReportMetric(float64(n)/rate, "rollout-s")
		b.Logf("%d installs: %.0f pushes by %d pushers in %s, %.0f/s, p50 %s, p99 %s, writer %.0f µs CPU/push, generator %.0f µs CPU/push: a rollout's status write-back to all %d takes %s; load average %s before, %s after",
			n, res.pushes, o.pushers, res.elapsed.Round(time.Millisecond), rate, res.p50, res.p99,
			float64(res.serverCPU.Microseconds())/res.pushes, float64(res.genCPU.Microseconds())/res.pushes,
			n, (time.Duration(float64(n)/rate) * time.Second).Round(time.Second), res.loadBefore, res.loadAfter)
	}
	b.ReportMetric(float64(procStatus(b, wpid, "VmHWM"))/1024, "writer-peak-MB")
	b.Logf("%d installs: load average %s at start, %s at the end", n, load0, loadAverage())
}

// settle waits, at most 20 minutes, until process pid (and its git
// children) used under 10 % of a core over 6 seconds (longer than the
// rollout controller's interval, whose first tick reads main), and
// returns how long that took.
func settle(tb testing.TB, pid int) time.Duration {
	t0 := time.Now()
	for time.Since(t0) < 20*time.Minute {
		c0 := serverCPU(tb, pid)
		time.Sleep(6 * time.Second)
		if serverCPU(tb, pid)-c0 < 600*time.Millisecond {
			break
		}
	}
	return time.Since(t0)
}

// fleetIDs is count installs of a fleet of n spread over it: the k-th is
// install k·p mod n for a p prime to n, so that a prefix of the list is
// spread too.
func fleetIDs(n, count int) []string {
	count = min(count, n)
	p := int64(1000003)
	for big.NewInt(0).GCD(nil, nil, big.NewInt(p), big.NewInt(int64(n))).Int64() != 1 {
		p += 2
	}
	ids := make([]string, count)
	for k := range ids {
		ids[k] = millionInstall(int(int64(k) * p % int64(n)))
	}
	return ids
}

// serverCPU is procCPU with the waited-for children (the git processes
// a server runs).
func serverCPU(tb testing.TB, pid int) time.Duration { return procCPU(tb, pid, true) }

// loadResult is one run of polls or pushes.
type loadResult struct {
	polls, pushes         float64
	elapsed               time.Duration
	p50, p99              time.Duration
	serverCPU, genCPU     time.Duration
	sent, received        int64
	loadBefore, loadAfter string
}

func (r *loadResult) latencies(tb testing.TB, lat []time.Duration) {
	if len(lat) == 0 {
		tb.Fatal("none finished")
	}
	slices.Sort(lat)
	r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
}

// fleetPolls polls ids from workers workers, each its share of them in
// turn on a keep-alive connection of its own, for d, against the server at
// url whose process is pid. Each poll is an ls-refs of the install's
// desired and status refs, signed anew; its desired ref must be there.
func fleetPolls(tb testing.TB, url string, pid int, ids []string, workers int, d time.Duration, key *signature.Signer) loadResult {
	tb.Helper()
	var sent, received atomic.Int64
	type worker struct {
		ids     []string
		clients []*gitproto.Client
		lat     []time.Duration
	}
	ws := make([]*worker, workers)
	for i := range ws {
		hc := countingClient(&sent, &received, 5*time.Minute)
		wk := &worker{}
		for k := i; k < len(ids); k += workers {
			wk.ids = append(wk.ids, ids[k])
			wk.clients = append(wk.clients, &gitproto.Client{URL: url, HTTP: hc, Auth: (&request.Signer{Install: ids[k], Key: key}).SetAuth})
		}
		ws[i] = wk
	}
	ctx := context.Background()
	poll := func(wk *worker, k int) error {
		id := wk.ids[k]
		refs, err := wk.clients[k].LsRefs(ctx, schemas.InstallRef(id), schemas.StatusRef(id))
		if err == nil {
			if _, ok := refs[plumbing.ReferenceName(schemas.InstallRef(id))]; !ok {
				err = fmt.Errorf("poll of %s: no desired ref in %v", id, refs)
			}
		}
		return err
	}
	// Warm up: connections, capabilities, the server's key cache.
	for _, wk := range ws {
		for k := range wk.ids {
			if err := poll(wk, k); err != nil {
				tb.Fatal(err)
			}
		}
	}
	var r loadResult
	r.loadBefore = loadAverage()
	sent.Store(0)
	received.Store(0)
	srv0, gen0 := serverCPU(tb, pid), selfCPU()
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	var polls atomic.Int64
	for _, wk := range ws {
		if len(wk.ids) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline) && failed.Load() == nil; i++ {
				t0 := time.Now()
				if err := poll(wk, i%len(wk.ids)); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				wk.lat = append(wk.lat, time.Since(t0))
				polls.Add(1)
			}
		}()
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	r.serverCPU, r.genCPU = serverCPU(tb, pid)-srv0, selfCPU()-gen0
	r.loadAfter = loadAverage()
	if err := failed.Load(); err != nil {
		tb.Fatal(*err)
	}
	var lat []time.Duration
	for _, wk := range ws {
		lat = append(lat, wk.lat...)
	}
	r.latencies(tb, lat)
	r.polls = float64(polls.Load())
	r.sent, r.received = sent.Load(), received.Load()
	return r
}

// fleetLagResult is one main change seen on the writer and its replica.
type fleetLagResult struct {
	writer, replica       time.Duration // main moved → writer's desired ref moved; writer's → replica's
	writerCPU, replicaCPU time.Duration // over the whole change, git children included
	replicaSelfCPU        time.Duration // the replica process alone, without its git children
	caughtUp              bool          // false: the replica had not moved within the wait (replica is the wait)
	refreshing            string        // then, the replica's git processes and the writer's
}

// fleetLag changes install id's file on main of the writer's repository
// dir and times its desired ref moving on the writer, then on the replica
// (each polled with a signed ls-refs every 5 ms), waiting at most wait
// for the replica.
func fleetLag(tb *testing.B, w, r *nuonServer, dir, id string, key *signature.Signer, wait time.Duration) fleetLagResult {
	tb.Helper()
	ctx := context.Background()
	client := func(url string) *gitproto.Client {
		return &gitproto.Client{URL: url + "/tenant.git", HTTP: &http.Client{Timeout: time.Minute}, Auth: (&request.Signer{Install: id, Key: key}).SetAuth}
	}
	ref := plumbing.ReferenceName(schemas.InstallRef(id))
	desired := func(c *gitproto.Client) plumbing.Hash {
		refs, err := c.LsRefs(ctx, schemas.InstallRef(id))
		if err != nil {
			tb.Fatal(err)
		}
		return refs[ref]
	}
	wc, rc := client(w.url), client(r.url)
	old := desired(wc)
	if h := desired(rc); h != old {
		tb.Fatalf("%s: the replica serves %s, the writer %s", id, h, old)
	}
	next := millionEdit(tb, dir, id, fmt.Sprintf("172.%d.0.0/24", time.Now().UnixNano()%200))
	moved := func(c *gitproto.Client, t0 time.Time, d time.Duration) (time.Duration, bool) {
		for deadline := t0.Add(d); ; time.Sleep(5 * time.Millisecond) {
			if h := desired(c); h != old {
				return time.Since(t0), true
			}
			if time.Now().After(deadline) {
				return time.Since(t0), false
			}
		}
	}
	wcpu, rcpu, rself := serverCPU(tb, w.pid()), serverCPU(tb, r.pid()), procCPU(tb, r.pid(), false)
	t0 := time.Now()
	gittest.Git(tb, dir, "update-ref", schemas.MainRef, next)
	resp, err := http.Post(w.url+"/hooks/main", "application/json", strings.NewReader("{}"))
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	var res fleetLagResult
	var ok bool
	if res.writer, ok = moved(wc, t0, 15*time.Minute); !ok {
		tb.Fatalf("%s's desired ref did not move on the writer in 15 minutes\n%s", id, w.log.String())
	}
	if res.replica, res.caughtUp = moved(rc, time.Now(), wait); !res.caughtUp {
		res.refreshing = "replica: " + descendants(r.pid()) + "; writer: " + descendants(w.pid())
	}
	// The writer may still be writing what follows the move (its other
	// refs, the render's bookkeeping): let both settle a refresh or two.
	time.Sleep(2 * time.Second)
	res.writerCPU, res.replicaCPU = serverCPU(tb, w.pid())-wcpu, serverCPU(tb, r.pid())-rcpu
	res.replicaSelfCPU = procCPU(tb, r.pid(), false) - rself
	return res
}

// fleetPushes pushes, from pushers pushers each on a keep-alive
// connection of its own, one signed status commit for each of ids (never
// pushed before: the ref is created) in turn, to the writer at url whose
// process is pid and repository dir, and checks afterwards that each
// pushed install's status ref is the commit pushed. The first pushers
// installs push at once first, not measured: the writer's first push
// reads main's installs/ folder for its key table (warm is the slowest of
// them); then the rest for at most d.
func fleetPushes(tb *testing.B, url string, pid int, dir string, ids []string, pushers int, d time.Duration, key *signature.Signer) (r loadResult, warm, settled time.Duration) {
	tb.Helper()
	var sent, received atomic.Int64
	ctx := context.Background()
	var next atomic.Int64
	pushed := make([]plumbing.Hash, len(ids))
	lats := make([][]time.Duration, pushers)
	clients := make([]*http.Client, pushers)
	for p := range clients {
		clients[p] = countingClient(&sent, &received, 5*time.Minute)
	}
	var failed atomic.Pointer[error]
	push := func(p, k int) {
		id := ids[k]
		st := memory.NewStorage()
		h := millionStatus(tb, st, id, key, plumbing.ZeroHash)
		remote := agent.NewRemote(url, agent.WithHTTPClient(clients[p]), agent.WithRequestSigner(&request.Signer{Install: id, Key: key}))
		t0 := time.Now()
		if err := remote.Push(ctx, st, plumbing.ReferenceName(schemas.StatusRef(id)), plumbing.ZeroHash, h); err != nil {
			err = fmt.Errorf("push of %s: %w", id, err)
			failed.CompareAndSwap(nil, &err)
			return
		}
		lats[p] = append(lats[p], time.Since(t0))
		pushed[k] = h
	}
	run := func(deadline time.Time, once bool) {
		var wg sync.WaitGroup
		for p := range pushers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) && failed.Load() == nil {
					k := int(next.Add(1) - 1)
					if k >= len(ids) {
						return
					}
					push(p, k)
					if once {
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	run(time.Now().Add(30*time.Minute), true)
	// The first status pushes wake the rollout controller, whose first
	// look reads main's installs once: not what a push costs.
	settled = settle(tb, pid)
	for p, l := range lats {
		for _, x := range l {
			warm = max(warm, x)
		}
		lats[p] = nil
	}
	sent.Store(0)
	received.Store(0)
	r.loadBefore = loadAverage()
	srv0, gen0 := serverCPU(tb, pid), selfCPU()
	start := time.Now()
	run(start.Add(d), false)
	r.elapsed = time.Since(start)
	r.serverCPU, r.genCPU = serverCPU(tb, pid)-srv0, selfCPU()-gen0
	r.loadAfter = loadAverage()
	if err := failed.Load(); err != nil {
		tb.Fatal(*err)
	}
	var lat []time.Duration
	for _, l := range lats {
		lat = append(lat, l...)
	}
	r.latencies(tb, lat)
	r.pushes = float64(len(lat))
	r.sent, r.received = sent.Load(), received.Load()

	// Every acknowledged push is on the writer.
	out := gittest.Git(tb, dir, "for-each-ref", "--format=%(objectname) %(refname)", schemas.StatusRefPrefix)
	have := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		h, name, _ := strings.Cut(line, " ")
		have[name] = h
	}
	var lost int
	for k, h := range pushed {
		if !h.IsZero() && have[schemas.StatusRef(ids[k])] != h.String() {
			lost++
		}
	}
	if lost > 0 {
		tb.Fatalf("%d of %.0f acknowledged status pushes are not on the writer", lost, r.pushes)
	}
	return r, warm, settled
}

// descendants lists the command lines of process pid's children and
// their children (a server's git processes), from /proc.
func descendants(pid int) string {
	parent := map[int]int{}
	cmd := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err1 := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		line, err2 := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err1 != nil || err2 != nil {
			continue
		}
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 {
			parent[p], _ = strconv.Atoi(f[1])
			cmd[p] = strings.TrimSpace(strings.ReplaceAll(string(line), "\x00", " "))
		}
	}
	var out []string
	var walk func(int)
	walk = func(p int) {
		for c, pp := range parent {
			if pp == p {
				out = append(out, fmt.Sprintf("[%d] %s", c, cmd[c]))
				walk(c)
			}
		}
	}
	walk(pid)
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

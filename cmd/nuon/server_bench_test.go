package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gitproto"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
)

// BenchmarkServerPolls is the idle-poll load test of the tenant server: it
// runs the built `nuon server` binary against a repository of N installs
// (each with a desired and a status ref, NUON_BENCH_POLL_INSTALLS, default
// 1000,100000) and drives signed polls (protocol v2 ls-refs with the
// agent's own client, one request per poll) from NUON_BENCH_POLL_WORKERS
// workers (default 32), each on its own keep-alive connection, for
// NUON_BENCH_POLL_SECONDS (default 10). Each worker polls 32 installs in
// turn, as fast as the server answers or, with NUON_BENCH_POLL_RATE, at
// that many polls per second from all workers together (open loop: a
// poll's latency counts from when it was due, so a server that cannot keep
// the rate shows it in p99 and in polls/s). It reports
//
//   - polls/s and the p50 and p99 latency of a poll;
//   - the server's CPU per poll, from /proc/<pid>/stat of the server
//     process (user + system, 10 ms ticks), and the generator's own CPU per
//     poll (this process) apart, since both share the machine's cores;
//   - wire bytes per poll each way, HTTP headers included;
//   - the server's peak resident memory.
//
// Every poll is signed anew, as agents do: a signature is good for one
// request (the server refuses a replay), so the generator's CPU includes
// the signing. NUON_BENCH_NUON names the nuon binary to measure; default
// one built from this tree.
//
// A fleet polling through keep-alive connections holds one open per agent.
// With NUON_BENCH_POLL_IDLE=N, N more connections (one poll each, as many
// installs) stay open and idle through the run, and it reports the
// server's resident memory per idle connection, read just after they
// were opened, before a garbage collection could shrink their goroutines'
// stacks (keep N under the open files limit, ulimit -n, of both
// processes).
func BenchmarkServerPolls(b *testing.B) {
	sizes := []int{1000, 100000}
	if s := os.Getenv("NUON_BENCH_POLL_INSTALLS"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("NUON_BENCH_POLL_INSTALLS=%q: want a list of install counts", s)
			}
			sizes = append(sizes, n)
		}
	}
	opts := pollLoad{
		duration:  time.Duration(envInt(b, "NUON_BENCH_POLL_SECONDS", 10)) * time.Second,
		workers:   envInt(b, "NUON_BENCH_POLL_WORKERS", 32),
		perWorker: 32,
	}
	if os.Getenv("NUON_BENCH_POLL_RATE") != "" {
		opts.rate = envInt(b, "NUON_BENCH_POLL_RATE", 0)
	}
	idle := 0
	if os.Getenv("NUON_BENCH_POLL_IDLE") != "" {
		idle = envInt(b, "NUON_BENCH_POLL_IDLE", 0)
	}
	key, err := signature.LoadSigner(filepath.Join(repoRoot(), "fixtures", "keys", "acme"))
	if err != nil {
		b.Fatal(err)
	}
	bin := os.Getenv("NUON_BENCH_NUON")
	if bin == "" {
		bin = nuonBinary(b)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("installs=%d", n), func(b *testing.B) {
			dir := pollFleet(b, n, key)
			base, pid := startPollServer(b, bin, dir)
			var perIdle float64
			if idle > 0 {
				before := procStatus(b, pid, "VmRSS")
				defer idleConns(b, base+"/tenant.git", n, idle, key)()
				perIdle = float64(procStatus(b, pid, "VmRSS")-before) / float64(idle)
			}
			for b.Loop() {
				if idle > 0 {
					b.ReportMetric(perIdle, "server-KB/idle-conn")
				}
				r := opts.run(b, base+"/tenant.git", pid, n, key)
				b.ReportMetric(r.polls/r.elapsed.Seconds(), "polls/s")
				b.ReportMetric(float64(r.p50.Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(r.p99.Microseconds())/1000, "p99-ms")
				b.ReportMetric(float64(r.serverCPU.Microseconds())/r.polls, "server-cpu-µs/poll")
				b.ReportMetric(float64(r.genCPU.Microseconds())/r.polls, "gen-cpu-µs/poll")
				b.ReportMetric(float64(r.sent)/r.polls, "req-B/poll")
				b.ReportMetric(float64(r.received)/r.polls, "resp-B/poll")
				b.ReportMetric(float64(procStatus(b, pid, "VmHWM"))/1024, "server-peak-MB")
				b.Logf("%d installs, %d workers, %s, rate %d/s (0: as fast as answered): %.0f polls, load average %s before, %s after",
					n, opts.workers, opts.duration, opts.rate, r.polls, r.loadBefore, r.loadAfter)
			}
		})
	}
}

func envInt(tb testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

// pollFleet makes a bare repository with n installs, as the server sees a
// fleet: main's installs/ holds one file per install (all with key's
// agentKey: the server's work per request is the same as with n keys), and
// every install has a desired and a status ref, written straight into
// packed-refs so that 100,000 take a second.
func pollFleet(tb testing.TB, n int, key *signature.Signer) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "fleet.git")
	gittest.InitBare(tb, dir)
	run := func(stdin string, args ...string) string {
		out, err := gittest.Run(dir, []byte(stdin), args...)
		if err != nil {
			tb.Fatal(err)
		}
		return out
	}
	blob := run("channel: stable\ncloud: {provider: local}\nsandbox: {name: local}\nregistry: 127.0.0.1:5000/x\nagentKey: "+key.AuthorizedKey()+"\n", "hash-object", "-w", "--stdin")
	var tree strings.Builder
	for i := range n {
		fmt.Fprintf(&tree, "100644 blob %s\t%s.yaml\n", blob, pollInstall(i))
	}
	root := run("040000 tree "+run(tree.String(), "mktree")+"\tinstalls\n", "mktree")
	main := run("", "commit-tree", root, "-m", "fleet")
	desired := run("", "commit-tree", run("", "mktree"), "-m", "desired")
	refs := []string{main + " " + schemas.MainRef}
	for i := range n {
		refs = append(refs, desired+" "+schemas.InstallRef(pollInstall(i)), desired+" "+schemas.StatusRef(pollInstall(i)))
	}
	slices.SortFunc(refs, func(a, b string) int { return strings.Compare(a[41:], b[41:]) })
	if err := os.WriteFile(filepath.Join(dir, "packed-refs"), []byte("# pack-refs with: peeled fully-peeled sorted \n"+strings.Join(refs, "\n")+"\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	return dir
}

func pollInstall(i int) string { return fmt.Sprintf("i%06d", i) }

// startPollServer runs `nuon server` on dir (no render key, no upstream)
// until the benchmark ends and waits until it is ready.
func startPollServer(tb testing.TB, bin, dir string) (base string, pid int) {
	tb.Helper()
	srv := startServer(tb, bin, nil, "--repo", dir, "--log-level", "warn")
	srv.waitReady(tb, time.Minute)
	return srv.url, srv.pid()
}

// idleConns opens count keep-alive connections to the server, each with
// a transport of its own after one poll of its own install, and leaves
// them idle until close.
func idleConns(tb testing.TB, url string, n, count int, key *signature.Signer) (close func()) {
	tb.Helper()
	trs := make([]*http.Transport, count)
	ctx := context.Background()
	var failed atomic.Pointer[error]
	sem := make(chan struct{}, 64) // connections opened at once
	var wg sync.WaitGroup
	for i := range trs {
		trs[i] = &http.Transport{MaxIdleConnsPerHost: 1}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			id := pollInstall(i % n)
			c := &gitproto.Client{URL: url, HTTP: &http.Client{Transport: trs[i], Timeout: time.Minute},
				Auth: (&request.Signer{Install: id, Key: key}).SetAuth}
			if _, err := c.LsRefs(ctx, schemas.InstallRef(id)); err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		}()
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		tb.Fatal(*err)
	}
	return func() {
		for _, tr := range trs {
			tr.CloseIdleConnections()
		}
	}
}

// pollLoad is one run of the poll load generator.
type pollLoad struct {
	duration           time.Duration
	workers, perWorker int
	rate               int // polls per second from all workers; 0: as fast as they can
}

type pollResult struct {
	polls                 float64
	elapsed               time.Duration
	p50, p99              time.Duration
	serverCPU, genCPU     time.Duration
	sent, received        int64
	loadBefore, loadAfter string
}

// pollWorker polls its installs in turn over one keep-alive connection.
type pollWorker struct {
	ids     []string
	clients []*gitproto.Client
	lat     []time.Duration
}

func (o pollLoad) run(tb testing.TB, url string, pid, n int, key *signature.Signer) pollResult {
	var sent, received atomic.Int64
	stride := max(1, n/(o.workers*o.perWorker))
	ws := make([]*pollWorker, o.workers)
	for w := range ws {
		hc := countingClient(&sent, &received, time.Minute)
		pw := &pollWorker{}
		for k := range o.perWorker {
			id := pollInstall(((w + k*o.workers) * stride) % n)
			pw.ids = append(pw.ids, id)
			signer := &request.Signer{Install: id, Key: key}
			pw.clients = append(pw.clients, &gitproto.Client{URL: url, HTTP: hc, Auth: signer.SetAuth})
		}
		ws[w] = pw
	}
	ctx := context.Background()
	poll := func(pw *pollWorker, k int) error {
		refs, err := pw.clients[k].LsRefs(ctx, schemas.InstallRef(pw.ids[k]), schemas.StatusRef(pw.ids[k]))
		if err == nil && len(refs) != 2 {
			err = fmt.Errorf("poll of %s: %d refs, want 2", pw.ids[k], len(refs))
		}
		return err
	}
	// Warm up: capabilities, connections and the server's key cache.
	for _, pw := range ws {
		for k := range pw.ids {
			if err := poll(pw, k); err != nil {
				tb.Fatal(err)
			}
		}
	}
	var r pollResult
	r.loadBefore = loadAverage()
	sent.Store(0)
	received.Store(0)
	srv0, gen0 := procCPU(tb, pid, false), selfCPU()
	start := time.Now()
	deadline := start.Add(o.duration)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	var polls atomic.Int64
	for w, pw := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// With a rate, worker w's i-th poll is due at start +
			// (i*workers + w)/rate; a late one is sent at once and its
			// latency counts from when it was due, so a server that
			// falls behind shows in p99 (no coordinated omission).
			for i := 0; ; i++ {
				t0 := time.Now()
				if o.rate > 0 {
					due := start.Add(time.Duration(float64(i*len(ws)+w) / float64(o.rate) * float64(time.Second)))
					if d := due.Sub(t0); d > 0 {
						time.Sleep(d)
					}
					t0 = due
				}
				if time.Now().After(deadline) || failed.Load() != nil {
					return
				}
				if err := poll(pw, i%len(pw.ids)); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				pw.lat = append(pw.lat, time.Since(t0))
				polls.Add(1)
			}
		}()
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	r.serverCPU, r.genCPU = procCPU(tb, pid, false)-srv0, selfCPU()-gen0
	r.loadAfter = loadAverage()
	if err := failed.Load(); err != nil {
		tb.Fatal(*err)
	}
	var lat []time.Duration
	for _, pw := range ws {
		lat = append(lat, pw.lat...)
	}
	if len(lat) == 0 {
		tb.Fatal("no poll finished")
	}
	slices.Sort(lat)
	r.polls = float64(polls.Load())
	r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	r.sent, r.received = sent.Load(), received.Load()
	return r
}

// countingClient is an HTTP client on one keep-alive connection whose
// bytes both ways are counted.
func countingClient(sent, received *atomic.Int64, timeout time.Duration) *http.Client {
	dialer := &net.Dialer{}
	return &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 1,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countedConn{Conn: c, in: received, out: sent}, nil
		},
	}, Timeout: timeout}
}

// countedConn counts the bytes a connection reads and writes.
type countedConn struct {
	net.Conn
	in, out *atomic.Int64
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(int64(n))
	return n, err
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
}

// procCPU is the user + system CPU time process pid has used, with its
// waited-for children's when children is set, from /proc/<pid>/stat
// (fields 14 to 17, in ticks of 10 ms).
func procCPU(tb testing.TB, pid int, children bool) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// The command name may hold spaces: fields start after its ')'.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	fields := []int{11, 12}
	if children {
		fields = append(fields, 13, 14)
	}
	var ticks int64
	for _, i := range fields {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			tb.Fatalf("/proc/%d/stat: %q", pid, s)
		}
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// selfCPU is the user + system CPU time of this process.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStatus is a kB field of /proc/<pid>/status, e.g. VmHWM.
func procStatus(tb testing.TB, pid int, field string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// loadAverage is the 1-, 5- and 15-minute load average.
func loadAverage() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

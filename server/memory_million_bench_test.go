package server_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/server"
)

// BenchmarkServerMemoryMillion is issue 24's server memory at the size of
// the repository cmd/nuon's BenchmarkMillion caches
// (~/.cache/nuon/bench/million-v2-<N>/rendered.git, N from
// NUON_BENCH_MILLION; skipped unless set and the cache is there): a
// server.New in this process over a copy whose objects are hard links to
// the cache (the cache is not changed) and its start render (Sync), after
// which the server is ready. It reports the live heap after a GC and the
// process's RSS (before and after that GC, and once the garbage is given
// back to the OS as nuon server does at ready) with the ref table loaded
// (New) and at ready, and the peak RSS (VmHWM).
//
// NUON_BENCH_HEAPPROFILE=PREFIX writes the heap profile at ready to
// PREFIX-ready.pprof. NUON_BENCH_MEMORY_INDEX=1 then starts a second
// server on the same repository with the fleet view on (a view token
// given, /fleet polled until it answers) and reports the heap and RSS
// with its index built (PREFIX-index.pprof) and the index's bytes per
// install: the two live heaps' difference.
func BenchmarkServerMemoryMillion(b *testing.B) {
	cached, n := millionRepo(b)
	count, _ := strconv.Atoi(n)
	profile := os.Getenv("NUON_BENCH_HEAPPROFILE")
	withIndex := os.Getenv("NUON_BENCH_MEMORY_INDEX") == "1"
	render, _ := loadKey(b, "render")
	for b.Loop() {
		dir := gittest.LinkCopy(b, cached, "tenant.git")
		ready := startMemory(b, dir, render, "", profile)
		if withIndex {
			// The same start with the fleet view on: its index is built
			// in the background from New on.
			indexed := startMemory(b, dir, render, "bench-token", profile)
			b.ReportMetric(indexed.heapMB, "index-heap-MB")
			b.ReportMetric(indexed.rssMB, "index-rss-MB")
			b.ReportMetric(indexed.hwmMB, "index-peak-MB")
			if count > 0 {
				b.ReportMetric((indexed.heapMB-ready.heapMB)*(1<<20)/float64(count), "index-B/install")
			}
		}
	}
}

// startMemory starts a server on dir (the fleet view on with token), its
// start render, and measures its memory at ready, or with token once the
// fleet index is built. The server is closed after.
func startMemory(b *testing.B, dir string, render *signature.Signer, token, profile string) memoryFigures {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t0 := time.Now()
	srv, err := server.New(ctx, server.Config{Dir: dir, RenderKey: render, PollInterval: time.Hour, MaintenanceInterval: -1, ViewToken: token})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	if token == "" {
		loaded := measureMemory(b, "loaded", "")
		b.ReportMetric(loaded.heapMB, "loaded-heap-MB")
		b.ReportMetric(loaded.rssMB, "loaded-rss-MB")
	}
	if err := srv.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	b.Logf("server.New and start render: %s", time.Since(t0).Round(time.Millisecond))
	if token != "" {
		// At ready the index is being built: what nuon server with a
		// view token holds when /readyz first answers.
		viewReady := measureMemory(b, "view-ready", "")
		debug.FreeOSMemory()
		viewReady.freedRSSMB, _ = procStatus(b)
		b.ReportMetric(viewReady.rssMB, "view-ready-rss-MB")
		b.ReportMetric(viewReady.freedRSSMB, "view-ready-freed-rss-MB")
		t1 := time.Now()
		waitIndex(b, srv, token)
		b.Logf("fleet index built %s after ready", time.Since(t1).Round(time.Millisecond))
		return measureMemory(b, "index", profile)
	}
	ready := measureMemory(b, "ready", profile)
	// What nuon server does at ready (cmd/nuon/server.go): the start
	// render's garbage given back to the OS.
	debug.FreeOSMemory()
	ready.freedRSSMB, _ = procStatus(b)
	b.Logf("ready: RSS %.0f MB once the garbage is given back (debug.FreeOSMemory)", ready.freedRSSMB)
	b.ReportMetric(ready.freedRSSMB, "ready-freed-rss-MB")
	b.ReportMetric(ready.rssMB, "ready-rss-MB")
	b.ReportMetric(ready.heapMB, "ready-heap-MB")
	b.ReportMetric(ready.gcRSSMB, "ready-gc-rss-MB")
	b.ReportMetric(ready.hwmMB, "ready-peak-MB")
	// Run's rollout controller reads main's install files at its first
	// evaluation, once per process: what it keeps, apart.
	t1 := time.Now()
	if _, err := srv.EvaluateRollouts(ctx); err != nil {
		b.Fatal(err)
	}
	b.Logf("rollout controller's first evaluation: %s", time.Since(t1).Round(time.Millisecond))
	rollouts := measureMemory(b, "rollouts", profile)
	b.ReportMetric(rollouts.heapMB, "rollouts-heap-MB")
	return ready
}

// memoryFigures is one measure of the process's memory, in MB.
type memoryFigures struct {
	rssMB   float64 // VmRSS before the GC
	heapMB  float64 // live heap after a GC
	gcRSSMB float64 // VmRSS after it
	hwmMB   float64 // VmHWM: the peak RSS so far
	// freedRSSMB is VmRSS once the garbage is given back to the OS.
	freedRSSMB float64
}

// measureMemory measures the process at the step named what, and writes
// the heap profile to PREFIX-what.pprof when prefix is not empty.
func measureMemory(b *testing.B, what, prefix string) memoryFigures {
	b.Helper()
	var f memoryFigures
	f.rssMB, _ = procStatus(b)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	f.heapMB = float64(ms.HeapAlloc) / (1 << 20)
	f.gcRSSMB, f.hwmMB = procStatus(b)
	b.Logf("%s: live heap %.0f MB (%d objects), RSS %.0f MB (%.0f MB after GC), peak RSS %.0f MB, heap from the OS %.0f MB, released %.0f MB",
		what, f.heapMB, ms.HeapObjects, f.rssMB, f.gcRSSMB, f.hwmMB, float64(ms.HeapSys)/(1<<20), float64(ms.HeapReleased)/(1<<20))
	if prefix != "" {
		out, err := os.Create(prefix + "-" + what + ".pprof")
		if err != nil {
			b.Fatal(err)
		}
		defer out.Close()
		if err := pprof.Lookup("heap").WriteTo(out, 0); err != nil {
			b.Fatal(err)
		}
	}
	return f
}

// procStatus reads this process's VmRSS and VmHWM, in MB.
func procStatus(b *testing.B) (rss, hwm float64) {
	b.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, _ := strings.Cut(sc.Text(), ":")
		kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 64)
		switch name {
		case "VmRSS":
			rss = kb / 1024
		case "VmHWM":
			hwm = kb / 1024
		}
	}
	return rss, hwm
}

// waitIndex serves srv on loopback and asks /fleet until the index is
// built (200).
func waitIndex(b *testing.B, srv *server.Server, token string) {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := &http.Server{Handler: srv}
	go hs.Serve(ln)
	defer hs.Close()
	req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/fleet", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	deadline := time.Now().Add(2 * time.Hour)
	for time.Now().Before(deadline) {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
		time.Sleep(time.Second)
	}
	b.Fatal("the fleet index was not built in 2 h")
}

// BenchmarkFleetIndexMemory measures what the fleet view's index keeps
// per install: viewFleetRepo's fleet of NUON_BENCH_INDEX_INSTALLS
// installs (default 100,000; each with a desired state and a signed
// status of every kind the view counts) served without the view, then
// with it until the index is built; the live heaps' difference after a
// GC, per install, is index-B/install. NUON_BENCH_HEAPPROFILE=PREFIX
// writes the heap with the index to PREFIX-index.pprof.
func BenchmarkFleetIndexMemory(b *testing.B) {
	n := 100000
	if s := os.Getenv("NUON_BENCH_INDEX_INSTALLS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n <= 0 {
			b.Fatalf("NUON_BENCH_INDEX_INSTALLS: %q is not a number of installs", s)
		}
	}
	key, _ := loadKey(b, "acme")
	dir := viewFleetRepo(b, n, key, time.Now())
	profile := os.Getenv("NUON_BENCH_HEAPPROFILE")
	for b.Loop() {
		heap := func(token string) memoryFigures {
			srv, err := server.New(context.Background(), server.Config{Dir: dir, ViewToken: token, PollInterval: time.Hour, MaintenanceInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			if token == "" {
				return measureMemory(b, "served", "")
			}
			t0 := time.Now()
			waitIndex(b, srv, token)
			b.Logf("index built in %s", time.Since(t0).Round(time.Millisecond))
			return measureMemory(b, "index", profile)
		}
		// A saved index from an earlier start would be read instead.
		os.Remove(filepath.Join(dir, "nuon-fleet-index.gob"))
		served := heap("")
		indexed := heap(viewToken)
		b.ReportMetric((indexed.heapMB-served.heapMB)*(1<<20)/float64(n), "index-B/install")
		b.ReportMetric(indexed.heapMB, "index-heap-MB")
	}
}

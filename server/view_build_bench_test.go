package server

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
)

// BenchmarkFleetIndexBuild is the fleet index's first build over a copy of
// the rendered repository NUON_BENCH_INDEX_REPO (the cached million
// repository, ~/.cache/nuon/bench/million-v2-1000000/rendered.git, or any
// other; its objects are hard links, so it is not changed), with no saved
// index (cold), then again in a new server over the same copy with the
// index the first saved (restart). It reports each one's wall and CPU
// seconds (the process's, git included), the live heap once built and
// the peak RSS. NUON_BENCH_CPUPROFILE=PREFIX writes PREFIX-cold.pprof and
// PREFIX-restart.pprof.
//
//	NUON_BENCH_INDEX_REPO=~/.cache/nuon/bench/million-v2-1000000/rendered.git \
//	  go test -run '^$' -bench '^BenchmarkFleetIndexBuild$' -benchtime=1x -timeout 60m ./server/
func BenchmarkFleetIndexBuild(b *testing.B) {
	src := os.Getenv("NUON_BENCH_INDEX_REPO")
	if src == "" {
		b.Skip("NUON_BENCH_INDEX_REPO is not set")
	}
	profile := os.Getenv("NUON_BENCH_CPUPROFILE")
	for b.Loop() {
		dir := gittest.LinkCopy(b, src, "tenant.git")
		// The server writes no ref here, and git replaces packed-refs
		// rather than writing it in place: a link, not 150 MB more.
		packed := filepath.Join(dir, "packed-refs")
		if err := os.Remove(packed); err != nil {
			b.Fatal(err)
		}
		if err := os.Link(filepath.Join(src, "packed-refs"), packed); err != nil {
			b.Fatal(err)
		}
		for _, step := range []string{"cold", "restart"} {
			indexBuild(b, dir, step, profile)
		}
	}
}

// indexBuild starts a server on dir, builds its fleet index as a server
// with a view token does at start, and reports the figures of step.
func indexBuild(b *testing.B, dir, step, profile string) {
	b.Helper()
	srv, err := New(context.Background(), Config{Dir: dir, PollInterval: time.Hour, MaintenanceInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	if profile != "" {
		f, err := os.Create(profile + "-" + step + ".pprof")
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	t0, c0 := time.Now(), indexCPU()
	srv.view.buildIndex()
	wall, cpu := time.Since(t0), indexCPU()-c0
	if profile != "" {
		pprof.StopCPUProfile()
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	bld := srv.view.build
	if bld.err != "" {
		b.Fatal(bld.err)
	}
	saved, _ := os.Stat(filepath.Join(dir, viewCacheFile))
	var size int64
	if saved != nil {
		size = saved.Size()
	}
	b.Logf("%s: %d installs (%d from the saved index, %d install files parsed) in %s, CPU %s, live heap %d MB, peak RSS %d MB, saved index %d MB",
		step, bld.total.Load(), bld.reused.Load(), srv.view.labels.parsed, wall.Round(time.Millisecond), cpu.Round(time.Millisecond),
		ms.HeapAlloc>>20, indexPeakRSS()>>20, size>>20)
	b.ReportMetric(wall.Seconds(), step+"-s")
	b.ReportMetric(cpu.Seconds(), step+"-cpu-s")
	b.ReportMetric(float64(ms.HeapAlloc>>20), step+"-heap-MB")
	b.ReportMetric(float64(indexPeakRSS()>>20), step+"-peak-MB")
}

// indexCPU is the CPU time of this process and its finished children.
func indexCPU() time.Duration {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + kids.Utime.Nano() + kids.Stime.Nano())
}

// indexPeakRSS is this process's peak resident memory, in bytes.
func indexPeakRSS() int64 {
	var r syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return r.Maxrss << 10
}

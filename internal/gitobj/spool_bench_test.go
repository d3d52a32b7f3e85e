package gitobj_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gitobj"
)

// BenchmarkSpooledBatch merges N small objects, ten to a batch as a
// render merges an install's, into a spooled batch and flushes it into a
// new repository, and reports the time and CPU per object. The figure to
// read is the ratio between the sizes: a cost per object that does not
// grow with N gives 1. NUON_BENCH_SPOOL lists the sizes (default
// 100000,1000000). The source batches are built before the clock starts.
//
//	go test -run '^$' -bench BenchmarkSpooledBatch -benchtime 3x ./internal/gitobj
func BenchmarkSpooledBatch(b *testing.B) {
	sizes := []int{100_000, 1_000_000}
	if env := os.Getenv("NUON_BENCH_SPOOL"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatalf("NUON_BENCH_SPOOL: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			parts := make([]*gitobj.Batch, 0, n/10+1)
			for i := 0; i < n; i += 10 {
				part := gitobj.NewBatch()
				for j := i; j < min(i+10, n); j++ {
					part.Add(plumbing.BlobObject, fmt.Appendf(nil, "install %d file %d\n", j/10, j))
				}
				parts = append(parts, part)
			}
			root := b.TempDir()
			var cpu time.Duration
			round := 0
			for b.Loop() {
				dir := filepath.Join(root, strconv.Itoa(round))
				round++
				repo, err := git.PlainInit(dir, true)
				if err != nil {
					b.Fatal(err)
				}
				start := cpuTime()
				batch, err := gitobj.NewSpooledBatch(repo.Storer)
				if err != nil {
					b.Fatal(err)
				}
				for _, p := range parts {
					batch.Merge(p)
				}
				if batch.Len() != n {
					b.Fatalf("batch holds %d objects, want %d", batch.Len(), n)
				}
				if err := batch.Flush(repo.Storer); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime() - start
				if err := os.RemoveAll(dir); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/object")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*n), "cpu-ns/object")
		})
	}
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

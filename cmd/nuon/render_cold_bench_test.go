package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
)

// BenchmarkRenderCold measures a cold `nuon render` of a generated fleet,
// a process of its own, at each of the sizes NUON_BENCH_INSTALLS lists
// (comma-separated; default 10000): wall clock, CPU (user + system) and
// peak resident memory (the process's VmHWM), so that 100,000 and
// 1,000,000 installs are compared the same way (issue 24: within 10×).
// The fleet is BenchmarkMillion's; its source repository is built once
// per size with git fast-import and kept under
// ~/.cache/nuon/bench/render-source-<N>; each run renders a copy whose
// objects are hard links to it. NUON_BENCH_NUON names the nuon binary
// (default one built from this tree); NUON_BENCH_GODEBUG is the render's
// GODEBUG (gctrace=1 prints the heap at each collection) and
// NUON_BENCH_LOG a file for its standard error, where the render logs at
// debug level how long each of its phases took.
func BenchmarkRenderCold(b *testing.B) {
	sizes := []int{10000}
	if s := os.Getenv("NUON_BENCH_INSTALLS"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("NUON_BENCH_INSTALLS=%q: want install counts, comma-separated", s)
			}
			sizes = append(sizes, n)
		}
	}
	bin := os.Getenv("NUON_BENCH_NUON")
	if bin == "" {
		bin = nuonBinary(b)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("installs=%d", n), func(b *testing.B) {
			source := renderSource(b, n)
			var wall, cpu time.Duration
			var peak int64
			for b.Loop() {
				b.StopTimer()
				dir := gittest.LinkCopy(b, source, "tenant.git")
				args := []string{"render", "--repo", dir, "--key", filepath.Join(repoRoot(), "fixtures", "keys", "render"),
					"--cache-dir", filepath.Join(b.TempDir(), "render-cache"), "-o", "json"}
				if os.Getenv("NUON_BENCH_LOG") != "" {
					// The log has the render's phases, how long each took.
					args = append([]string{"--log-level", "debug"}, args...)
				}
				cmd := exec.Command(bin, args...)
				if g := os.Getenv("NUON_BENCH_GODEBUG"); g != "" {
					cmd.Env = append(os.Environ(), "GODEBUG="+g)
				}
				var out, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &stderr
				load := loadAverage()
				b.StartTimer()
				t0 := time.Now()
				err := cmd.Run()
				d := time.Since(t0)
				b.StopTimer()
				if log := os.Getenv("NUON_BENCH_LOG"); log != "" {
					if err := os.WriteFile(log, stderr.Bytes(), 0o644); err != nil {
						b.Fatal(err)
					}
				}
				if err != nil {
					b.Fatalf("nuon render: %v\n%s", err, tail(stderr.String(), 4000))
				}
				if want := fmt.Sprintf(`"changed": %d,`, n); !bytes.Contains(out.Bytes(), []byte(want)) {
					b.Fatalf("nuon render: no %s in its report:\n%s", want, tail(out.String(), 2000))
				}
				ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
				c := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
				wall += d
				cpu += c
				peak = max(peak, ru.Maxrss)
				b.Logf("%d installs: cold render %.1f s wall, %.1f s CPU, %d MB peak (load average %s before)", n, d.Seconds(), c.Seconds(), ru.Maxrss/1024, load)
				// The copy's objects are the render's: gone before the next.
				if err := os.RemoveAll(dir); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			loops := float64(b.N)
			b.ReportMetric(wall.Seconds()/loops, "cold-s")
			b.ReportMetric(cpu.Seconds()/loops, "cold-cpu-s")
			b.ReportMetric(float64(peak)/1024, "cold-peak-MB")
			b.ReportMetric(float64(peak)*1024/float64(n), "peak-B/install")
		})
	}
}

// renderSource returns a bare repository whose main holds BenchmarkMillion's
// fleet of n installs and nothing rendered, built once and kept under
// ~/.cache/nuon/bench/render-source-<n>.
func renderSource(b *testing.B, n int) string {
	home, err := os.UserHomeDir()
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(home, ".cache", "nuon", "bench", fmt.Sprintf("render-source-%s-%d", millionVersion, n))
	if _, err := os.Stat(filepath.Join(dir, "complete")); err == nil {
		return filepath.Join(dir, "source.git")
	}
	if err := os.RemoveAll(dir); err != nil {
		b.Fatal(err)
	}
	repo := filepath.Join(dir, "source.git")
	gittest.InitBare(b, repo)
	millionSource(b, repo, n)
	if err := os.WriteFile(filepath.Join(dir, "complete"), nil, 0o644); err != nil {
		b.Fatal(err)
	}
	return repo
}

package renderer_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
)

// fleet returns the fixture app with n generated installs, spread over the
// two channels, each with its own inputs, cloud account and registry.
func fleet(tb testing.TB, n int) map[string][]byte {
	tb.Helper()
	files := fixtureFiles(tb)
	key, err := os.ReadFile(filepath.Join(fixtureKeys, "acme.pub"))
	if err != nil {
		tb.Fatal(err)
	}
	for name := range files {
		if strings.HasPrefix(name, "installs/") {
			delete(files, name)
		}
	}
	channels := []string{"stable", "beta"}
	regions := []string{"us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-2"}
	for i := range n {
		id := fmt.Sprintf("i%05d", i)
		account := fmt.Sprintf("%012d", 100000000000+i)
		region := regions[i%len(regions)]
		files["installs/"+id+".yaml"] = fmt.Appendf(nil, `channel: %s
inputs:
  cidr: 10.%d.%d.0/24
  domain: %s.shop.example
cloud:
  provider: aws
  region: %s
  accountID: "%s"
sandbox:
  name: aws-eks
  version: 0.4.0
registry: %s.dkr.ecr.%s.amazonaws.com/nuon-%s
agentKey: %s`, channels[i%2], i/256%256, i%256, id, region, account, account, region, id, key)
	}
	return files
}

// cpuTime is the CPU time this process has used.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRender10k renders 10,000 installs cold into a bare repository
// on disk, as nuon render does on a path: render, sign, write the objects,
// move 10,001 refs (ns/op). In the same run git fast-import writes the same
// blobs, trees and commits into a fresh copy of the repository (unsigned:
// fast-import cannot sign), and the ratio of the two is reported, by wall
// clock (x-fastimport) and by CPU time (x-fastimport-cpu), the steadier on
// a busy machine. Then one install's input changes on main and the render
// runs again (rerender-ms, and its CPU time rerender-cpu-ms).
func BenchmarkRender10k(b *testing.B) {
	const n = 10000
	files := fleet(b, n)
	seed := filepath.Join(b.TempDir(), "seed.git")
	gittest.InitBare(b, seed)
	r, err := gitrepo.Open(seed)
	if err != nil {
		b.Fatal(err)
	}
	source := commitFiles(b, r, "refs/heads/main", plumbing.ZeroHash, files)
	opts := options(b)
	ctx := context.Background()
	const id = "i04242"
	file := "installs/" + id + ".yaml"
	edited := map[string][]byte{}
	for name, data := range files {
		edited[name] = data
	}
	edited[file] = bytes.Replace(files[file], []byte("cidr: 10."), []byte("cidr: 172."), 1)

	var renderCPU, fastImport, fastImportCPU, rerender, rerenderCPU time.Duration
	loops := 0
	for b.Loop() {
		b.StopTimer()
		loops++
		dir := filepath.Join(b.TempDir(), "tenant.git")
		if out, err := exec.Command("cp", "-a", seed, dir).CombinedOutput(); err != nil {
			b.Fatalf("copy the source repository: %v: %s", err, out)
		}
		cpu := cpuTime(b)
		b.StartTimer()

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

		b.StopTimer()
		renderCPU += cpuTime(b) - cpu
		if got := res.ChangedCount(); got != n {
			b.Fatalf("rendered %d installs, want %d", got, n)
		}
		wall, cpuFI := fastImportRepo(b, repo, seed)
		fastImport += wall
		fastImportCPU += cpuFI

		commitFiles(b, repo, "refs/heads/main", source, edited)
		// nuon render runs as a process of its own: leave the heap of the
		// cold render behind.
		runtime.GC()
		cpu = cpuTime(b)
		start := time.Now()
		repo, err = gitrepo.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		res, err = renderRepo(ctx, repo, "refs/heads/main", opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := apply(ctx, repo, res, res.Updates); err != nil {
			b.Fatal(err)
		}
		rerender += time.Since(start)
		rerenderCPU += cpuTime(b) - cpu
		if got := res.ChangedCount(); got != 1 || len(res.Updates) != 2 {
			b.Fatalf("re-render changed %d installs, %d updates; want 1 and 2", got, len(res.Updates))
		}
		b.StartTimer()
	}
	count := float64(loops)
	b.ReportMetric(float64(fastImport.Nanoseconds())/count, "fastimport-ns/op")
	b.ReportMetric(float64(b.Elapsed())/float64(fastImport), "x-fastimport")
	b.ReportMetric(float64(renderCPU)/float64(fastImportCPU), "x-fastimport-cpu")
	b.ReportMetric(float64(rerender.Microseconds())/1000/count, "rerender-ms/op")
	b.ReportMetric(float64(rerenderCPU.Microseconds())/1000/count, "rerender-cpu-ms/op")
}

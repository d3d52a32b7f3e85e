package renderer_test

import (
	"bytes"
	"context"
	"fmt"
	"nuon.dev/nuon/schemas"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/renderer"
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
		wall, cpuFI := fastImportRender(b, res, repo, seed)
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

// fastImportRender has git fast-import write what a render wrote into a
// fresh copy of the repository seed: every install's files as blobs, one
// commit per install on its own ref, and the rendered commit, whose install
// folders are the install commits' trees. It returns how long git took, by
// the clock and in CPU time.
func fastImportRender(tb testing.TB, res *renderer.Result, repo *gitrepo.Repo, seed string) (wall, cpu time.Duration) {
	tb.Helper()
	src, err := renderer.LoadSource(repo.Storer(), res.Source)
	if err != nil {
		tb.Fatal(err)
	}
	var s bytes.Buffer
	data := func(b []byte) {
		fmt.Fprintf(&s, "data %d\n", len(b))
		s.Write(b)
		s.WriteByte('\n')
	}
	who := fmt.Sprintf("nuon renderer <renderer@nuon.invalid> %d +0000", renderTime.Unix())
	mark := 0
	var rendered bytes.Buffer
	trees, commits := map[string]string{}, map[string]string{}
	for _, in := range res.Installs {
		trees[in.ID], commits[in.ID] = in.Tree, in.Commit
	}
	for _, id := range src.InstallIDs() {
		files, err := renderer.Install(src, id)
		if err != nil {
			tb.Fatal(err)
		}
		names := make([]string, 0, len(files))
		for name := range files {
			names = append(names, name)
		}
		sort.Strings(names)
		first := mark + 1
		for _, name := range names {
			mark++
			fmt.Fprintf(&s, "blob\nmark :%d\n", mark)
			data(files[name])
		}
		fmt.Fprintf(&s, "commit %s\ncommitter %s\n", plumbing.ReferenceName(schemas.InstallRef(id)), who)
		data(fmt.Appendf(nil, "nuon: render %s generation 1\n\nNuon-Install: %s\nNuon-Generation: 1\nNuon-Source: %s\n", id, id, res.Source))
		for i, name := range names {
			fmt.Fprintf(&s, "M 100644 :%d %s\n", first+i, name)
		}
		s.WriteByte('\n')
		fmt.Fprintf(&rendered, "M 040000 %s %s/%s\n", trees[id], schemas.InstallsDir, id)
		// The renderer's record of what it issued (see schemas.IssuedDir).
		record := fmt.Sprintf("1 %s\n", commits[id])
		fmt.Fprintf(&rendered, "M 100644 inline %s/%s\ndata %d\n%s\n", schemas.IssuedDir, id, len(record), record)
	}
	fmt.Fprintf(&s, "commit %s\ncommitter %s\n", plumbing.ReferenceName(schemas.RenderedRef), who)
	data([]byte("nuon: render\n"))
	s.Write(rendered.Bytes())
	s.WriteString("\ndone\n")

	target := filepath.Join(tb.TempDir(), "fast-import.git")
	if out, err := exec.Command("cp", "-a", seed, target).CombinedOutput(); err != nil {
		tb.Fatalf("copy the source repository: %v: %s", err, out)
	}
	cmd := exec.Command("git", "fast-import", "--quiet", "--done")
	cmd.Dir = target
	cmd.Stdin = &s
	start := time.Now()
	out, err := cmd.CombinedOutput()
	wall = time.Since(start)
	if err != nil {
		tb.Fatalf("git fast-import: %v: %s", err, out)
	}
	cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	for _, in := range res.Installs[:1] {
		if got := gittest.Git(tb, target, "rev-parse", plumbing.ReferenceName(schemas.InstallRef(in.ID)).String()+"^{tree}"); got != in.Tree {
			tb.Fatalf("fast-import wrote tree %s for %s, the renderer %s", got, in.ID, in.Tree)
		}
	}
	_, commit, _ := res.Objects.Get(res.Rendered)
	want := strings.TrimPrefix(strings.SplitN(string(commit), "\n", 2)[0], "tree ")
	if got := gittest.Git(tb, target, "rev-parse", plumbing.ReferenceName(schemas.RenderedRef).String()+"^{tree}"); got != want {
		tb.Fatalf("fast-import wrote rendered tree %s, the renderer %s", got, want)
	}
	return wall, cpu
}

package renderer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// Environment of the child process that BenchmarkRenderFleet starts for
// each render, so that the time, CPU and peak RSS measured are those of a
// process that does what nuon render does and nothing else.
const (
	// childRepo is the repository the child renders main of.
	childRepo = "NUON_RENDER_CHILD_REPO"
	// childCPUProfile and childHeapProfile, when set, are where the child
	// writes a pprof CPU profile of its render and a heap profile at its
	// end (and one with ".render" added, before it writes anything).
	childCPUProfile  = "NUON_RENDER_CPUPROFILE"
	childHeapProfile = "NUON_RENDER_MEMPROFILE"
	// fleetSizes lists the fleet sizes of BenchmarkRenderFleet, commas
	// between them; default "1000,10000" (make bench-fleet adds 100000).
	fleetSizes = "NUON_BENCH_FLEET"
)

// childResult is what the child reports on its standard output.
type childResult struct {
	Changed     int  `json:"changed"`
	Updates     int  `json:"updates"`
	Incremental bool `json:"incremental"`
	// MaxRSS is the child's peak resident set in bytes: VmHWM of
	// /proc/self/status, the high-water mark of the process's own memory.
	// The rusage of a child reports the larger of that and its parent's
	// resident set when it started, since Go starts a child with vfork and
	// the kernel carries the parent's high-water mark over the exec.
	MaxRSS int64 `json:"maxRSS"`
}

// peakRSS reads VmHWM from /proc/self/status.
func peakRSS() (int64, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmHWM in /proc/self/status")
}

// TestRenderChild is the child process of BenchmarkRenderFleet: it renders
// main of the repository named by NUON_RENDER_CHILD_REPO, writes the
// objects and moves the refs, as nuon render does, and prints what
// changed. Without that variable it does nothing.
func TestRenderChild(t *testing.T) {
	dir := os.Getenv(childRepo)
	if dir == "" {
		t.Skip("only run as the child of BenchmarkRenderFleet")
	}
	if p := os.Getenv(childCPUProfile); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	ctx := context.Background()
	repo, err := gitrepo.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := renderRepo(ctx, repo, "refs/heads/main", options(t))
	if err != nil {
		t.Fatal(err)
	}
	writeHeap(t, os.Getenv(childHeapProfile), ".render")
	if err := apply(ctx, repo, res, res.Updates); err != nil {
		t.Fatal(err)
	}
	writeHeap(t, os.Getenv(childHeapProfile), "")
	hwm, err := peakRSS()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(childResult{Changed: res.ChangedCount(), Updates: len(res.Updates), Incremental: res.Incremental, MaxRSS: hwm})
	fmt.Printf("RESULT %s\n", out)
}

// writeHeap writes a heap profile to path+suffix, when path is set.
func writeHeap(tb testing.TB, path, suffix string) {
	if path == "" {
		return
	}
	f, err := os.Create(path + suffix)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		tb.Fatal(err)
	}
}

// childRun is one render by a child process.
type childRun struct {
	res       childResult
	wall, cpu time.Duration
	// maxRSS is the child's peak resident set, in bytes (see
	// childResult.MaxRSS).
	maxRSS int64
}

// renderChild renders main of the repository dir in a child process (this
// test binary running TestRenderChild) and measures it from the outside.
func renderChild(tb testing.TB, dir string, env ...string) childRun {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRenderChild$", "-test.count=1")
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != childCPUProfile && name != childHeapProfile {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, childRepo+"="+dir), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if err != nil {
		tb.Fatalf("render child: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	var run childRun
	_, line, ok := strings.Cut(stdout.String(), "RESULT ")
	line, _, _ = strings.Cut(line, "\n")
	if !ok || json.Unmarshal([]byte(line), &run.res) != nil {
		tb.Fatalf("render child printed no result:\n%s", stdout.String())
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	run.wall = wall
	run.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	run.maxRSS = run.res.MaxRSS
	return run
}

// sizes are the fleet sizes to measure.
func sizes(tb testing.TB) []int {
	spec := os.Getenv(fleetSizes)
	if spec == "" {
		spec = "1000,10000"
	}
	var out []int
	for _, s := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			tb.Fatalf("%s: %q is not a fleet size", fleetSizes, s)
		}
		out = append(out, n)
	}
	return out
}

// BenchmarkRenderFleet renders a four-component tenant of N installs cold
// into a fresh bare repository, each render in a child process of its own
// (see TestRenderChild), for N in NUON_BENCH_FLEET (default 1,000 and
// 10,000; make bench-fleet measures 100,000 too). It reports, per N:
//
//   - ns/op, cpu-ms/op, maxrss-MB: the cold render's wall time, CPU time
//     (rusage) and peak resident set (VmHWM, see childResult.MaxRSS), all
//     of the child process;
//   - fastimport-ms/op, fastimport-cpu-ms/op: git fast-import writing the
//     same blobs, trees and commits into a fresh copy of the source
//     repository (unsigned: fast-import cannot sign), and x-fastimport,
//     x-fastimport-cpu, the render's time over git's;
//   - rerender-ms/op, rerender-cpu-ms/op, rerender-maxrss-MB: one install's
//     input changed on main, rendered again by a new child;
//   - rerender-inproc-ms/op, rerender-inproc-cpu-ms/op: that install
//     changed again and rendered in this process, with a fresh repository
//     handle, as the tenant server renders (no process start, schemas
//     compiled, key loaded).
//
// NUON_RENDER_CPUPROFILE and NUON_RENDER_MEMPROFILE name files the cold
// render's child writes pprof profiles to, and the re-render's to the same
// names with ".rerender" added (the last N measured wins).
func BenchmarkRenderFleet(b *testing.B) {
	for _, n := range sizes(b) {
		b.Run(fmt.Sprintf("installs=%d", n), func(b *testing.B) { benchFleet(b, n) })
	}
}

func benchFleet(b *testing.B, n int) {
	files := fleet(b, n)
	seed := filepath.Join(b.TempDir(), "seed.git")
	gittest.InitBare(b, seed)
	sr, err := gitrepo.Open(seed)
	if err != nil {
		b.Fatal(err)
	}
	source := commitFiles(b, sr, "refs/heads/main", plumbing.ZeroHash, files)
	id := fmt.Sprintf("i%05d", n/2)
	file := "installs/" + id + ".yaml"
	edited := map[string][]byte{file: bytes.Replace(files[file], []byte("cidr: 10."), []byte("cidr: 172."), 1)}
	var profiles, reProfiles []string
	for _, name := range []string{childCPUProfile, childHeapProfile} {
		if p := os.Getenv(name); p != "" {
			profiles = append(profiles, name+"="+p)
			reProfiles = append(reProfiles, name+"="+p+".rerender")
		}
	}

	var cold, re childRun
	var fastImport, fastImportCPU, inproc, inprocCPU time.Duration
	opts := options(b)
	ctx := context.Background()
	loops := 0
	for b.Loop() {
		b.StopTimer()
		loops++
		dir := filepath.Join(b.TempDir(), "tenant.git")
		if out, err := exec.Command("cp", "-a", seed, dir).CombinedOutput(); err != nil {
			b.Fatalf("copy the source repository: %v: %s", err, out)
		}
		b.StartTimer()
		run := renderChild(b, dir, profiles...)
		b.StopTimer()
		if run.res.Changed != n {
			b.Fatalf("rendered %d installs, want %d", run.res.Changed, n)
		}
		cold.wall += run.wall
		cold.cpu += run.cpu
		cold.maxRSS = max(cold.maxRSS, run.maxRSS)

		repo, err := gitrepo.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		wall, cpu := fastImportRepo(b, repo, seed)
		fastImport += wall
		fastImportCPU += cpu

		commitFiles(b, repo, "refs/heads/main", source, mergeFiles(files, edited))
		run = renderChild(b, dir, reProfiles...)
		if run.res.Changed != 1 || run.res.Updates != 2 || !run.res.Incremental {
			b.Fatalf("re-render: %+v; want 1 install changed, 2 updates, incremental", run.res)
		}
		re.wall += run.wall
		re.cpu += run.cpu
		re.maxRSS = max(re.maxRSS, run.maxRSS)

		// The same in this process, as the tenant server renders: without
		// the child's start (the runtime, loading the schemas, the key).
		again := mergeFiles(files, map[string][]byte{file: bytes.Replace(files[file], []byte("cidr: 10."), []byte("cidr: 192."), 1)})
		commitFiles(b, repo, "refs/heads/main", source, again)
		runtime.GC()
		cpu = cpuTime(b)
		start := time.Now()
		repo, err = gitrepo.Open(dir)
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
		inproc += time.Since(start)
		inprocCPU += cpuTime(b) - cpu
		if res.ChangedCount() != 1 || !res.Incremental {
			b.Fatalf("in-process re-render changed %d installs, incremental %v", res.ChangedCount(), res.Incremental)
		}
		b.StartTimer()
	}
	count := float64(loops)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / count }
	b.ReportMetric(ms(cold.cpu), "cpu-ms/op")
	b.ReportMetric(float64(cold.maxRSS)/(1<<20), "maxrss-MB")
	b.ReportMetric(ms(fastImport), "fastimport-ms/op")
	b.ReportMetric(ms(fastImportCPU), "fastimport-cpu-ms/op")
	b.ReportMetric(float64(cold.wall)/float64(fastImport), "x-fastimport")
	b.ReportMetric(float64(cold.cpu)/float64(fastImportCPU), "x-fastimport-cpu")
	b.ReportMetric(ms(re.wall), "rerender-ms/op")
	b.ReportMetric(ms(re.cpu), "rerender-cpu-ms/op")
	b.ReportMetric(float64(re.maxRSS)/(1<<20), "rerender-maxrss-MB")
	b.ReportMetric(ms(inproc), "rerender-inproc-ms/op")
	b.ReportMetric(ms(inprocCPU), "rerender-inproc-cpu-ms/op")
}

func mergeFiles(base, over map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(base))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// fastImportRepo has git fast-import write what the render left in repo
// into a fresh copy of the repository seed: every install ref's files as
// blobs and its commit, and the rendered commit with the same tree. It
// returns how long git took, by the clock and in CPU time.
func fastImportRepo(tb testing.TB, repo *gitrepo.Repo, seed string) (wall, cpu time.Duration) {
	tb.Helper()
	st := repo.Storer()
	refs, err := repo.Refs(schemas.InstallRefPrefix)
	if err != nil {
		tb.Fatal(err)
	}
	names := make([]string, 0, len(refs))
	for name := range refs {
		names = append(names, name.String())
	}
	sort.Strings(names)
	var s bytes.Buffer
	data := func(b []byte) {
		fmt.Fprintf(&s, "data %d\n", len(b))
		s.Write(b)
		s.WriteByte('\n')
	}
	who := fmt.Sprintf("nuon renderer <renderer@nuon.invalid> %d +0000", renderTime.Unix())
	mark := 0
	for _, name := range names {
		c, err := gitobj.ReadCommit(st, refs[plumbing.ReferenceName(name)])
		if err != nil {
			tb.Fatal(err)
		}
		files := map[string][]byte{}
		readFiles(tb, st, c.TreeHash, "", files)
		paths := make([]string, 0, len(files))
		for p := range files {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		first := mark + 1
		for _, p := range paths {
			mark++
			fmt.Fprintf(&s, "blob\nmark :%d\n", mark)
			data(files[p])
		}
		fmt.Fprintf(&s, "commit %s\ncommitter %s\n", name, who)
		data([]byte(c.Message))
		for i, p := range paths {
			fmt.Fprintf(&s, "M 100644 :%d %s\n", first+i, p)
		}
		s.WriteByte('\n')
	}
	rendered, err := repo.Ref(plumbing.ReferenceName(schemas.RenderedRef))
	if err != nil {
		tb.Fatal(err)
	}
	rc, err := gitobj.ReadCommit(st, rendered)
	if err != nil {
		tb.Fatal(err)
	}
	// The rendered tree: installs/<shard>/<id> are the install commits'
	// trees, issued/<shard>/<id> the renderer's records, written inline.
	root, err := gitobj.ReadTree(st, rc.TreeHash)
	if err != nil {
		tb.Fatal(err)
	}
	fmt.Fprintf(&s, "commit %s\ncommitter %s\n", schemas.RenderedRef, who)
	data([]byte(rc.Message))
	var walk func(tree plumbing.Hash, prefix string)
	walk = func(tree plumbing.Hash, prefix string) {
		t, err := gitobj.ReadTree(st, tree)
		if err != nil {
			tb.Fatal(err)
		}
		for _, e := range t.Entries {
			p := prefix + e.Name
			switch {
			case strings.HasPrefix(prefix, schemas.InstallsDir+"/") && strings.Count(prefix, "/") == 2 && !e.Mode.IsFile():
				fmt.Fprintf(&s, "M 040000 %s %s\n", e.Hash, p)
			case !e.Mode.IsFile():
				walk(e.Hash, p+"/")
			default:
				blob, err := gitobj.ReadBlob(st, e.Hash, 1<<20)
				if err != nil {
					tb.Fatal(err)
				}
				fmt.Fprintf(&s, "M 100644 inline %s\n", p)
				data(blob)
			}
		}
	}
	for _, e := range root.Entries {
		walk(e.Hash, e.Name+"/")
	}
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
	name := names[len(names)/2]
	if got, want := gittest.Git(tb, target, "rev-parse", name+"^{tree}"), gittest.Git(tb, repo.Location, "rev-parse", name+"^{tree}"); got != want {
		tb.Fatalf("fast-import wrote tree %s for %s, the renderer %s", got, name, want)
	}
	if got := gittest.Git(tb, target, "rev-parse", schemas.RenderedRef+"^{tree}"); got != rc.TreeHash.String() {
		tb.Fatalf("fast-import wrote rendered tree %s, the renderer %s", got, rc.TreeHash)
	}
	return wall, cpu
}

// readFiles reads every file of the tree h into files, path to content.
func readFiles(tb testing.TB, st storer.EncodedObjectStorer, h plumbing.Hash, prefix string, files map[string][]byte) {
	tb.Helper()
	t, err := gitobj.ReadTree(st, h)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range t.Entries {
		if !e.Mode.IsFile() {
			readFiles(tb, st, e.Hash, prefix+e.Name+"/", files)
			continue
		}
		blob, err := gitobj.ReadBlob(st, e.Hash, 1<<20)
		if err != nil {
			tb.Fatal(err)
		}
		files[prefix+e.Name] = blob
	}
}

// BenchmarkRerender measures the render the tenant server makes most: one
// install's file changed on main, rendered in this process with a fresh
// repository handle, written and its refs moved (ns/op, and cpu-ms/op;
// gc-ms/op is the runtime's garbage-collection CPU within it and
// alloc-MB/op what it allocated),
// for N in NUON_BENCH_FLEET (see BenchmarkRenderFleet). The fleet is
// rendered cold once, by a child process, and the repository is then
// configured as the tenant server keeps it (server.ConfigureRepo). Each
// iteration changes the same install's file to a value of its own,
// written by git fast-import (loose, as git fetch writes a small change),
// rendered with one renderer.Cache as the tenant server renders; run it some ten times
// (-benchtime=10x) for a steady figure and a CPU profile of that render.
func BenchmarkRerender(b *testing.B) {
	for _, n := range sizes(b) {
		b.Run(fmt.Sprintf("installs=%d", n), func(b *testing.B) { benchRerender(b, n) })
	}
}

func benchRerender(b *testing.B, n int) {
	files := fleet(b, n)
	dir := filepath.Join(b.TempDir(), "tenant.git")
	gittest.InitBare(b, dir)
	repo, err := gitrepo.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	source := commitFiles(b, repo, "refs/heads/main", plumbing.ZeroHash, files)
	if run := renderChild(b, dir); run.res.Changed != n {
		b.Fatalf("rendered %d installs, want %d", run.res.Changed, n)
	}
	// Configured as the tenant server keeps its repository: main's new
	// objects stored loose, uncompressed.
	if err := server.ConfigureRepo(context.Background(), dir); err != nil {
		b.Fatal(err)
	}
	id := fmt.Sprintf("i%05d", n/2)
	file := "installs/" + id + ".yaml"
	// Only the file changed is kept: the fleet's files would be live heap
	// of this process that the garbage collector scans at every render.
	orig := files[file]
	files = nil
	opts := options(b)
	// Kept across renders, as the tenant server keeps it.
	opts.Cache = renderer.NewCache()
	ctx := context.Background()
	var cpu time.Duration
	var gcCPU float64
	var allocB uint64
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		edited := bytes.Replace(orig, []byte("cidr: 10."), fmt.Appendf(nil, "cidr: 11.%d.", i), 1)
		source = commitFiles(b, repo, "refs/heads/main", source, map[string][]byte{file: edited})
		runtime.GC()
		start := cpuTime(b)
		gcs := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/gc/heap/allocs:bytes"}}
		metrics.Read(gcs)
		gc0, al0 := gcs[0].Value.Float64(), gcs[1].Value.Uint64()
		b.StartTimer()
		r, err := gitrepo.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		res, err := renderRepo(ctx, r, "refs/heads/main", opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := apply(ctx, r, res, res.Updates); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += cpuTime(b) - start
		metrics.Read(gcs)
		gcCPU += gcs[0].Value.Float64() - gc0
		allocB += gcs[1].Value.Uint64() - al0
		if res.ChangedCount() != 1 || !res.Incremental {
			b.Fatalf("re-render changed %d installs, incremental %v", res.ChangedCount(), res.Incremental)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(i), "cpu-ms/op")
	b.ReportMetric(gcCPU*1000/float64(i), "gc-ms/op")
	b.ReportMetric(float64(allocB)/float64(i)/(1<<20), "alloc-MB/op")
}

package server_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gitproto"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// BenchmarkOneChangeMillion is issue 24's one-install change in the
// server at the size of the repository cmd/nuon's BenchmarkMillion
// caches (~/.cache/nuon/bench/million-v2-<N>/rendered.git, N from
// NUON_BENCH_MILLION; skipped unless set and the cache is there): a
// server.New in this process over a copy whose objects are hard links to
// the cache (the cache is not changed), its start render, then one
// install's source file changed on main (update-ref, POST /hooks/main)
// until its desired ref moved as its agent's poll sees it, twice.
// NUON_BENCH_MKTREE=1 writes the changed trees with git mktree (see
// below). NUON_BENCH_CPUPROFILE=PREFIX writes a CPU profile of each change's
// window to PREFIX-1.pprof and PREFIX-2.pprof (of the last loop). It
// reports the mean CPU and allocation of all its changes: -benchtime=10x
// makes twenty.
// millionRepo is server.MillionRepo: the cached repository of
// NUON_BENCH_MILLION installs, and N.
func millionRepo(b *testing.B) (string, string) { return server.MillionRepo(b) }

func BenchmarkOneChangeMillion(b *testing.B) {
	cached, n := millionRepo(b)
	dir := gittest.LinkCopy(b, cached, "tenant.git")
	render, _ := loadKey(b, "render")
	agentKey, _ := loadKey(b, "acme") // every generated install has acme's key
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t0 := time.Now()
	srv, err := server.New(ctx, server.Config{Dir: dir, RenderKey: render, PollInterval: time.Hour,
		HookOpen: true, HookInterval: 10 * time.Millisecond, MaintenanceInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	b.Logf("server.New and start render: %s", time.Since(t0).Round(time.Millisecond))
	// The rollout controller's first read of main parses every install
	// file (once per process): done before the changes, not in them.
	t0 = time.Now()
	if _, err := srv.EvaluateRollouts(ctx); err != nil {
		b.Fatal(err)
	}
	b.Logf("rollout controller's first evaluation: %s", time.Since(t0).Round(time.Millisecond))
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	hs := &http.Server{Handler: srv}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go hs.Serve(ln)
	defer hs.Close()
	base := "http://" + ln.Addr().String()

	var count int
	fmt.Sscan(n, &count)
	id := fmt.Sprintf("i%07d", count/2)
	ref := schemas.InstallRef(id)
	client := &gitproto.Client{URL: base + "/tenant.git", Auth: (&request.Signer{Install: id, Key: agentKey}).SetAuth}
	tip := func() plumbing.Hash {
		refs, err := client.LsRefs(ctx, ref)
		if err != nil {
			b.Fatal(err)
		}
		return refs[plumbing.ReferenceName(ref)]
	}
	// The changed trees are written with git hash-object, which stores
	// them as core.looseCompression says, as a pushed main arrives (the
	// server's unpack-objects stores them); git mktree compresses them
	// whatever the setting, and the server then inflated the 48 MB
	// installs/ tree: NUON_BENCH_MKTREE=1 writes them so, to compare.
	mktree := os.Getenv("NUON_BENCH_MKTREE") == "1"
	cidrLine := regexp.MustCompile(`(?m)^  cidr: .*$`)
	edit := func(cidr string) string {
		parent := strings.TrimSpace(gittest.Git(b, dir, "rev-parse", schemas.MainRef))
		file := gittest.Git(b, dir, "cat-file", "blob", parent+":installs/"+id+".yaml")
		blob, err := gittest.Run(dir, []byte(cidrLine.ReplaceAllString(file, "  cidr: "+cidr)), "hash-object", "-w", "--stdin")
		if err != nil {
			b.Fatal(err)
		}
		swap := func(treeish, name, kind, hash string) string {
			if mktree {
				var out strings.Builder
				for _, line := range strings.Split(strings.TrimRight(gittest.Git(b, dir, "ls-tree", treeish), "\n"), "\n") {
					if strings.HasSuffix(line, "\t"+name) {
						meta, _, _ := strings.Cut(line, "\t")
						mode, _, _ := strings.Cut(meta, " ")
						line = mode + " " + kind + " " + hash + "\t" + name
					}
					out.WriteString(line + "\n")
				}
				h, err := gittest.Run(dir, []byte(out.String()), "mktree")
				if err != nil {
					b.Fatal(err)
				}
				return strings.TrimSpace(h)
			}
			// The tree as git stores it ("<mode> <name>\0<20 bytes>"
			// each entry), name's id replaced.
			raw, err := exec.Command("git", "-C", dir, "cat-file", "tree", treeish).Output()
			if err != nil {
				b.Fatal(err)
			}
			id, err := hex.DecodeString(hash)
			if err != nil {
				b.Fatal(err)
			}
			found := false
			for rest := raw; len(rest) > 0; {
				nul := bytes.IndexByte(rest, 0)
				_, entry, _ := bytes.Cut(rest[:nul], []byte{' '})
				if string(entry) == name {
					copy(rest[nul+1:nul+21], id)
					found = true
				}
				rest = rest[nul+21:]
			}
			if !found {
				b.Fatalf("%s has no %s", treeish, name)
			}
			h, err := gittest.Run(dir, raw, "hash-object", "-t", "tree", "-w", "--stdin")
			if err != nil {
				b.Fatal(err)
			}
			return strings.TrimSpace(h)
		}
		installs := swap(parent+":installs", id+".yaml", "blob", strings.TrimSpace(blob))
		root := swap(parent+"^{tree}", "installs", "tree", installs)
		return strings.TrimSpace(gittest.Git(b, dir, "commit-tree", root, "-p", parent, "-m", "bench: change "+id))
	}
	profile := os.Getenv("NUON_BENCH_CPUPROFILE")
	// Sums over every change, for the means reported: with
	// -benchtime=10x, twenty changes, where one change's CPU varies with
	// the machine's load by tens of milliseconds.
	var changes int
	var sumCPU time.Duration
	var sumAlloc uint64
	change := func(k int, cidr string) time.Duration {
		next := edit(cidr)
		before := tip()
		runtime.GC()
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		if profile != "" {
			f, err := os.Create(fmt.Sprintf("%s-%d.pprof", profile, k))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				b.Fatal(err)
			}
		}
		start, cpu0 := time.Now(), cpuTime()
		gittest.Git(b, dir, "update-ref", schemas.MainRef, next)
		resp, err := http.Post(base+"/hooks/main", "", nil)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		deadline := start.Add(10 * time.Minute)
		for tip() == before {
			if time.Now().After(deadline) {
				b.Fatalf("%s's desired ref did not move", id)
			}
			time.Sleep(2 * time.Millisecond)
		}
		d, cpu := time.Since(start), cpuTime()-cpu0
		if profile != "" {
			pprof.StopCPUProfile()
		}
		runtime.ReadMemStats(&ms1)
		changes, sumCPU, sumAlloc = changes+1, sumCPU+cpu, sumAlloc+ms1.TotalAlloc-ms0.TotalAlloc
		b.Logf("change %d: %s, CPU %s (this process and its git processes, the agent's polls too); GCs %d, GC pause %s, allocated %d MB, live heap before %d MB",
			k, d.Round(time.Millisecond), cpu.Round(time.Millisecond), ms1.NumGC-ms0.NumGC, time.Duration(ms1.PauseTotalNs-ms0.PauseTotalNs),
			(ms1.TotalAlloc-ms0.TotalAlloc)>>20, ms0.HeapAlloc>>20)
		return d
	}
	for b.Loop() {
		stamp := time.Now().UnixNano() % 200
		d1 := change(1, fmt.Sprintf("172.%d.0.0/24", stamp))
		d2 := change(2, fmt.Sprintf("192.%d.0.0/24", stamp))
		b.ReportMetric(float64(d1.Microseconds())/1000, "change-ms")
		b.ReportMetric(float64(d2.Microseconds())/1000, "change2-ms")
	}
	b.ReportMetric(float64(sumCPU.Microseconds())/1000/float64(changes), "cpu-ms/change")
	b.ReportMetric(float64(sumAlloc)/(1<<20)/float64(changes), "alloc-MB/change")
}

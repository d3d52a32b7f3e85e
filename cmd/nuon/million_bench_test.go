package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitproto"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
)

// millionVersion names the cached repositories of BenchmarkMillion: change
// it when the fleet they hold or the rendered layout changes, and the next
// run builds them again.
const millionVersion = "v2"

// BenchmarkMillion measures a fleet of NUON_BENCH_MILLION installs (make
// bench-fleet runs it with 1,000,000) with the built nuon binary, as
// issue 24 asks, and the same figures at 1,000 installs beside them:
//
//   - the cold render by `nuon render`, a process of its own: wall clock,
//     CPU (user + system) and peak resident memory (cold-*);
//   - `nuon server` on the rendered repository: the time until /readyz
//     answers and its resident memory then, with the ref table loaded
//     (start-s, start-rss-MB), and after the fleet index is built;
//   - the bytes on the wire of one signed poll (ls-refs of an install's
//     desired and status refs) and of one signed status push, HTTP
//     headers included (poll-B, push-B);
//   - one install's source file changed on main: the time from main moving
//     (update-ref, then POST /hooks/main) to that install's desired ref
//     moved by the running server, twice (change-ms, change2-ms);
//   - the fleet view: the time until /fleet first answers 200 (the index
//     is built), and then the time and bytes of its first page
//     (fleet-ms, fleet-B), slowest of 3;
//   - a restart with the saved nuon-fleet-index.gob: time until /fleet
//     answers 200 again (restart-index-s).
//
// The N-install source and rendered repositories are built once and kept
// under ~/.cache/nuon/bench/million-<version>-<N> (the cold render's
// figures with them, in cold.json): a run after the first reuses them and
// reports the figures of the render that built them. Each run serves a
// copy whose objects are hard links to the cached ones, so the cache
// does not change. NUON_BENCH_NUON names the nuon binary;
// default one built from this tree.
func BenchmarkMillion(b *testing.B) {
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
	sizes := []int{1000}
	if n != 1000 {
		sizes = append(sizes, n)
	}
	for _, size := range sizes {
		b.Run(fmt.Sprintf("installs=%d", size), func(b *testing.B) {
			for b.Loop() {
				benchMillion(b, bin, size, key)
			}
		})
	}
}

// coldRun is one cold render, as kept in the cache.
type coldRun struct {
	Installs int     `json:"installs"`
	WallS    float64 `json:"wallSeconds"`
	CPUS     float64 `json:"cpuSeconds"`
	PeakMB   float64 `json:"peakMB"`
	At       string  `json:"at"`
	Load     string  `json:"loadAverage"`
}

func benchMillion(b *testing.B, bin string, n int, key *signature.Signer) {
	home, err := os.UserHomeDir()
	if err != nil {
		b.Fatal(err)
	}
	cache := filepath.Join(home, ".cache", "nuon", "bench", fmt.Sprintf("million-%s-%d", millionVersion, n))
	rendered, cold := millionRendered(b, bin, cache, n)
	b.ReportMetric(cold.WallS, "cold-s")
	b.ReportMetric(cold.CPUS, "cold-cpu-s")
	b.ReportMetric(cold.PeakMB, "cold-peak-MB")
	b.Logf("%d installs: cold render %.1f s wall, %.1f s CPU, %.0f MB peak (rendered %s, load average %s)", n, cold.WallS, cold.CPUS, cold.PeakMB, cold.At, cold.Load)

	// The served repository is a copy whose objects are hard links to
	// the cached ones (the server's maintenance is off), so the cache
	// does not change.
	dir := gittest.LinkCopy(b, rendered, "tenant.git")
	token := filepath.Join(b.TempDir(), "view-token")
	if err := os.WriteFile(token, []byte("million-view-token\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	keys := filepath.Join(repoRoot(), "fixtures", "keys")
	load0 := loadAverage()
	start := time.Now()
	srv := startServer(b, bin, nil, "--repo", dir, "--render-key", filepath.Join(keys, "render"),
		"--poll-interval", "1h", "--hook-open", "--hook-interval", "10ms", "--maintenance-interval", "0",
		"--view-token-file", token, "--log-level", "warn")
	srv.waitReady(b, 30*time.Minute)
	ready := time.Since(start)
	pid := srv.pid()
	rssReady := procStatus(b, pid, "VmRSS")
	b.ReportMetric(ready.Seconds(), "start-s")
	b.ReportMetric(float64(rssReady)/1024, "start-rss-MB")

	view := func() (int, int, time.Duration) {
		req, _ := http.NewRequest(http.MethodGet, srv.url+"/fleet", nil)
		req.Header.Set("Authorization", "Bearer million-view-token")
		t0 := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, 0, 0
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, len(body), time.Since(t0)
	}
	waitView := func(t0 time.Time) time.Duration {
		waitFor(b, "the fleet index", 60*time.Minute, srv.log.String, func() bool { c, _, _ := view(); return c == http.StatusOK })
		return time.Since(t0)
	}
	indexed := waitView(start)
	b.ReportMetric(indexed.Seconds(), "index-s")
	var slowest time.Duration
	var size int
	for range 3 {
		code, nb, d := view()
		if code != http.StatusOK {
			b.Fatalf("/fleet: %d", code)
		}
		slowest, size = max(slowest, d), nb
	}
	b.ReportMetric(float64(slowest.Microseconds())/1000, "fleet-ms")
	b.ReportMetric(float64(size), "fleet-B")
	b.ReportMetric(float64(procStatus(b, pid, "VmRSS"))/1024, "indexed-rss-MB")

	url := srv.url + "/tenant.git"
	id := millionInstall(n / 2)
	pollB, pushB := millionWire(b, url, id, key)
	b.ReportMetric(pollB, "poll-B")
	b.ReportMetric(pushB, "push-B")

	change := func(cidr string) time.Duration {
		next := millionEdit(b, dir, id, cidr)
		c := &gitproto.Client{URL: url, HTTP: http.DefaultClient, Auth: (&request.Signer{Install: id, Key: key}).SetAuth}
		ctx := context.Background()
		before, err := c.LsRefs(ctx, schemas.InstallRef(id))
		if err != nil {
			b.Fatal(err)
		}
		old := before[plumbing.ReferenceName(schemas.InstallRef(id))]
		t0 := time.Now()
		gittest.Git(b, dir, "update-ref", schemas.MainRef, next)
		resp, err := http.Post(srv.url+"/hooks/main", "application/json", strings.NewReader("{}"))
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		deadline := t0.Add(10 * time.Minute)
		for {
			now, err := c.LsRefs(ctx, schemas.InstallRef(id))
			if err != nil {
				b.Fatal(err)
			}
			if h := now[plumbing.ReferenceName(schemas.InstallRef(id))]; h != old {
				return time.Since(t0)
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s's desired ref did not move in 10 minutes\n%s", id, srv.log.String())
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	stamp := time.Now().UnixNano()
	d1 := change(fmt.Sprintf("172.%d.0.0/24", stamp%200))
	d2 := change(fmt.Sprintf("192.%d.0.0/24", stamp%200))
	b.ReportMetric(float64(d1.Microseconds())/1000, "change-ms")
	b.ReportMetric(float64(d2.Microseconds())/1000, "change2-ms")
	b.ReportMetric(float64(procStatus(b, pid, "VmHWM"))/1024, "server-peak-MB")

	// A restart reads the saved fleet index.
	srv.stop()
	start = time.Now()
	again := srv.restart(b)
	again.waitReady(b, 30*time.Minute)
	b.ReportMetric(time.Since(start).Seconds(), "restart-s")
	srv = again
	b.ReportMetric(waitView(start).Seconds(), "restart-index-s")
	b.ReportMetric(float64(procStatus(b, again.pid(), "VmRSS"))/1024, "restart-rss-MB")
	b.Logf("%d installs: server ready in %s (%d MB), index in %s, one-install change %s then %s; load average %s before, %s after",
		n, ready.Round(time.Millisecond), rssReady/1024, indexed.Round(time.Millisecond), d1.Round(time.Millisecond), d2.Round(time.Millisecond), load0, loadAverage())
}

func millionInstall(i int) string { return fmt.Sprintf("i%07d", i) }

// millionInstallFile is install i's source file: each install has its own
// inputs, cloud account and registry, spread over both channels.
func millionInstallFile(i int, cidr, agentKey string) string {
	channels := []string{"stable", "beta"}
	regions := []string{"us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-2"}
	id := millionInstall(i)
	account := fmt.Sprintf("%012d", 100000000000+i)
	region := regions[i%len(regions)]
	if cidr == "" {
		cidr = fmt.Sprintf("10.%d.%d.0/24", i/256%256, i%256)
	}
	return fmt.Sprintf(`channel: %s
inputs:
  cidr: %s
  domain: %s.shop.example
cloud:
  provider: aws
  region: %s
  accountID: "%s"
sandbox:
  name: aws-eks
  version: 0.4.0
registry: %s.dkr.ecr.%s.amazonaws.com/nuon-%s
agentKey: %s
`, channels[i%2], cidr, id, region, account, account, region, id, agentKey)
}

// millionRendered returns the cached rendered repository of n installs,
// building it (source with git fast-import, then a cold `nuon render`
// process, measured) when it is missing.
func millionRendered(b *testing.B, bin, cache string, n int) (string, coldRun) {
	rendered := filepath.Join(cache, "rendered.git")
	var cold coldRun
	if data, err := os.ReadFile(filepath.Join(cache, "cold.json")); err == nil {
		if err := json.Unmarshal(data, &cold); err == nil && cold.Installs == n {
			if _, err := os.Stat(rendered); err == nil {
				return rendered, cold
			}
		}
	}
	if err := os.RemoveAll(cache); err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		b.Fatal(err)
	}
	work := filepath.Join(cache, "work.git")
	gittest.InitBare(b, work)
	millionSource(b, work, n)

	cmd := exec.Command(bin, "render", "--repo", work, "--key", filepath.Join(repoRoot(), "fixtures", "keys", "render"),
		"--cache-dir", filepath.Join(cache, "render-cache"), "-o", "json")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	load := loadAverage()
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		b.Fatalf("nuon render: %v\n%s", err, tail(out.String(), 4000))
	}
	wall := time.Since(t0)
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cold = coldRun{Installs: n, WallS: wall.Seconds(),
		CPUS:   time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds(),
		PeakMB: float64(ru.Maxrss) / 1024, At: time.Now().UTC().Format(time.RFC3339), Load: load}
	if err := os.Rename(work, rendered); err != nil {
		b.Fatal(err)
	}
	data, _ := json.MarshalIndent(cold, "", "  ")
	if err := os.WriteFile(filepath.Join(cache, "cold.json"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	return rendered, cold
}

// millionSource commits the sample tenant with n generated installs (in
// place of its own) on main of the bare repository dir: the blobs through
// git fast-import (a blob command each: fast-import's own tree of one
// directory is a list it searches for every entry, quadratic in n), the
// installs/ tree with git mktree.
func millionSource(b *testing.B, dir string, n int) {
	agentKey, err := os.ReadFile(filepath.Join(repoRoot(), "fixtures", "keys", "acme.pub"))
	if err != nil {
		b.Fatal(err)
	}
	ak := strings.TrimSpace(string(agentKey))
	cmd := exec.Command("git", "fast-import", "--quiet")
	cmd.Dir = dir
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(in, 1<<20)
	var tree strings.Builder
	for i := range n {
		data := millionInstallFile(i, "", ak)
		fmt.Fprintf(w, "blob\ndata %d\n%s\n", len(data), data)
		fmt.Fprintf(&tree, "100644 blob %s\t%s.yaml\n", plumbing.ComputeHash(plumbing.BlobObject, []byte(data)), millionInstall(i))
	}
	// The sample tenant's other files, on a commit of their own.
	fmt.Fprintf(w, "commit refs/heads/bench-base\ncommitter nuon bench <bench@nuon.invalid> 1772366400 +0000\ndata 5\nbase\n")
	root := filepath.Join(repoRoot(), "fixtures", "tenant")
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if strings.HasPrefix(rel, "installs"+string(filepath.Separator)) {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "M 100644 inline %s\ndata %d\n", filepath.ToSlash(rel), len(data))
		w.Write(data)
		w.WriteString("\n")
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		b.Fatalf("git fast-import: %v: %s", err, stderr.String())
	}
	installs, err := gittest.Run(dir, []byte(tree.String()), "mktree")
	if err != nil {
		b.Fatal(err)
	}
	top := gittest.Git(b, dir, "ls-tree", "refs/heads/bench-base")
	top = strings.TrimSpace(top) + "\n040000 tree " + installs + "\tinstalls\n"
	rootTree, err := gittest.Run(dir, []byte(top), "mktree")
	if err != nil {
		b.Fatal(err)
	}
	main := gittest.Git(b, dir, "commit-tree", rootTree, "-m", "fleet")
	gittest.Git(b, dir, "update-ref", schemas.MainRef, main)
	gittest.Git(b, dir, "update-ref", "-d", "refs/heads/bench-base")
}

// millionEdit commits on main of dir the change of install id's cidr
// and returns the commit, without moving main.
func millionEdit(b *testing.B, dir, id, cidr string) string {
	agentKey, err := os.ReadFile(filepath.Join(repoRoot(), "fixtures", "keys", "acme.pub"))
	if err != nil {
		b.Fatal(err)
	}
	i, _ := strconv.Atoi(strings.TrimPrefix(id, "i"))
	blob, err := gittest.Run(dir, []byte(millionInstallFile(i, cidr, strings.TrimSpace(string(agentKey)))), "hash-object", "-w", "--stdin")
	if err != nil {
		b.Fatal(err)
	}
	parent := gittest.Git(b, dir, "rev-parse", schemas.MainRef)
	swap := func(treeish, name, kind, hash string) string {
		list := gittest.Git(b, dir, "ls-tree", treeish)
		var out strings.Builder
		for _, line := range strings.Split(list, "\n") {
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
		return h
	}
	installs := swap(parent+":installs", id+".yaml", "blob", blob)
	root := swap(parent+"^{tree}", "installs", "tree", installs)
	return gittest.Git(b, dir, "commit-tree", root, "-p", parent, "-m", "bench: change "+id)
}

// millionWire measures the bytes on the wire, both ways, of one signed
// poll and of one signed status push of install id, each on a
// connection of its own (the second and later polls of a keep-alive
// connection send the same bytes).
func millionWire(b *testing.B, url, id string, key *signature.Signer) (poll, push float64) {
	var bytesIO atomic.Int64
	client := func() *http.Client {
		dialer := &net.Dialer{}
		return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countedConn{Conn: c, in: &bytesIO, out: &bytesIO}, nil
		}}, Timeout: time.Minute}
	}
	ctx := context.Background()
	const polls = 10
	hc := client()
	c := &gitproto.Client{URL: url, HTTP: hc, Auth: (&request.Signer{Install: id, Key: key}).SetAuth}
	if _, err := c.LsRefs(ctx, schemas.InstallRef(id), schemas.StatusRef(id)); err != nil {
		b.Fatal(err)
	}
	bytesIO.Store(0)
	for range polls {
		refs, err := c.LsRefs(ctx, schemas.InstallRef(id), schemas.StatusRef(id))
		if err != nil {
			b.Fatal(err)
		}
		if len(refs) == 0 {
			b.Fatalf("poll of %s: no refs", id)
		}
	}
	poll = float64(bytesIO.Load()) / polls

	st := memory.NewStorage()
	remote := agent.NewRemote(url, agent.WithHTTPClient(client()), agent.WithRequestSigner(&request.Signer{Install: id, Key: key}))
	ref := plumbing.ReferenceName(schemas.StatusRef(id))
	heads, err := remote.Heads(ctx, ref)
	if err != nil {
		b.Fatal(err)
	}
	old := heads[ref]
	h := millionStatus(b, st, id, key, old)
	bytesIO.Store(0)
	if err := remote.Push(ctx, st, ref, old, h); err != nil {
		b.Fatal(err)
	}
	push = float64(bytesIO.Load())
	return poll, push
}

// millionStatus writes into st a signed status commit of install id, four
// components applied, on top of parent (none when zero), as the agent
// writes one after a change.
func millionStatus(b *testing.B, st *memory.Storage, id string, key *signature.Signer, parent plumbing.Hash) plumbing.Hash {
	batch := gitobj.NewBatch()
	comps := map[string]schemas.ComponentStatus{}
	var applied []gitobj.Entry
	for _, c := range []string{"sandbox", "database", "api", "dashboards"} {
		cs := schemas.ComponentStatus{Phase: schemas.PhaseApplied, Version: "1.2.0"}
		comps[c] = cs
		body, _ := json.MarshalIndent(map[string]any{"component": c, "version": cs.Version, "outputs": map[string]string{"endpoint": c + "." + id + ".internal"}}, "", "  ")
		applied = append(applied, gitobj.Entry{Name: c + ".json", Mode: filemode.Regular, Hash: batch.Add(plumbing.BlobObject, body)})
	}
	s := schemas.Status{APIVersion: schemas.APIVersion, Kind: schemas.KindStatus, Install: id, Generation: 1,
		Phase: schemas.InstallReady, HeartbeatEvery: "10m0s", Components: comps}
	body, _ := json.MarshalIndent(s, "", "  ")
	tree := batch.Tree([]gitobj.Entry{
		{Name: schemas.StatusFile, Mode: filemode.Regular, Hash: batch.Add(plumbing.BlobObject, body)},
		{Name: schemas.AppliedDir, Mode: filemode.Dir, Hash: batch.Tree(applied)},
	})
	who := object.Signature{Name: "nuon agent " + id, Email: id + "@agent.nuon.invalid", When: time.Now()}
	var parents []plumbing.Hash
	if !parent.IsZero() {
		parents = []plumbing.Hash{parent}
	}
	h, err := batch.Commit(gitobj.Commit{Tree: tree, Parents: parents, Author: who,
		Message: fmt.Sprintf("nuon: status %s generation 1: %s\n\nApplied 4 components.\n\n%s: %s\n%s: 1\n", id, schemas.InstallReady,
			schemas.TrailerInstall, id, schemas.TrailerGeneration)}, key)
	if err != nil {
		b.Fatal(err)
	}
	if err := batch.Flush(st); err != nil {
		b.Fatal(err)
	}
	return h
}

package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/schemas"
)

// BenchmarkReplicaRefreshMillion times a replica's refresh after one
// install's change on its writer, on the repository cmd/nuon's
// BenchmarkMillion caches (NUON_BENCH_MILLION installs, e.g. 1000000):
// the writer (no render key) and the replica's mirror are copies of its
// refs that borrow its objects (replicaBorrowCopy; TMPDIR=/dev/shm keeps
// what they write off the disk), the replica's first refresh finds nothing to fetch, then
// each iteration changes one install as a render does (main's
// installs/<id>.yaml, the rendered tree's installs/<shard>/<id>/ and the
// install's desired ref, written with git mktree and commit-tree) and
// times the replica's refresh. CPU is this process's and its git
// children's (the writer's upload-pack included). NUON_BENCH_CPUPROFILE
// writes a CPU profile of the refreshes; GIT_TRACE2_PERF traces git.
//
//	NUON_BENCH_MILLION=1000000 TMPDIR=/dev/shm go test -run '^$' -bench '^BenchmarkReplicaRefreshMillion$' -benchtime=1x -timeout 30m ./server/
func BenchmarkReplicaRefreshMillion(b *testing.B) {
	cached, n := millionRepo(b)
	dir := replicaBorrowCopy(b, cached, "writer.git")
	mirror := replicaBorrowCopy(b, cached, "mirror.git")
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	t0 := time.Now()
	w, err := New(ctx, Config{Dir: dir, PollInterval: time.Hour, ReplicaToken: "tok", Logger: logger, MaintenanceInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(w)
	r, err := New(ctx, Config{Dir: mirror, Mode: ModeReplica, Writer: hs.URL, ReplicaToken: "tok", PollInterval: time.Hour, Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { hs.Close(); r.Close(); w.Close() })
	if err := r.Refresh(ctx); err != nil {
		b.Fatal(err)
	}
	b.Logf("%s installs: writer and replica up, first refresh done, in %s", n, time.Since(t0).Round(time.Millisecond))
	if f := os.Getenv("NUON_BENCH_CPUPROFILE"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			b.Fatal(err)
		}
		pprof.StartCPUProfile(out)
		b.Cleanup(func() { pprof.StopCPUProfile(); out.Close() })
	}
	var wall, cpu time.Duration
	i := 0
	for b.Loop() {
		b.StopTimer()
		id := fmt.Sprintf("i%07d", (333333+i*1009)%1000000)
		i++
		ref := schemas.InstallRef(id)
		tip := replicaChangeInstall(b, dir, id)
		w.refs.set(ref, tip)
		w.sideRefMoved()
		b.StartTimer()
		c0, t0 := replicaRusage(), time.Now()
		if err := r.Refresh(ctx); err != nil {
			b.Fatal(err)
		}
		d, c := time.Since(t0), replicaRusage()-c0
		wall, cpu = wall+d, cpu+c
		if h, _ := r.refs.get(ref); h != tip {
			b.Fatalf("%s: the replica's table has %s after the refresh, the writer %s", ref, h, tip)
		}
		if got := strings.TrimSpace(replicaGit(b, mirror, nil, "rev-parse", ref)); got != tip.String() {
			b.Fatalf("%s: the mirror has %s after the refresh, the writer %s", ref, got, tip)
		}
		b.Logf("%s installs: %s changed, the replica's refresh took %s, %s CPU (with the writer's upload-pack); load average %s", n, id, d.Round(time.Millisecond), c.Round(time.Millisecond), replicaLoad())
	}
	b.ReportMetric(float64(wall.Milliseconds())/float64(i), "refresh-ms")
	b.ReportMetric(float64(cpu.Milliseconds())/float64(i), "refresh-cpu-ms")
}

// replicaBorrowCopy makes a bare repository in a temporary folder with
// src's refs and configuration that borrows src's objects (an alternate):
// git writes new objects to the copy alone, so src is never changed, and
// the copy needs no room for src's objects (TMPDIR may be another file
// system, a tmpfs).
func replicaBorrowCopy(tb testing.TB, src, name string) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), name)
	if err := os.MkdirAll(filepath.Join(dir, "objects", "info"), 0o755); err != nil {
		tb.Fatal(err)
	}
	for _, f := range []string{"HEAD", "config", "packed-refs", "refs"} {
		if out, err := exec.Command("cp", "-a", filepath.Join(src, f), dir).CombinedOutput(); err != nil {
			tb.Fatalf("copy %s: %v: %s", src, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "objects", "info", "alternates"), []byte(filepath.Join(src, "objects")+"\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// replicaChangeInstall changes install id as a render of a one-install
// change on main does, in the repository dir: main's installs/<id>.yaml,
// the rendered commit's installs/<shard>/<id>/ (one file) and the
// install's desired ref, whose new tip it returns.
func replicaChangeInstall(tb testing.TB, dir, id string) plumbing.Hash {
	tb.Helper()
	git := func(stdin string, args ...string) string {
		var in io.Reader
		if stdin != "" {
			in = strings.NewReader(stdin)
		}
		return strings.TrimSpace(replicaGit(tb, dir, in, args...))
	}
	// swap returns tree with entry name pointing at h.
	swap := func(tree, name, h string) string {
		var out strings.Builder
		found := false
		for _, line := range strings.Split(git("", "ls-tree", tree), "\n") {
			meta, entry, _ := strings.Cut(line, "\t")
			if entry == name {
				f := strings.Fields(meta)
				meta, found = f[0]+" "+f[1]+" "+h, true
			}
			out.WriteString(meta + "\t" + entry + "\n")
		}
		if !found {
			tb.Fatalf("%s: no %s", tree, name)
		}
		return git(out.String(), "mktree")
	}
	stamp := fmt.Sprint(time.Now().UnixNano())
	main, rendered, desired := schemas.MainRef, schemas.RenderedRef, schemas.InstallRef(id)
	blob := git("changed "+stamp+"\n", "hash-object", "-w", "--stdin")
	installs := swap(main+":"+schemas.InstallsDir, id+".yaml", blob)
	newMain := git("", "commit-tree", swap(main, schemas.InstallsDir, installs), "-p", main, "-m", "change "+id)
	sum := sha256.Sum256([]byte(id))
	shard := hex.EncodeToString(sum[:1])
	sub := git("", "rev-parse", rendered+":"+schemas.InstallsDir+"/"+shard+"/"+id)
	file := ""
	for _, line := range strings.Split(git("", "ls-tree", sub), "\n") {
		if meta, name, _ := strings.Cut(line, "\t"); strings.Contains(meta, " blob ") {
			file = name
			break
		}
	}
	newSub := swap(sub, file, git("rendered "+stamp+"\n", "hash-object", "-w", "--stdin"))
	newShard := swap(rendered+":"+schemas.InstallsDir+"/"+shard, id, newSub)
	newInstalls := swap(rendered+":"+schemas.InstallsDir, shard, newShard)
	newRendered := git("", "commit-tree", swap(rendered, schemas.InstallsDir, newInstalls), "-p", rendered, "-m", "render "+id)
	tip := git("", "commit-tree", newSub, "-p", desired, "-m", "render "+id)
	git(fmt.Sprintf("update %s %s\nupdate %s %s\nupdate %s %s\n", main, newMain, rendered, newRendered, desired, tip), "update-ref", "--stdin")
	return plumbing.NewHash(tip)
}

// replicaGit runs git in dir and returns its output.
func replicaGit(tb testing.TB, dir string, stdin io.Reader, args ...string) string {
	tb.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Stdin = stdin
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@nuon.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@nuon.invalid")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		tb.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, stderr)
	}
	return string(out)
}

// replicaRusage is the user and system CPU of this process and its
// waited-for children.
func replicaRusage() time.Duration {
	var self, children syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + children.Utime.Nano() + children.Stime.Nano())
}

// replicaLoad is the load average, as /proc/loadavg says it.
func replicaLoad() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// millionRepo is the rendered repository of NUON_BENCH_MILLION installs
// that cmd/nuon's BenchmarkMillion caches
// (~/.cache/nuon/bench/million-v2-<N>/rendered.git), and N; it skips b
// unless both are there. Benchmarks serve a gittest.LinkCopy of it: the
// cache is never changed.
func millionRepo(b *testing.B) (string, string) {
	n := os.Getenv("NUON_BENCH_MILLION")
	if n == "" || n == "0" {
		b.Skip("NUON_BENCH_MILLION not set")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		b.Fatal(err)
	}
	cached := filepath.Join(home, ".cache", "nuon", "bench", "million-v2-"+n, "rendered.git")
	if _, err := os.Stat(cached); err != nil {
		b.Skipf("no cached repository: %v (cmd/nuon BenchmarkMillion builds it)", err)
	}
	return cached, n
}

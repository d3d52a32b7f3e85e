package server_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitproto"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// benchInstall names the i-th install of a benchmark fleet.
func benchInstall(i int) string { return fmt.Sprintf("i%06d", i) }

// fleetRepo makes a bare repository with n installs: main's installs/ has
// one file per install (all with key's agentKey: the server's work per
// request is the same as with n keys), and every install has a desired
// ref, written straight into packed-refs so that 100,000 take a second.
// With status, every install has a status ref too.
func fleetRepo(tb testing.TB, n int, key *signature.Signer, status bool) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "fleet.git")
	gittest.InitBare(tb, dir)
	blob := gittest.Git(tb, dir, "hash-object", "-w", "--stdin", "--path=x.yaml")
	_ = blob
	yaml := "channel: stable\ncloud: {provider: local}\nsandbox: {name: local}\nregistry: 127.0.0.1:5000/x\nagentKey: " + key.AuthorizedKey() + "\n"
	out, err := gittest.Run(dir, []byte(yaml), "hash-object", "-w", "--stdin")
	if err != nil {
		tb.Fatal(err)
	}
	var lines strings.Builder
	for i := range n {
		fmt.Fprintf(&lines, "100644 blob %s\t%s.yaml\n", out, benchInstall(i))
	}
	installs, err := gittest.Run(dir, []byte(lines.String()), "mktree")
	if err != nil {
		tb.Fatal(err)
	}
	root, err := gittest.Run(dir, []byte("040000 tree "+installs+"\tinstalls\n"), "mktree")
	if err != nil {
		tb.Fatal(err)
	}
	main := gittest.Git(tb, dir, "commit-tree", root, "-m", "fleet")
	desired := gittest.Git(tb, dir, "commit-tree", gittest.Git(tb, dir, "mktree"), "-m", "desired")
	var refs []string
	for i := range n {
		refs = append(refs, desired+" "+schemas.InstallRef(benchInstall(i)))
		if status {
			refs = append(refs, desired+" "+schemas.StatusRef(benchInstall(i)))
		}
	}
	refs = append(refs, main+" "+schemas.MainRef)
	slices.SortFunc(refs, func(a, b string) int { return strings.Compare(a[41:], b[41:]) })
	if err := os.WriteFile(filepath.Join(dir, "packed-refs"), []byte("# pack-refs with: peeled fully-peeled sorted \n"+strings.Join(refs, "\n")+"\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// countingListener counts the bytes read and written on its connections.
type countingListener struct {
	net.Listener
	in, out atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, l: l}, nil
}

type countingConn struct {
	net.Conn
	l *countingListener
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.in.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.l.out.Add(int64(n))
	return n, err
}

// cpuTime is the CPU time used so far by this process and by its waited-for
// children (git, the hook), so a figure can be given per operation whatever
// else the machine is running.
func cpuTime() time.Duration {
	var self, children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	d := func(tv syscall.Timeval) time.Duration { return time.Duration(tv.Nano()) }
	return d(self.Utime) + d(self.Stime) + d(children.Utime) + d(children.Stime)
}

// serve starts the server for dir on a counting loopback listener.
func serve(tb testing.TB, dir string) (*server.Server, string, *countingListener) {
	tb.Helper()
	srv, err := server.New(context.Background(), server.Config{Dir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	hs := &http.Server{Handler: srv}
	go hs.Serve(cl)
	tb.Cleanup(func() { hs.Close(); srv.Close() })
	return srv, "http://" + ln.Addr().String() + "/tenant.git", cl
}

// BenchmarkIdlePolls measures idle polls (protocol v2 ls-refs of an
// install's two refs by the agent's own client) one server answers, with
// 1,000 and 100,000 installs in the repository: polls per second with 16
// concurrent pollers, and wire bytes per poll both ways (request with its
// signature headers, and response). Every poll is signed anew, as agents
// do (the server refuses a signature it has seen), so the pollers' signing
// shares the cores with the server.
func BenchmarkIdlePolls(b *testing.B) {
	key, _ := loadKey(b, "acme")
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("installs=%d", n), func(b *testing.B) {
			dir := fleetRepo(b, n, key, true)
			_, url, cl := serve(b, dir)
			const pollers, clientsPerPoller, pollsPerIter = 16, 64, 20000
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: pollers}}
			clients := make([][]*gitproto.Client, pollers)
			for p := range pollers {
				for c := range clientsPerPoller {
					id := benchInstall((p*clientsPerPoller + c) * (n / (pollers * clientsPerPoller)))
					clients[p] = append(clients[p], &gitproto.Client{URL: url, HTTP: hc, Auth: (&request.Signer{Install: id, Key: key}).SetAuth})
				}
			}
			ctx := context.Background()
			poll := func(c *gitproto.Client, id string) error {
				refs, err := c.LsRefs(ctx, schemas.InstallRef(id), schemas.StatusRef(id))
				if err == nil && len(refs) != 2 {
					err = fmt.Errorf("%d refs", len(refs))
				}
				return err
			}
			// One poll to warm the connection and the key cache.
			if err := poll(clients[0][0], benchInstall(0)); err != nil {
				b.Fatal(err)
			}
			cl.in.Store(0)
			cl.out.Store(0)
			var polls atomic.Int64
			start, cpu0 := time.Now(), cpuTime()
			for b.Loop() {
				var wg sync.WaitGroup
				var failed atomic.Pointer[error]
				for p := range pollers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range pollsPerIter / pollers {
							c := i % clientsPerPoller
							id := benchInstall((p*clientsPerPoller + c) * (n / (pollers * clientsPerPoller)))
							if err := poll(clients[p][c], id); err != nil {
								failed.Store(&err)
								return
							}
							polls.Add(1)
						}
					}()
				}
				wg.Wait()
				if err := failed.Load(); err != nil {
					b.Fatal(*err)
				}
			}
			el, cpu := time.Since(start), cpuTime()-cpu0
			np := float64(polls.Load())
			b.ReportMetric(np/el.Seconds(), "polls/s")
			b.ReportMetric(float64(cpu.Microseconds())/np, "cpu-µs/poll")
			b.ReportMetric(float64(cl.in.Load())/np, "req-B/poll")
			b.ReportMetric(float64(cl.out.Load())/np, "resp-B/poll")
		})
	}
}

// statusAgent is one simulated install agent pushing signed status
// commits with the agent's own remote (go-git push over HTTP, signed
// requests), as nuon agent does.
type statusAgent struct {
	id     string
	key    *signature.Signer
	st     *memory.Storage
	remote agent.Remote
	head   plumbing.Hash
	n      int
}

func newStatusAgent(id, url string, key *signature.Signer, head plumbing.Hash) *statusAgent {
	return &statusAgent{id: id, key: key, st: memory.NewStorage(), head: head,
		remote: agent.NewRemote(url, agent.WithRequestSigner(&request.Signer{Install: id, Key: key}))}
}

// commit writes the next status commit on top of head.
func (a *statusAgent) commit() (plumbing.Hash, error) {
	a.n++
	bt := gitobj.NewBatch()
	blob := bt.Add(plumbing.BlobObject, fmt.Appendf(nil, `{"install":%q,"n":%d}`+"\n", a.id, a.n))
	tree := bt.Tree([]gitobj.Entry{{Name: schemas.StatusFile, Hash: blob, Mode: 0o100644}})
	var parents []plumbing.Hash
	if !a.head.IsZero() {
		parents = []plumbing.Hash{a.head}
	}
	who := object.Signature{Name: "nuon agent " + a.id, Email: a.id + "@nuon.invalid", When: time.Now()}
	h, err := bt.Commit(gitobj.Commit{Tree: tree, Parents: parents, Author: who,
		Message: fmt.Sprintf("status %d\n\n%s: %s\n", a.n, schemas.TrailerInstall, a.id)}, a.key)
	if err != nil {
		return h, err
	}
	return h, bt.Flush(a.st)
}

// push commits and pushes one status change.
func (a *statusAgent) push(ctx context.Context) error {
	h, err := a.commit()
	if err != nil {
		return err
	}
	ref := plumbing.ReferenceName(schemas.StatusRef(a.id))
	if err := a.st.SetReference(plumbing.NewHashReference(ref, h)); err != nil {
		return err
	}
	if err := a.remote.Push(ctx, a.st, ref, a.head, h); err != nil {
		return err
	}
	a.head = h
	return nil
}

// benchDuration is how long the write-back benchmark pushes:
// NUON_BENCH_PUSH_SECONDS, default 10.
func benchDuration() time.Duration {
	if s := os.Getenv("NUON_BENCH_PUSH_SECONDS"); s != "" {
		var n int
		fmt.Sscan(s, &n)
		if n > 0 {
			return time.Duration(n) * time.Second
		}
	}
	return 10 * time.Second
}

// BenchmarkStatusWriteBack has 1,000 simulated agents, each pushing signed
// status changes one after another for a bounded time
// (NUON_BENCH_PUSH_SECONDS), against one server whose repository holds
// 1,000 or 100,000 installs: accepted updates per second, p99 latency of a
// push, CPU per update (server and agents, which run in this process),
// and at the end every install's status ref is its last acknowledged
// commit (lost = 0) and every commit on it verifies with the install's
// key and names it. A push under way when the time is up is let finish,
// so that its answer is known.
func BenchmarkStatusWriteBack(b *testing.B) {
	key, _ := loadKey(b, "acme")
	const agents = 1000
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("installs=%d", n), func(b *testing.B) {
			dir := fleetRepo(b, n, key, false)
			_, url, _ := serve(b, dir)
			for b.Loop() {
				as := make([]*statusAgent, agents)
				for i := range as {
					as[i] = newStatusAgent(benchInstall(i*(n/agents)), url, key, plumbing.ZeroHash)
				}
				var mu sync.Mutex
				var lat []time.Duration
				var errs atomic.Int64
				var firstErr atomic.Pointer[error]
				ctx := context.Background()
				start, cpu0 := time.Now(), cpuTime()
				deadline := start.Add(benchDuration())
				var wg sync.WaitGroup
				for _, a := range as {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for time.Now().Before(deadline) {
							t0 := time.Now()
							if err := a.push(ctx); err != nil {
								errs.Add(1)
								firstErr.CompareAndSwap(nil, &err)
								continue
							}
							d := time.Since(t0)
							mu.Lock()
							lat = append(lat, d)
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				el, cpu := time.Since(start), cpuTime()-cpu0
				lost, verified := checkStatusRefs(b, dir, key, as)
				slices.Sort(lat)
				if len(lat) == 0 {
					b.Fatalf("no push succeeded: %v", *firstErr.Load())
				}
				if p := firstErr.Load(); p != nil {
					b.Logf("first error: %v", *p)
				}
				b.ReportMetric(float64(len(lat))/el.Seconds(), "updates/s")
				b.ReportMetric(float64(cpu.Microseconds())/1000/float64(len(lat)), "cpu-ms/update")
				b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99-ms")
				b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
				b.ReportMetric(float64(errs.Load()), "errors")
				b.ReportMetric(float64(lost), "lost")
				b.ReportMetric(float64(verified), "verified")
				if lost > 0 || verified != len(lat) {
					b.Errorf("%d lost, %d of %d pushed commits verified", lost, verified, len(lat))
				}
			}
		})
	}
}

// checkStatusRefs reads the repository once the pushes are over: each
// agent's status ref must be its last acknowledged commit (else it is
// lost), and every commit on it must verify with key and name the agent's
// install. It returns the lost refs and the commits verified.
func checkStatusRefs(tb testing.TB, dir string, key *signature.Signer, as []*statusAgent) (lost, verified int) {
	tb.Helper()
	st := filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault())
	trust := &signature.AllowedSigners{Signers: []signature.AllowedSigner{{Principals: []string{"x"}, Key: key.PublicKey()}}}
	for _, a := range as {
		if a.head.IsZero() {
			continue
		}
		ref, err := st.Reference(plumbing.ReferenceName(schemas.StatusRef(a.id)))
		if err != nil || ref.Hash() != a.head {
			lost++
			continue
		}
		for h := a.head; !h.IsZero(); {
			c, err := object.GetCommit(st, h)
			if err != nil {
				tb.Fatalf("%s: %v", h, err)
			}
			if _, err := trust.VerifyCommit(c); err != nil {
				tb.Fatalf("%s: %v", h, err)
			}
			if v, _ := schemas.Trailer(c.Message, schemas.TrailerInstall); v != a.id {
				tb.Fatalf("%s names %q, pushed by %s", h, v, a.id)
			}
			verified++
			h = plumbing.ZeroHash
			if len(c.ParentHashes) == 1 {
				h = c.ParentHashes[0]
			}
		}
	}
	return lost, verified
}

// BenchmarkStatusPushBytes is the wire bytes of one status push (both
// ways, the receive-pack advertisement included) at 1,000 and 100,000
// installs, and its CPU, the agent's client included.
func BenchmarkStatusPushBytes(b *testing.B) {
	key, _ := loadKey(b, "acme")
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("installs=%d", n), func(b *testing.B) {
			dir := fleetRepo(b, n, key, false)
			_, url, cl := serve(b, dir)
			a := newStatusAgent(benchInstall(n/2), url, key, plumbing.ZeroHash)
			ctx := context.Background()
			if err := a.push(ctx); err != nil {
				b.Fatal(err)
			}
			cl.in.Store(0)
			cl.out.Store(0)
			pushes := 0
			cpu0 := cpuTime()
			for b.Loop() {
				if err := a.push(ctx); err != nil {
					b.Fatal(err)
				}
				pushes++
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(pushes), "cpu-ms/push")
			b.ReportMetric(float64(cl.in.Load())/float64(pushes), "req-B/push")
			b.ReportMetric(float64(cl.out.Load())/float64(pushes), "resp-B/push")
		})
	}
}

// BenchmarkRenderOnChange is the time from a new main landing in the
// upstream repository (acme's domain changed) until acme's desired ref
// moved, as its agent sees with a poll: webhook, fetch from upstream,
// render with the render key, ref table update. The tenant is the sample
// one, with as many more installs (copies of acme's file) as
// NUON_BENCH_RENDER_FLEET says (default none; e.g. 100000), rendered cold
// before the timer starts. cpu-ms/op is this process's CPU (the server's,
// and acme's polls) per change, git's fetch not included.
func BenchmarkRenderOnChange(b *testing.B) {
	extra := 0
	if s := os.Getenv("NUON_BENCH_RENDER_FLEET"); s != "" {
		var err error
		if extra, err = strconv.Atoi(s); err != nil || extra < 0 {
			b.Fatalf("NUON_BENCH_RENDER_FLEET: %q is not a number of installs", s)
		}
	}
	render, _ := loadKey(b, "render")
	acmeKey, _ := loadKey(b, "acme")
	root := b.TempDir()
	upstream := filepath.Join(root, "upstream.git")
	gittest.InitBare(b, upstream)
	files := gittest.Files(b, fixtureTenant)
	acmeFile := "installs/acme.yaml"
	orig := string(files[acmeFile])
	for i := range extra {
		files[fmt.Sprintf("installs/f%06d.yaml", i)] = []byte(strings.Replace(orig, "acme.shop.example", fmt.Sprintf("f%06d.shop.example", i), 1))
	}
	when := time.Now()
	head := gittest.FastImport(b, upstream, "refs/heads/main", "", when, files)
	files = nil
	dir := filepath.Join(root, "served.git")
	gittest.InitBare(b, dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := server.New(ctx, server.Config{Dir: dir, RenderKey: render, Upstream: upstream, PollInterval: time.Hour,
		HookOpen: true, HookInterval: time.Nanosecond}) // every hook checks: the render is what is measured
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Sync(ctx); err != nil {
		b.Fatal(err)
	}
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
	client := &gitproto.Client{URL: base + "/tenant.git", Auth: (&request.Signer{Install: "acme", Key: acmeKey}).SetAuth}
	acmeRef := schemas.InstallRef("acme")
	tip := func() plumbing.Hash {
		refs, err := client.LsRefs(ctx, acmeRef)
		if err != nil {
			b.Fatal(err)
		}
		return refs[plumbing.ReferenceName(acmeRef)]
	}
	// The cold render's refs go upstream first (the mirror): not timed.
	for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if _, err := gittest.Run(upstream, nil, "rev-parse", "--verify", "--quiet", acmeRef); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the cold render was not mirrored upstream")
		}
	}
	n := 0
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		n++
		before := tip()
		edited := strings.Replace(orig, "acme.shop.example", fmt.Sprintf("acme%d.shop.example", n), 1)
		head = gittest.FastImport(b, upstream, "refs/heads/main", head, when.Add(time.Duration(n)*time.Second), map[string][]byte{acmeFile: []byte(edited)})
		cpu0 := cpuTime()
		b.StartTimer()
		resp, err := http.Post(base+"/hooks/main", "", nil)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		deadline := time.Now().Add(time.Minute)
		for tip() == before {
			if time.Now().After(deadline) {
				b.Fatal("acme's ref did not move")
			}
			time.Sleep(2 * time.Millisecond)
		}
		b.StopTimer()
		cpu += cpuTime() - cpu0
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(n), "cpu-ms/op")
	b.ReportMetric(float64(3+extra), "installs")
}

// BenchmarkFetch is one install's fetch of its desired commit (the agent's
// own client, protocol v2) at 1,000 and 100,000 installs: wire bytes and
// git CPU per fetch.
func BenchmarkFetch(b *testing.B) {
	key, _ := loadKey(b, "acme")
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("installs=%d", n), func(b *testing.B) {
			dir := fleetRepo(b, n, key, false)
			_, url, cl := serve(b, dir)
			id := benchInstall(n / 2)
			c := &gitproto.Client{URL: url, Auth: (&request.Signer{Install: id, Key: key}).SetAuth}
			ctx := context.Background()
			refs, err := c.LsRefs(ctx, schemas.InstallRef(id))
			if err != nil || len(refs) != 1 {
				b.Fatalf("ls-refs: %v %v", refs, err)
			}
			want := refs[plumbing.ReferenceName(schemas.InstallRef(id))]
			cl.in.Store(0)
			cl.out.Store(0)
			fetches := 0
			cpu0 := cpuTime()
			for b.Loop() {
				if _, err := c.Fetch(ctx, memory.NewStorage(), []plumbing.Hash{want}, nil); err != nil {
					b.Fatal(err)
				}
				fetches++
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(fetches), "cpu-ms/fetch")
			b.ReportMetric(float64(cl.in.Load()+cl.out.Load())/float64(fetches), "B/fetch")
		})
	}
}

// discardResponse is a ResponseWriter that keeps the status and counts
// the body, so a handler benchmark measures the handler and nothing else.
type discardResponse struct {
	h      http.Header
	status int
	n      int
}

func (d *discardResponse) Header() http.Header { return d.h }
func (d *discardResponse) WriteHeader(code int) {
	if d.status == 0 {
		d.status = code
	}
}
func (d *discardResponse) Write(p []byte) (int, error) {
	if d.status == 0 {
		d.status = http.StatusOK
	}
	d.n += len(p)
	return len(p), nil
}

// BenchmarkPollHandler is the server's own CPU for one idle poll (ls-refs
// of an install's two refs, as the agent sends it), without the network
// and the HTTP connection: the signed request is verified (signature,
// replay cache, body digest), the install's key looked up, the body parsed
// and the answer written from the ref table. 1,024 installs take turns.
// The agent signs each poll anew, and a signature is good once, so each
// round of 1,024 polls is signed ahead, outside the timer and the CPU
// count (signing is the client's cost). It reports the CPU, allocations
// and bytes allocated per poll.
func BenchmarkPollHandler(b *testing.B) {
	key, _ := loadKey(b, "acme")
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("installs=%d", n), func(b *testing.B) {
			dir := fleetRepo(b, n, key, true)
			srv, err := server.New(context.Background(), server.Config{Dir: dir})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			const clients = 1024
			const url = "http://server/tenant.git/git-upload-pack"
			bodies := make([][]byte, clients)
			for i := range bodies {
				id := benchInstall(i * (n / clients))
				bodies[i] = lsRefsBody(schemas.InstallRef(id), schemas.StatusRef(id))
			}
			polls := make([]*http.Request, clients)
			sign := func() {
				for i := range polls {
					req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(bodies[i]))
					req.Header.Set("Git-Protocol", "version=2")
					req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
					if err := (&request.Signer{Install: benchInstall(i * (n / clients)), Key: key}).Sign(req); err != nil {
						b.Fatal(err)
					}
					polls[i] = req
				}
			}
			serve := func(req *http.Request) *discardResponse {
				w := &discardResponse{h: http.Header{}}
				srv.ServeHTTP(w, req)
				return w
			}
			sign()
			for _, p := range polls { // load every key before the timer
				if w := serve(p); w.status != http.StatusOK || w.n != 2*(4+41+len(schemas.InstallRef("i000000")))+4 {
					b.Fatalf("poll answered %d with %d bytes", w.status, w.n)
				}
			}
			// Each iteration polls every client once, so that -benchtime=1x
			// (make bench) still measures a thousand polls.
			n := 0
			var cpu time.Duration
			var mallocs, bytes uint64
			var self0, self1 syscall.Rusage
			var mem0, mem1 runtime.MemStats
			for b.Loop() {
				b.StopTimer()
				sign()
				runtime.ReadMemStats(&mem0)
				_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self0)
				b.StartTimer()
				for _, p := range polls {
					serve(p)
				}
				b.StopTimer()
				_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self1)
				runtime.ReadMemStats(&mem1)
				cpu += time.Duration(self1.Utime.Nano() + self1.Stime.Nano() - self0.Utime.Nano() - self0.Stime.Nano())
				mallocs += mem1.Mallocs - mem0.Mallocs
				bytes += mem1.TotalAlloc - mem0.TotalAlloc
				n += len(polls)
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(n), "cpu-µs/poll")
			b.ReportMetric(float64(mallocs)/float64(n), "allocs/poll")
			b.ReportMetric(float64(bytes)/float64(n), "B/poll")
		})
	}
}

// lsRefsBody is a protocol v2 ls-refs request as the agent's client
// (internal/gitproto) sends it once it knows the capabilities.
func lsRefsBody(prefixes ...string) []byte {
	line := func(b []byte, s string) []byte { return fmt.Appendf(b, "%04x%s", len(s)+4, s) }
	b := line(nil, "command=ls-refs\n")
	b = line(b, "agent=git/nuon\n")
	b = line(b, "object-format=sha1\n")
	b = append(b, "0001"...)
	for _, p := range prefixes {
		b = line(b, "ref-prefix "+p+"\n")
	}
	return append(b, "0000"...)
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
)

// BenchmarkServerHostile measures the nuon server binary, with its default
// limits, under the attacks while agents poll: for each attack,
// the server's resident memory (current, and peak over the phase) and the
// polls' rate and p50/p99 latency, from NUON_BENCH_POLL_WORKERS workers
// (default 32) polling 1,000 installs for NUON_BENCH_HOSTILE_SECONDS
// (default 10) each, each against a server of its own.
// NUON_BENCH_HOSTILE_ATTACKS picks some (e.g. idle,half-sent); the attacks,
// one install's key (A) at most:
//
//   - none: the polls alone, for comparison;
//   - idle: NUON_BENCH_HOSTILE_CONNS (default 10,000) keep-alive
//     connections, each after one request, left idle;
//   - half-sent: as many POSTs that announce a body and never send it,
//     half signed by A, half not signed;
//   - command-list: three senders, each sending A's signed push of a
//     249 MiB command list (4,001 pkt-lines with 64 KiB ref names), then
//     reading the answer, then waiting 100 ms, all through the phase.
//
// The connections stay open from the benchmark's side until the phase
// ends; what the server closed (refused, shed at its cap) is counted. The
// benchmark process holds one descriptor per connection: the open-files
// limit (ulimit -n) must exceed NUON_BENCH_HOSTILE_CONNS.
func BenchmarkServerHostile(b *testing.B) {
	conns := envInt(b, "NUON_BENCH_HOSTILE_CONNS", 10000)
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < uint64(conns+512) {
		b.Fatalf("open-files limit %d: NUON_BENCH_HOSTILE_CONNS=%d needs %d (ulimit -n)", rl.Cur, conns, conns+512)
	}
	opts := pollLoad{
		duration:  time.Duration(envInt(b, "NUON_BENCH_HOSTILE_SECONDS", 10)) * time.Second,
		workers:   envInt(b, "NUON_BENCH_POLL_WORKERS", 32),
		perWorker: 32,
	}
	key, err := signature.LoadSigner(filepath.Join(repoRoot(), "fixtures", "keys", "acme"))
	if err != nil {
		b.Fatal(err)
	}
	bin := os.Getenv("NUON_BENCH_NUON")
	if bin == "" {
		bin = nuonBinary(b)
	}
	const installs = 1000
	dir := pollFleet(b, installs+1, key)
	attacker := pollInstall(installs) // A, whom the pollers leave alone
	var url, addr string
	only := map[string]bool{}
	for _, a := range strings.Split(os.Getenv("NUON_BENCH_HOSTILE_ATTACKS"), ",") {
		if a = strings.TrimSpace(a); a != "" {
			only[a] = true
		}
	}
	for _, phase := range []struct {
		name   string
		attack func(ctx context.Context) (held func() int, stop func())
	}{
		{"none", func(context.Context) (func() int, func()) { return func() int { return 0 }, func() {} }},
		{"idle", func(context.Context) (func() int, func()) {
			return hostileConns(b, conns, func(c net.Conn) {
				fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
				if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
					resp.Body.Close()
				}
			}, addr)
		}},
		{"half-sent", func(context.Context) (func() int, func()) {
			var n atomic.Int64
			return hostileConns(b, conns, func(c net.Conn) {
				fmt.Fprintf(c, "POST /tenant.git/git-receive-pack HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-git-receive-pack-request\r\nContent-Length: 1000\r\n", addr)
				if n.Add(1)%2 == 0 {
					io.WriteString(c, signedHeaders(b, url+"/git-receive-pack", attacker, key))
				}
				io.WriteString(c, "\r\n")
			}, addr)
		}},
		{"command-list", func(ctx context.Context) (func() int, func()) {
			var sent atomic.Int64
			var wg sync.WaitGroup
			ctx, cancel := context.WithCancel(ctx)
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						sendCommandList(addr, signedHeaders(b, url+"/git-receive-pack", attacker, key))
						sent.Add(1)
						select {
						case <-ctx.Done():
						case <-time.After(100 * time.Millisecond):
						}
					}
				}()
			}
			return func() int { return int(sent.Load()) }, func() { cancel(); wg.Wait() }
		}},
	} {
		if len(only) > 0 && !only[phase.name] {
			continue
		}
		b.Run("attack="+phase.name, func(b *testing.B) {
			// A server of its own: each phase's memory is its own.
			base, pid := startPollServer(b, bin, dir)
			url, addr = base+"/tenant.git", strings.TrimPrefix(base, "http://")
			for b.Loop() {
				clearPeakRSS(b, pid)
				held, stop := phase.attack(context.Background())
				rssAttacked := procStatus(b, pid, "VmRSS")
				r := opts.run(b, url, pid, installs, key)
				b.ReportMetric(float64(rssAttacked)/1024, "server-RSS-MB")
				b.ReportMetric(float64(procStatus(b, pid, "VmHWM"))/1024, "server-peak-MB")
				b.ReportMetric(r.polls/r.elapsed.Seconds(), "polls/s")
				b.ReportMetric(float64(r.p50.Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(r.p99.Microseconds())/1000, "p99-ms")
				b.Logf("attack %s: %d held open by the server or sent at the end; load average %s before, %s after",
					phase.name, held(), r.loadBefore, r.loadAfter)
				stop()
			}
		})
	}
}

// hostileConns opens count connections to addr, at most 256 at a time,
// and runs open on each. held counts those the server has not closed.
func hostileConns(tb testing.TB, count int, open func(net.Conn), addr string) (held func() int, stop func()) {
	tb.Helper()
	conns := make([]net.Conn, count)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256)
	for i := range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := net.DialTimeout("tcp", addr, time.Minute)
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(30 * time.Second))
			open(c)
			c.SetDeadline(time.Time{})
			conns[i] = c
		}()
	}
	wg.Wait()
	held = func() int {
		n := 0
		for _, c := range conns {
			if c == nil {
				continue
			}
			// A connection the server closed reads EOF at once.
			c.SetReadDeadline(time.Now().Add(time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); err != nil && os.IsTimeout(err) {
				n++
			}
		}
		return n
	}
	return held, func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}
}

// signedHeaders are the signature headers of install's POST to url, as an
// attacker holding its key makes them: fresh each time (a replay is
// refused before anything is read), declaring the digest of an empty body,
// which the server can check only at the end of the body it is sent.
func signedHeaders(tb testing.TB, url, install string, key *signature.Signer) string {
	req, _ := http.NewRequest(http.MethodPost, url, nil)
	if err := (&request.Signer{Install: install, Key: key}).Sign(req); err != nil {
		tb.Fatal(err)
	}
	var b strings.Builder
	for k, v := range req.Header {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v[0])
	}
	return b.String()
}

// sendCommandList sends one push of the 249 MiB command list and
// reads the answer; the server may close before it is all sent.
func sendCommandList(addr, signed string) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer c.Close()
	payload := strings.Repeat("0", 40) + " " + strings.Repeat("1", 40) + " refs/heads/" + strings.Repeat("x", 65520-98) + "\n"
	line := fmt.Sprintf("%04x%s", len(payload)+4, payload)
	const lines = 4001
	fmt.Fprintf(c, "POST /tenant.git/git-receive-pack HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-git-receive-pack-request\r\n%sContent-Length: %d\r\n\r\n",
		addr, signed, lines*len(line)+4)
	go func() {
		w := bufio.NewWriterSize(c, 1<<20)
		for range lines {
			if _, err := w.WriteString(line); err != nil {
				return
			}
		}
		w.WriteString("0000")
		w.Flush()
	}()
	c.SetReadDeadline(time.Now().Add(time.Minute))
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// clearPeakRSS resets the server's VmHWM to its current RSS, so each
// phase reports its own peak.
func clearPeakRSS(tb testing.TB, pid int) {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		tb.Logf("reset the peak RSS: %v", err)
	}
}

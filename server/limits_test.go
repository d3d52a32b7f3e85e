package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gitproto"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// commandList generates a push command list of n pkt-lines, each naming a
// ref of nameLen bytes, then a flush: the 249 MiB list is 4,001
// lines of 65,520 bytes. It is generated as it is read, so the test holds
// none of it.
type commandList struct {
	line []byte // one pkt-line
	left int    // lines still to send
	off  int    // into line
	done bool   // flush sent
}

func newCommandList(n, nameLen int) *commandList {
	payload := strings.Repeat("0", 40) + " " + strings.Repeat("1", 40) + " refs/heads/" + strings.Repeat("x", nameLen) + "\n"
	return &commandList{line: []byte(fmt.Sprintf("%04x%s", len(payload)+4, payload)), left: n}
}

func (c *commandList) size() int64 { return int64(len(c.line))*int64(c.left) + 4 }

func (c *commandList) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && c.left > 0 {
		k := copy(p[n:], c.line[c.off:])
		n += k
		if c.off += k; c.off == len(c.line) {
			c.off = 0
			c.left--
		}
	}
	if c.left == 0 && n < len(p) && !c.done {
		if len(p)-n < 4 {
			return n, nil
		}
		n += copy(p[n:], "0000")
		c.done = true
	}
	if n == 0 && c.done {
		return 0, io.EOF
	}
	return n, nil
}

// rawRequest sends req on a connection of its own, its body written in
// the background (the server may answer and close before it is all
// sent), and reads the answer.
func rawRequest(t *testing.T, addr string, req *http.Request) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go req.Write(conn) // a write error is the server closing: the answer says why
	conn.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp, string(b)
}

// signedRequest is a request signed by install, as an attacker holding
// its key makes one: the signature is fresh (a replay is refused before
// anything is read) and declares the digest of an empty body, which the
// server can check only at the end of the body it is sent, body: the
// bounds must hold before then.
func signedRequest(t testing.TB, method, url string, body io.Reader, size int64, install string, key *signature.Signer) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-git-receive-pack-request")
	if err := (&request.Signer{Install: install, Key: key}).Sign(req); err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Body, req.GetBody, req.ContentLength = io.NopCloser(body), nil, size
	}
	return req
}

// TestPushCommandListBounded: the attack 4, a signed push whose
// command list is 249 MiB, is refused after its first bytes, with the
// server's memory bounded and nothing of the list echoed or logged; so
// are lists of too many commands or too long a ref name.
func TestPushCommandListBounded(t *testing.T) {
	e := newEnv(t)
	addr := strings.TrimPrefix(e.http.URL, "http://")
	for _, tc := range []struct {
		name          string
		lines, length int
	}{
		{"249 MiB", 4001, 65520 - 98},
		{"17 commands", 17, 10},
		{"a long ref name", 1, 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newCommandList(tc.lines, tc.length)
			size := cl.size()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			req := signedRequest(t, http.MethodPost, e.http.URL+"/tenant.git/git-receive-pack", cl, size, "acme", e.keys["acme"])
			resp, body := rawRequest(t, addr, req)
			runtime.ReadMemStats(&after)
			t.Logf("%d bytes sent of %d: %s %q", size-cl.size(), size, resp.Status, body)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "command list too large") {
				t.Errorf("answered %s %q, want 400 and the reason", resp.Status, body)
			}
			if strings.Contains(body, "xxxxxxxxxx") || strings.Contains(e.log.String(), "xxxxxxxxxx") {
				t.Error("the command list is echoed or logged")
			}
			// Everything allocated in the process meanwhile, the test's
			// own request included.
			grown := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d KiB allocated in the process", grown>>10)
			if grown > 64<<20 {
				t.Errorf("%d MiB allocated for a %d MiB command list", grown>>20, size>>20)
			}
		})
	}
	if n := scrape(t, e.http.URL+"/metrics")[`nuon_server_refusals_total{reason="push_too_large"}`]; n != 3 {
		t.Errorf("%v refusals counted, want 3", n)
	}
	if got := e.serverRef(schemas.StatusRef("acme")); got != "" {
		t.Errorf("status ref moved to %s", got)
	}
}

// halfSent opens a connection and sends req's headers, announcing a body
// it never sends.
func halfSent(t testing.TB, addr string, req *http.Request) net.Conn {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err)
		return nil
	}
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000\r\n", req.Method, req.URL.RequestURI(), addr)
	for k, v := range req.Header {
		fmt.Fprintf(conn, "%s: %s\r\n", k, v[0])
	}
	io.WriteString(conn, "\r\n")
	return conn
}

// poll is one signed ls-refs of install's own refs, on a connection of its
// own.
func poll(ctx context.Context, base, install string, key *signature.Signer) error {
	c := &gitproto.Client{URL: base + "/tenant.git", HTTP: &http.Client{Transport: &http.Transport{}, Timeout: time.Minute},
		Auth: (&request.Signer{Install: install, Key: key}).SetAuth}
	_, err := c.LsRefs(ctx, schemas.InstallRef(install))
	return err
}

// TestInstallRequestsCap: one install's requests in flight beyond
// InstallRequests are answered 429 before they hold anything, counted and
// logged; another install is served meanwhile, and the install itself
// once its requests end.
func TestInstallRequestsCap(t *testing.T) {
	e := newEnv(t)
	addr := strings.TrimPrefix(e.http.URL, "http://")
	push := e.http.URL + "/tenant.git/git-receive-pack"
	var held []net.Conn
	for range server.DefaultInstallRequests {
		held = append(held, halfSent(t, addr, signedRequest(t, http.MethodPost, push, nil, 0, "acme", e.keys["acme"])))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, _ := rawRequest(t, addr, signedRequest(t, http.MethodPost, push, strings.NewReader("0000"), 4, "acme", e.keys["acme"]))
		if resp.StatusCode == http.StatusTooManyRequests {
			if resp.Header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acme's request over its turns answered %s", resp.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx := context.Background()
	if err := poll(ctx, e.http.URL, "globex", e.keys["globex"]); err != nil {
		t.Fatalf("globex, while acme holds its turns: %v", err)
	}
	if n := scrape(t, e.http.URL+"/metrics")[`nuon_server_refusals_total{reason="install_busy"}`]; n < 1 {
		t.Errorf("%v refusals counted", n)
	}
	if !strings.Contains(e.log.String(), "requests of the install in flight") {
		t.Errorf("refusal not logged:\n%s", e.log.String())
	}
	for _, c := range held {
		c.Close()
	}
	for {
		err := poll(ctx, e.http.URL, "acme", e.keys["acme"])
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acme after its requests ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// limitedServer serves e's repository with limits through HTTPServer, as
// nuon server does, on loopback.
func limitedServer(t *testing.T, e *env, lim server.Limits) (base string, srv *server.Server) {
	t.Helper()
	srv, err := server.New(context.Background(), server.Config{Dir: e.dir, Limits: lim, Logger: slog.New(slog.NewTextHandler(e.log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs, l := srv.HTTPServer(ln)
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	return "http://" + ln.Addr().String(), srv
}

// TestHostileConnections: the attack 5. With a cap of 32
// connections, 300 idle keep-alive connections and 300 POSTs that never
// send the body they announce (half signed by one install, half not
// signed) do not keep a legitimate poll from being answered.
func TestHostileConnections(t *testing.T) {
	e := newEnv(t)
	base, _ := limitedServer(t, e, server.Limits{MaxConns: 32})
	addr := strings.TrimPrefix(base, "http://")
	var mu sync.Mutex
	var conns []net.Conn
	keep := func(c net.Conn) {
		if c != nil {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Add(2)
		go func() { // idle keep-alive: one request, then nothing
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			keep(c)
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
			c.SetReadDeadline(time.Now().Add(time.Minute))
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				resp.Body.Close() // or shed already: it reconnects no more
			}
		}()
		go func() { // a POST whose body never comes
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, base+"/tenant.git/git-receive-pack", nil)
			if i%2 == 0 {
				req = signedRequest(t, http.MethodPost, base+"/tenant.git/git-receive-pack", nil, 0, "acme", e.keys["acme"])
			}
			keep(halfSent(t, addr, req))
		}()
	}
	wg.Wait()
	if err := poll(context.Background(), base, "globex", e.keys["globex"]); err != nil {
		t.Fatalf("a poll among hostile connections: %v", err)
	}
	m := scrape(t, base+"/metrics")
	t.Logf("open %v, shed idle %v, new %v; refused: unsigned %v, over the install's turns %v", m["nuon_server_connections_open"],
		m[`nuon_server_connections_shed_total{state="idle"}`], m[`nuon_server_connections_shed_total{state="new"}`],
		m[`nuon_server_refusals_total{reason="no_auth"}`], m[`nuon_server_refusals_total{reason="install_busy"}`])
	if open := m["nuon_server_connections_open"]; open > 32 {
		t.Errorf("%v connections open, over the cap", open)
	}
}

// TestIdleTimeout: the server closes a keep-alive connection that sends no
// request within IdleTimeout.
func TestIdleTimeout(t *testing.T) {
	e := newEnv(t)
	base, _ := limitedServer(t, e, server.Limits{IdleTimeout: 100 * time.Millisecond})
	addr := strings.TrimPrefix(base, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// Waits for the server to close it: a minute is not a speed target,
	// only the bound of a test that would otherwise hang.
	c.SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("idle connection: read %d bytes, %v; want it closed by the server", n, err)
	}
}

// TestReplicaLimits: a read replica is served within the same limits: with
// a cap of 32 connections, idle connections and bodies that never come do
// not keep a poll out, and the 249 MiB command list it forwards is refused
// with memory bounded.
func TestReplicaLimits(t *testing.T) {
	e := newEnv(t)
	w := writer(t, e)
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, server.Config{
		Dir: t.TempDir() + "/mirror.git", Mode: server.ModeReplica, Writer: w.URL, ReplicaToken: replicaToken,
		PollInterval: time.Hour, Limits: server.Limits{MaxConns: 32},
		Logger: slog.New(slog.NewTextHandler(e.log, nil)).With("replica", true),
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs, l := srv.HTTPServer(ln)
	go hs.Serve(l)
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	t.Cleanup(func() { hs.Close(); cancel(); <-done; srv.Close() })
	base, addr := "http://"+ln.Addr().String(), ln.Addr().String()
	waitUntil(t, "the replica's first refresh", func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	for i := range 100 {
		req, _ := http.NewRequest(http.MethodPost, base+"/tenant.git/git-receive-pack", nil)
		if i%2 == 0 {
			req = signedRequest(t, http.MethodPost, base+"/tenant.git/git-receive-pack", nil, 0, "acme", e.keys["acme"])
		}
		conns = append(conns, halfSent(t, addr, req))
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	}
	if err := poll(context.Background(), base, "globex", e.keys["globex"]); err != nil {
		t.Fatalf("a poll of the replica among hostile connections: %v", err)
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cl := newCommandList(4001, 65520-98)
	resp, body := rawRequest(t, addr, signedRequest(t, http.MethodPost, base+"/tenant.git/git-receive-pack", cl, cl.size(), "globex", e.keys["globex"]))
	runtime.ReadMemStats(&after)
	t.Logf("%s %q; %d KiB allocated in the process", resp.Status, body, (after.TotalAlloc-before.TotalAlloc)>>10)
	if resp.StatusCode == http.StatusOK || strings.Contains(body, "xxxxxxxxxx") {
		t.Errorf("the command list through the replica: %s %q", resp.Status, body)
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 64<<20 {
		t.Errorf("%d MiB allocated for a 249 MiB command list", grown>>20)
	}
}

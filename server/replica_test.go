package server_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

const replicaToken = "replica-token-for-tests"

// replica starts a read replica of the writer at writerURL on loopback,
// with its own mirror, refreshed every interval.
func replica(t *testing.T, e *env, writerURL string, interval time.Duration) (*server.Server, *httptest.Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, server.Config{
		Dir:          filepath.Join(t.TempDir(), "mirror.git"),
		Mode:         server.ModeReplica,
		Writer:       writerURL,
		ReplicaToken: replicaToken,
		PollInterval: interval,
		Logger:       slog.New(slog.NewTextHandler(e.log, nil)).With("replica", t.Name()),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	t.Cleanup(func() { hs.Close(); cancel(); <-done; srv.Close() })
	return srv, hs
}

// writer starts a writer on the env's repository that serves replicas.
func writer(t *testing.T, e *env) *httptest.Server {
	t.Helper()
	srv, err := server.New(context.Background(), server.Config{
		Dir: e.dir, PollInterval: time.Hour,
		ReplicaToken: replicaToken, Logger: slog.New(slog.NewTextHandler(e.log, nil)).With("writer", true),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	return hs
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReplicas runs a writer and two read replicas on loopback: each
// install polls and fetches from its replica; a status pushed through a
// replica lands on the writer and the other replica sees it after its
// refresh; a replica refuses what the writer would; the writer's replica
// endpoint needs the replica token.
func TestReplicas(t *testing.T) {
	e := newEnv(t)
	w := writer(t, e)
	_, r1 := replica(t, e, w.URL, time.Hour) // refreshes only on start and after a forwarded push
	_, r2 := replica(t, e, w.URL, 50*time.Millisecond)
	for _, r := range []*httptest.Server{r1, r2} {
		waitUntil(t, "the replica to be ready", func() bool { c, _ := getStatus(t, r.URL+"/readyz"); return c == 200 })
	}
	ctx := context.Background()
	remote := func(base, id string) agent.Remote {
		return agent.NewRemote(base+"/tenant.git", agent.WithRequestSigner(&request.Signer{Install: id, Key: e.keys[id]}))
	}

	// acme on replica 1, globex on replica 2: each reads its own state
	// from its replica's mirror, as the writer has it.
	for _, c := range []struct {
		id   string
		base string
	}{{"acme", r1.URL}, {"globex", r2.URL}} {
		desired := plumbing.ReferenceName(schemas.InstallRef(c.id))
		heads, err := remote(c.base, c.id).Heads(ctx, desired)
		if err != nil {
			t.Fatal(err)
		}
		if heads[desired].String() != e.serverRef(desired.String()) {
			t.Fatalf("%s's desired ref on its replica %s, on the writer %s", c.id, heads[desired], e.serverRef(desired.String()))
		}
		if err := remote(c.base, c.id).Fetch(ctx, memory.NewStorage(), heads[desired]); err != nil {
			t.Fatal(err)
		}
	}
	// Scoping holds on a replica: acme cannot read globex's state.
	if err := remote(r1.URL, "acme").Fetch(ctx, memory.NewStorage(), plumbing.NewHash(e.serverRef(schemas.InstallRef("globex")))); err == nil {
		t.Fatal("acme fetched globex's state from a replica")
	}

	// acme pushes its status through replica 1: it lands on the writer;
	// replica 1 sees it at once, replica 2 after its next refresh.
	a := newStatusAgent("acme", r1.URL+"/tenant.git", e.keys["acme"], plumbing.ZeroHash)
	if err := a.push(ctx); err != nil {
		t.Fatal(err)
	}
	status := plumbing.ReferenceName(schemas.StatusRef("acme"))
	if got := e.serverRef(status.String()); got != a.head.String() {
		t.Fatalf("writer's acme status %q, pushed %s", got, a.head)
	}
	for _, r := range []*httptest.Server{r1, r2} {
		waitUntil(t, "the replica to see acme's status", func() bool {
			heads, err := remote(r.URL, "acme").Heads(ctx, status)
			return err == nil && heads[status] == a.head
		})
	}
	// The next push goes through replica 2, on top of the first.
	a.remote = remote(r2.URL, "acme")
	if err := a.push(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.serverRef(status.String()); got != a.head.String() {
		t.Fatalf("writer's acme status %q, pushed %s", got, a.head)
	}

	// globex pushing acme's status ref through a replica: refused.
	g := newStatusAgent("globex", r2.URL+"/tenant.git", e.keys["globex"], plumbing.ZeroHash)
	h, err := g.commit()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.st.SetReference(plumbing.NewHashReference(status, h)); err != nil {
		t.Fatal(err)
	}
	if err := g.remote.Push(ctx, g.st, status, a.head, h); err == nil {
		t.Fatal("globex pushed acme's status through a replica")
	}
	if got := e.serverRef(status.String()); got != a.head.String() {
		t.Fatalf("acme's status moved to %s", got)
	}
	// Unsigned: refused by the replica itself.
	if code, _ := getStatus(t, r1.URL+"/tenant.git/info/refs?service=git-receive-pack"); code != http.StatusUnauthorized {
		t.Fatalf("unsigned receive-pack advertisement through a replica: %d", code)
	}

	// The writer's replica endpoint: only with the replica token.
	for _, c := range []struct {
		auth string
		want int
	}{{"", http.StatusUnauthorized}, {"Bearer wrong", http.StatusUnauthorized}, {"Bearer " + replicaToken, http.StatusOK}} {
		req, _ := http.NewRequest("GET", w.URL+"/replica/info/refs?service=git-upload-pack", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("replica endpoint with %q: %d, want %d", c.auth, resp.StatusCode, c.want)
		}
	}
	m := scrape(t, r2.URL+"/metrics")
	if m[`nuon_server_replica_refreshes_total{result="ok"}`] < 2 || m[`nuon_server_pushes_forwarded_total{result="ok"}`] < 1 {
		t.Errorf("replica 2 metrics: refreshes %v, forwarded %v", m[`nuon_server_replica_refreshes_total{result="ok"}`], m[`nuon_server_pushes_forwarded_total{result="ok"}`])
	}
}

// TestReplicaWriterDown: with the writer gone, a replica keeps answering
// polls from its mirror and refuses pushes with a clear error.
func TestReplicaWriterDown(t *testing.T) {
	e := newEnv(t)
	w := writer(t, e)
	_, r := replica(t, e, w.URL, 50*time.Millisecond)
	waitUntil(t, "the replica to be ready", func() bool { c, _ := getStatus(t, r.URL+"/readyz"); return c == 200 })
	w.Close()
	ctx := context.Background()
	rm := agent.NewRemote(r.URL+"/tenant.git", agent.WithRequestSigner(&request.Signer{Install: "acme", Key: e.keys["acme"]}))
	desired := plumbing.ReferenceName(schemas.InstallRef("acme"))
	heads, err := rm.Heads(ctx, desired)
	if err != nil || heads[desired].String() != e.serverRef(desired.String()) {
		t.Fatalf("poll with the writer down: %v %v", heads, err)
	}
	a := newStatusAgent("acme", r.URL+"/tenant.git", e.keys["acme"], plumbing.ZeroHash)
	err = a.push(ctx)
	if err == nil {
		t.Fatal("push accepted with the writer down")
	}
	t.Logf("push with the writer down: %v", err)
	if c, _ := getStatus(t, r.URL+"/readyz"); c != 200 {
		t.Errorf("replica not ready once the writer is down: %d", c)
	}
}

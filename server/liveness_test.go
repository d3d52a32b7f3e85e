package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// fakeClock is a clock tests move by hand, shared by the server and the
// agents' request signers (so signatures stay within the allowed skew).
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type livenessReport struct {
	Now      time.Time `json:"now"`
	Contacts []struct {
		Install string    `json:"install"`
		At      time.Time `json:"at"`
		Kind    string    `json:"kind"`
	} `json:"contacts"`
}

func getLiveness(t *testing.T, base, token string) (int, livenessReport) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/fleet/liveness", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep livenessReport
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, rep
}

func installPage(t *testing.T, base, id string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/fleet/installs/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+viewToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// pollAt is an agent's poll of its desired ref, signed with key as install
// id at the clock's time.
func pollAt(ctx context.Context, url, id string, key *signature.Signer, clk *fakeClock) error {
	r := agent.NewRemote(url, agent.WithRequestSigner(&request.Signer{Install: id, Key: key, Now: clk.Now}))
	_, err := r.Heads(ctx, plumbing.ReferenceName(schemas.InstallRef(id)))
	return err
}

// TestLiveness: an install that announces a heartbeat and writes no
// status commit is Unreachable only when its signed polls stop too; its
// first poll after that makes it reachable again at once; operators read
// contacts on /fleet/liveness with the view token only; a request that
// is not signed by the install's key is no contact; a restart keeps the
// table.
func TestLiveness(t *testing.T) {
	e := newEnv(t)
	clk := &fakeClock{t: time.Now()}
	start := func() (*server.Server, *httptest.Server) {
		srv, err := server.New(context.Background(), server.Config{
			Dir: e.dir, PollInterval: time.Hour, Now: clk.Now, MaxSkew: 24 * time.Hour,
			ViewToken: viewToken, Logger: slog.New(slog.NewTextHandler(e.log, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		return srv, httptest.NewServer(srv)
	}
	srv, hs := start()
	defer func() { hs.Close(); srv.Close() }()
	url := hs.URL + "/tenant.git"
	ctx := context.Background()

	st := schemas.Status{Phase: schemas.InstallReady, Generation: 1, HeartbeatEvery: "10m0s"}
	pushStatus(t, memory.NewStorage(), url, "acme", e.keys["acme"], plumbing.ZeroHash, st, clk.Now(), "acme: ready")
	unreachable := func() float64 { return scrape(t, hs.URL+"/metrics")["nuon_server_installs_unreachable"] }
	if n := unreachable(); n != 0 {
		t.Fatalf("unreachable after a push: %v", n)
	}

	// 25 minutes without a poll: Unreachable, said as "no signed
	// contact since" the push.
	pushed := clk.Now()
	clk.Add(25 * time.Minute)
	if n := unreachable(); n != 1 {
		t.Fatalf("unreachable after 25m of silence: %v, want 1", n)
	}
	page := installPage(t, hs.URL, "acme")
	if !strings.Contains(page, "Unreachable") || !strings.Contains(page, "no signed contact since "+pushed.UTC().Format(time.RFC3339)) {
		t.Fatalf("install page does not say acme is Unreachable since its push:\n%s", page)
	}

	// A poll signed by globex's key in acme's name, and one unsigned:
	// refused, and no contact.
	if err := pollAt(ctx, url, "acme", e.keys["globex"], clk); err == nil {
		t.Fatal("a poll signed by another install's key was answered")
	}
	if resp, err := http.Get(url + "/info/refs?service=git-upload-pack"); err == nil {
		resp.Body.Close()
	}
	if n := unreachable(); n != 1 {
		t.Fatalf("a forged poll made acme reachable: unreachable %v", n)
	}

	// Its own poll: reachable at once, no commit written.
	statusBefore := e.serverRef(schemas.StatusRef("acme"))
	if err := pollAt(ctx, url, "acme", e.keys["acme"], clk); err != nil {
		t.Fatal(err)
	}
	polled := clk.Now()
	if n := unreachable(); n != 0 {
		t.Fatalf("unreachable after acme's poll: %v, want 0", n)
	}
	if got := e.serverRef(schemas.StatusRef("acme")); got != statusBefore {
		t.Fatalf("a poll moved the status ref: %s → %s", statusBefore, got)
	}
	// 15 minutes after the poll (40 after the status commit): reachable.
	clk.Add(15 * time.Minute)
	if n := unreachable(); n != 0 {
		t.Fatalf("unreachable 15m after a poll with a 10m heartbeat: %v", n)
	}
	// 25: Unreachable again, since the poll.
	clk.Add(10 * time.Minute)
	if n := unreachable(); n != 1 {
		t.Fatalf("unreachable 25m after the poll: %v, want 1", n)
	}
	if at, kind, ok := srv.LastContact("acme"); !ok || !at.Equal(polled) || kind != "poll" {
		t.Fatalf("LastContact = %v %q %v, want the poll at %s", at, kind, ok, polled)
	}
	if page := installPage(t, hs.URL, "acme"); !strings.Contains(page, "no signed contact since "+polled.UTC().Format(time.RFC3339)) ||
		!strings.Contains(page, `id="contact">`+polled.UTC().Format("2006-01-02 15:04:05Z")) {
		t.Fatalf("install page does not name the poll:\n%s", page)
	}
	m := scrape(t, hs.URL+"/metrics")
	if m["nuon_server_installs_contacted"] != 1 || m[`nuon_server_contact_age_seconds_bucket{le="1200"}`] != 0 || m[`nuon_server_contact_age_seconds_bucket{le="1800"}`] != 1 {
		t.Errorf("contact metrics: contacted %v, ≤1200s %v, ≤1800s %v", m["nuon_server_installs_contacted"],
			m[`nuon_server_contact_age_seconds_bucket{le="1200"}`], m[`nuon_server_contact_age_seconds_bucket{le="1800"}`])
	}

	// Operators only.
	for _, tok := range []string{"", "wrong-token"} {
		if code, _ := getLiveness(t, hs.URL, tok); code != http.StatusUnauthorized {
			t.Errorf("GET /fleet/liveness with token %q: %d, want 401", tok, code)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, hs.URL+"/fleet/liveness", nil)
	(&request.Signer{Install: "acme", Key: e.keys["acme"], Now: clk.Now}).Sign(req)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("an install's signature opened /fleet/liveness: %v %v", resp.Status, err)
	}
	code, rep := getLiveness(t, hs.URL, viewToken)
	if code != http.StatusOK || len(rep.Contacts) != 1 || rep.Contacts[0].Install != "acme" || rep.Contacts[0].Kind != "poll" || !rep.Contacts[0].At.Equal(polled) {
		t.Fatalf("liveness %d %+v, want acme's poll at %s", code, rep, polled)
	}

	// A restart keeps the table: acme polls, the server stops and
	// starts again, and acme is reachable without another poll.
	if err := pollAt(ctx, url, "acme", e.keys["acme"], clk); err != nil {
		t.Fatal(err)
	}
	last := clk.Now()
	hs.Close()
	srv.Close()
	clk.Add(5 * time.Minute)
	srv, hs = start()
	if n := unreachable(); n != 0 {
		t.Fatalf("unreachable after a restart: %v, want 0", n)
	}
	if _, rep := getLiveness(t, hs.URL, viewToken); len(rep.Contacts) != 1 || !rep.Contacts[0].At.Equal(last) {
		t.Fatalf("liveness after a restart: %+v, want acme at %s", rep, last)
	}
}

// TestLivenessReplicas: polls answered by a replica reach the writer's
// view, and the other replica's, within its exchange interval.
func TestLivenessReplicas(t *testing.T) {
	e := newEnv(t)
	clk := &fakeClock{t: time.Now()}
	w, err := server.New(context.Background(), server.Config{
		Dir: e.dir, PollInterval: time.Hour, Now: clk.Now, MaxSkew: 24 * time.Hour,
		ViewToken: viewToken, ReplicaToken: replicaToken, Logger: slog.New(slog.NewTextHandler(e.log, nil)).With("writer", true),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	whs := httptest.NewServer(w)
	t.Cleanup(func() { whs.Close(); w.Close() })
	_, r1 := replica(t, e, whs.URL, 50*time.Millisecond)
	_, r2 := replica(t, e, whs.URL, 50*time.Millisecond)
	ctx := context.Background()
	waitUntil(t, "the replica's first refresh", func() bool {
		return pollAt(ctx, r1.URL+"/tenant.git", "acme", e.keys["acme"], clk) == nil
	})
	polled := clk.Now()
	waitUntil(t, "acme's poll on replica 1 to reach the writer", func() bool {
		_, rep := getLiveness(t, whs.URL, viewToken)
		return len(rep.Contacts) == 1 && rep.Contacts[0].Install == "acme" && rep.Contacts[0].At.Equal(polled)
	})
	// The other replica learns it from the writer; its metrics count it.
	waitUntil(t, "acme's poll to reach replica 2", func() bool {
		return scrape(t, r2.URL+"/metrics")["nuon_server_installs_contacted"] == 1
	})
	// The exchange is the replica token's: without it, refused.
	resp, err := http.Post(whs.URL+"/replica/liveness", "application/json", strings.NewReader(`[{"install":"globex","at":"2099-01-01T00:00:00Z"}]`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST /replica/liveness without the token: %s", resp.Status)
	}
	if _, rep := getLiveness(t, whs.URL, viewToken); len(rep.Contacts) != 1 {
		t.Fatalf("an unauthenticated report was merged: %+v", rep)
	}
}

// TestLivenessRefRefused: through the server an agent needs no liveness
// ref, and may not write one: its own liveness ref is refused like any
// ref but its status, and nothing is written.
func TestLivenessRefRefused(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := newStatusAgent("acme", e.http.URL+"/tenant.git", e.keys["acme"], plumbing.ZeroHash)
	h, err := a.commit()
	if err != nil {
		t.Fatal(err)
	}
	ref := plumbing.ReferenceName(schemas.LivenessRef("acme"))
	err = a.remote.Push(ctx, a.st, ref, plumbing.ZeroHash, h)
	if err == nil || !strings.Contains(err.Error(), "only its own status ref") {
		t.Fatalf("push to its liveness ref through the server: %v", err)
	}
	if got := e.serverRef(ref.String()); got != "" {
		t.Fatalf("the server wrote %s = %s", ref, got)
	}
}

package server_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// scrape reads a Prometheus text exposition: series (name and labels, as
// written) → value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func getStatus(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMetrics drives polls, fetches, pushes and refusals through the
// server and checks that each moves its series on /metrics.
func TestMetrics(t *testing.T) {
	e := newEnv(t)
	before := scrape(t, e.http.URL+"/metrics")
	for _, s := range []string{
		`nuon_server_renders_total{result="rendered"}`,
		`nuon_server_main_polls_total{result="rendered"}`,
		`nuon_server_render_duration_seconds_count`,
		`nuon_server_render_installs_changed_total`,
	} {
		if before[s] < 1 {
			t.Errorf("%s = %v after the first render, want ≥ 1", s, before[s])
		}
	}
	if !hasPrefix(before, "go_build_info{") {
		t.Error("no go_build_info")
	}
	if code, body := getStatus(t, e.http.URL+"/healthz"); code != 200 {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if code, body := getStatus(t, e.http.URL+"/readyz"); code != 200 {
		t.Errorf("/readyz: %d %s", code, body)
	}

	ctx := context.Background()
	r := agent.NewRemote(e.http.URL+"/tenant.git", agent.WithRequestSigner(&request.Signer{Install: "acme", Key: e.keys["acme"]}))
	own := plumbing.ReferenceName(schemas.InstallRef("acme"))
	heads, err := r.Heads(ctx, own)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Fetch(ctx, memory.NewStorage(), heads[own]); err != nil {
		t.Fatal(err)
	}
	// Another install's state: refused.
	_ = r.Fetch(ctx, memory.NewStorage(), plumbing.NewHash(e.serverRef(schemas.InstallRef("globex"))))
	a := newStatusAgent("acme", e.http.URL+"/tenant.git", e.keys["acme"], plumbing.ZeroHash)
	if err := a.push(ctx); err != nil {
		t.Fatal(err)
	}
	stale := newStatusAgent("acme", e.http.URL+"/tenant.git", e.keys["acme"], plumbing.ZeroHash)
	stale.n = 100
	_ = stale.push(ctx)
	// Unsigned.
	if code, _ := getStatus(t, e.http.URL+"/tenant.git/info/refs?service=git-upload-pack"); code != http.StatusUnauthorized {
		t.Fatalf("unsigned request answered %d", code)
	}

	after := scrape(t, e.http.URL+"/metrics")
	for s, want := range map[string]float64{
		`nuon_server_polls_total{result="ok"}`:              1,
		`nuon_server_fetches_total{result="ok"}`:            1,
		`nuon_server_fetches_total{result="refused"}`:       1,
		`nuon_server_pushes_total{result="accepted"}`:       1,
		`nuon_server_pushes_total{result="refused"}`:        1,
		`nuon_server_push_duration_seconds_count`:           2,
		`nuon_server_refusals_total{reason="want_not_own"}`: 1,
		`nuon_server_refusals_total{reason="stale"}`:        1,
		`nuon_server_refusals_total{reason="no_auth"}`:      1,
	} {
		if got := after[s] - before[s]; got != want {
			t.Errorf("%s moved by %v, want %v", s, got, want)
		}
	}
}

func hasPrefix(m map[string]float64, p string) bool {
	for k := range m {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// TestMetricsReplicaFleet: a replica without a view token answers its
// first scrape at once, builds the fleet index in the background, then
// reports every install by state, and a status pushed through it moves
// the status ages.
func TestMetricsReplicaFleet(t *testing.T) {
	e := newEnv(t)
	w := writer(t, e)
	_, r := replica(t, e, w.URL, time.Hour)
	waitUntil(t, "the replica to be ready", func() bool { c, _ := getStatus(t, r.URL+"/readyz"); return c == 200 })
	installs := func(m map[string]float64) (n float64) {
		for k, v := range m {
			if strings.HasPrefix(k, "nuon_server_installs{") {
				n += v
			}
		}
		return n
	}
	var m map[string]float64
	waitUntil(t, "the replica's fleet index", func() bool {
		m = scrape(t, r.URL+"/metrics")
		return m["nuon_server_fleet_index_ready"] == 1
	})
	desired := len(strings.Fields(e.mustGit(e.dir, "for-each-ref", "--format=%(refname)", schemas.InstallRefPrefix)))
	if got := installs(m); got != float64(desired) || desired == 0 {
		t.Fatalf("replica reports %v installs, the writer has %d desired refs", got, desired)
	}
	unreported := m[`nuon_server_installs{state="Unreported"}`]
	if unreported == 0 || m["nuon_server_installs_status_quiet"] != unreported {
		t.Fatalf("no install Unreported before any status: %v", m)
	}
	a := newStatusAgent("acme", r.URL+"/tenant.git", e.keys["acme"], plumbing.ZeroHash)
	if err := a.push(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { t.Logf("replica metrics: %v", m) }()
	waitUntil(t, "the replica's metrics to count acme's status", func() bool {
		m = scrape(t, r.URL+"/metrics")
		return m["nuon_server_status_age_seconds_count"] == 1 && m["nuon_server_installs_status_quiet"] == unreported-1
	})
	if got := installs(m); got != float64(desired) {
		t.Fatalf("after acme's status the replica reports %v installs, want %d", got, desired)
	}
}

// TestMetricsNoFleetMetrics: a server without a view token and with
// NoFleetMetrics answers /metrics without building the fleet index: no
// series by state, no index gauge, however often it is scraped, while
// the series that need no index are there.
func TestMetricsNoFleetMetrics(t *testing.T) {
	e := newEnv(t)
	srv, err := server.New(context.Background(), server.Config{Dir: e.dir, PollInterval: time.Hour, NoFleetMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	for range 3 {
		m := scrape(t, hs.URL+"/metrics")
		for k := range m {
			if strings.HasPrefix(k, "nuon_server_installs{") || strings.HasPrefix(k, "nuon_server_installs_status_quiet") ||
				strings.HasPrefix(k, "nuon_server_fleet_index_ready") || strings.HasPrefix(k, "nuon_server_status_age") {
				t.Fatalf("%s reported without the fleet index: %v", k, m)
			}
		}
		if _, ok := m["nuon_server_installs_contacted"]; !ok {
			t.Fatalf("no contacts series: %v", m)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "nuon-fleet-index.gob")); err == nil {
		t.Fatal("a fleet index was saved by a server told not to build one")
	}
}

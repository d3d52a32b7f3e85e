package server_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// TestMaintenanceBesidePushes runs the server's repository maintenance
// back to back (every 10 ms) while installs push status and poll: every
// push is accepted and lands, no poll fails, the repository stays whole
// (git fsck), and maintenance leaves no loose object behind.
func TestMaintenanceBesidePushes(t *testing.T) {
	e := newEnv(t)
	srv, err := server.New(context.Background(), server.Config{
		Dir: e.dir, PollInterval: time.Hour, MaintenanceInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(e.log, nil)).With("maintained", true),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	url := hs.URL + "/tenant.git"
	if got := gittest.Git(t, e.dir, "config", "--get", "gc.auto"); got != "0" {
		t.Fatalf("gc.auto = %q, want 0: maintenance owns repacking", got)
	}

	ctx := context.Background()
	ids := []string{"acme", "globex", "initech"}
	heads := make([]plumbing.Hash, len(ids))
	var pushes, polls, failed atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(5 * time.Second)
	for i, id := range ids {
		wg.Add(2)
		go func() {
			defer wg.Done()
			a := newStatusAgent(id, url, e.keys[id], plumbing.ZeroHash)
			for time.Now().Before(stop) {
				if err := a.push(ctx); err != nil {
					t.Errorf("push of %s beside maintenance: %v", id, err)
					failed.Add(1)
					return
				}
				pushes.Add(1)
			}
			heads[i] = a.head
		}()
		go func() {
			defer wg.Done()
			r := agent.NewRemote(url, agent.WithRequestSigner(&request.Signer{Install: id, Key: e.keys[id]}))
			for time.Now().Before(stop) {
				if _, err := r.Heads(ctx, plumbing.ReferenceName(schemas.InstallRef(id))); err != nil {
					t.Errorf("poll of %s beside maintenance: %v", id, err)
					failed.Add(1)
					return
				}
				polls.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d failures beside maintenance", failed.Load())
	}
	for i, id := range ids {
		if got := e.serverRef(schemas.StatusRef(id)); got != heads[i].String() {
			t.Errorf("status of %s = %s, want its last push %s", id, got, heads[i])
		}
	}
	m := scrape(t, hs.URL+"/metrics")
	runs := m[`nuon_server_maintenance_runs_total{result="ok",task="geometric-repack"}`]
	if runs < 1 || m[`nuon_server_maintenance_runs_total{result="error",task="geometric-repack"}`] != 0 {
		t.Fatalf("maintenance runs: repack ok %v error %v", runs, m[`nuon_server_maintenance_runs_total{result="error",task="geometric-repack"}`])
	}
	t.Logf("%d pushes and %d polls beside %v maintenance runs", pushes.Load(), polls.Load(), runs)
	if pushes.Load() < 10 {
		t.Fatalf("only %d pushes in 5 s", pushes.Load())
	}
	// A whole run after the pushes: on a loaded machine the scheduled
	// ones may not have reached pack-refs within the 5 s.
	if err := srv.Maintain(ctx); err != nil {
		t.Fatal(err)
	}
	if m := scrape(t, hs.URL+"/metrics"); m[`nuon_server_maintenance_runs_total{result="ok",task="pack-refs"}`] < 1 ||
		m[`nuon_server_maintenance_runs_total{result="error",task="pack-refs"}`] != 0 {
		t.Fatalf("pack-refs: ok %v error %v", m[`nuon_server_maintenance_runs_total{result="ok",task="pack-refs"}`], m[`nuon_server_maintenance_runs_total{result="error",task="pack-refs"}`])
	}
	if out := gittest.Git(t, e.dir, "fsck", "--no-progress", "--connectivity-only"); strings.Contains(out, "missing") {
		t.Fatalf("fsck: %s", out)
	}
	if out := gittest.Git(t, e.dir, "count-objects", "-v"); !strings.Contains(out, "count: 0\n") {
		t.Fatalf("loose objects after maintenance:\n%s", out)
	}
	if m := scrape(t, hs.URL+"/metrics"); m["nuon_server_repository_loose_objects"] != 0 || m["nuon_server_repository_packs"] < 1 {
		t.Fatalf("repository metrics: loose %v packs %v", m["nuon_server_repository_loose_objects"], m["nuon_server_repository_packs"])
	}
}

package server_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/server"
)

// TestFleetViewSavedIndex: a server builds its index at start and saves
// it; the next start takes every install from it, but for the one whose
// status moved in between, which it reads and verifies again; a page
// shows the same fleet either way. A saved index that does not decode is
// ignored: every install is read again.
func TestFleetViewSavedIndex(t *testing.T) {
	key, _ := loadKey(t, "acme")
	dir := viewFleetRepo(t, 120, key, time.Now())
	start := func() (*httptest.Server, func() string, func()) {
		log := &syncBuffer{}
		srv, err := server.New(context.Background(), server.Config{Dir: dir, ViewToken: viewToken, PollInterval: time.Hour,
			Logger: slog.New(slog.NewTextHandler(log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv)
		return hs, log.String, func() { hs.Close(); srv.Close() }
	}
	fleetPage := func(hs *httptest.Server) string {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+"/fleet", nil)
		req.Header.Set("Authorization", "Bearer "+viewToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /fleet: %d", resp.StatusCode)
		}
		return string(b)
	}
	built := regexp.MustCompile(`index built" installs=(\d+) saved=(\d+)`)
	saved := func(log func() string) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			if m := built.FindStringSubmatch(log()); m != nil {
				return m[1] + " " + m[2]
			}
			if time.Now().After(deadline) {
				t.Fatalf("no index built:\n%s", log())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	summary := func(page string) string {
		_, s, _ := strings.Cut(page, `<section class="summary" id="summary">`)
		s, _, _ = strings.Cut(s, "</section>")
		return s
	}

	hs, log, stop := start()
	first := summary(fleetPage(hs))
	if got := saved(log); got != "120 0" {
		t.Errorf("first start: installs and saved %s, want 120 0", got)
	}
	stop()
	if _, err := os.Stat(filepath.Join(dir, "nuon-fleet-index.gob")); err != nil {
		t.Fatal(err)
	}

	written := func() time.Time {
		fi, err := os.Stat(filepath.Join(dir, "nuon-fleet-index.gob"))
		if err != nil {
			t.Fatal(err)
		}
		return fi.ModTime()
	}
	before := written()

	// One install's status moves while the next server runs.
	hs, log, stop = start()
	if got := saved(log); got != "120 120" {
		t.Errorf("restart: installs and saved %s, want 120 120", got)
	}
	if !written().Equal(before) {
		t.Error("a restart that took every install from the saved index wrote it again")
	}
	if again := summary(fleetPage(hs)); again != first {
		t.Errorf("the summary differs after a restart:\n%s\nwant\n%s", again, first)
	}
	agent := newStatusAgent(benchInstall(1), hs.URL+"/tenant.git", key, statusRef(t, dir, benchInstall(1)))
	copyCommit(t, dir, agent)
	if err := agent.push(context.Background()); err != nil {
		t.Fatal(err)
	}
	moved := summary(fleetPage(hs))
	stop()
	hs, log, stop = start()
	if got := saved(log); got != "120 119" {
		t.Errorf("restart after one status moved: installs and saved %s, want 120 119", got)
	}
	if written().Equal(before) {
		t.Error("a restart that read an install again did not save the index")
	}
	if again := summary(fleetPage(hs)); again != moved {
		t.Errorf("the summary differs after a restart:\n%s\nwant\n%s", again, moved)
	}
	stop()

	if err := os.WriteFile(filepath.Join(dir, "nuon-fleet-index.gob"), []byte("not a saved index"), 0o600); err != nil {
		t.Fatal(err)
	}
	hs, log, stop = start()
	defer stop()
	if got := saved(log); got != "120 0" {
		t.Errorf("with a broken saved index: installs and saved %s, want 120 0", got)
	}
	if !strings.Contains(log(), "the saved index is not read") {
		t.Errorf("a broken saved index is not reported:\n%s", log())
	}
	if again := summary(fleetPage(hs)); again != moved {
		t.Errorf("the summary differs with a broken saved index")
	}
}

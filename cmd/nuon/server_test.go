package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// TestServerDownIsHarmless runs the real binaries: nuon server in front of
// the tenant repository and nuon-agent for acme talking only to it, with
// signed requests. The agent applies and reports through the server; with
// the server stopped it keeps running, backs off and loses nothing; when
// the server returns with a new main it catches up.
func TestServerDownIsHarmless(t *testing.T) {
	st := newServerTenant(t)
	srv := st.startServer(t)
	status := schemas.StatusRef("acme")
	ref := func(name string) string {
		out, _ := gittest.Run(st.repo, nil, "rev-parse", "--verify", "--quiet", name)
		return out
	}
	waitFor(t, "the first render", 30*time.Second, srv.log.String, func() bool { return ref(schemas.InstallRef("acme")) != "" })

	agentLog := st.startAgent(t, srv, "acme", "--max-backoff", "2s")
	logs := func() string { return "server:\n" + srv.log.String() + "\nagent:\n" + agentLog.String() }
	generation := func() string {
		out, _ := gittest.Run(st.repo, nil, "log", "-1", "--format=%(trailers:key="+schemas.TrailerGeneration+",valueonly)", status)
		return strings.TrimSpace(out)
	}
	waitFor(t, "acme's first status through the server", 3*time.Minute, logs, func() bool { return generation() == "1" })

	// The server goes away.
	srv.stop()
	applied := ref(status)
	before := len(agentLog.String())
	time.Sleep(5 * time.Second)
	if strings.Contains(agentLog.String()[before:], `"phase":"Deleting"`) || ref(status) != applied {
		t.Fatalf("something changed while the server was down\n%s", logs())
	}
	if _, err := http.Get(srv.url + "/healthz"); err == nil {
		t.Fatal("server still answers")
	}
	// The agent is still running and retrying.
	if n := strings.Count(agentLog.String()[before:], "connection refused"); n < 2 {
		t.Fatalf("agent retried %d times in 5s with the server down\n%s", n, logs())
	}

	// A promotion lands on main while the server is down; it returns.
	stable := filepath.Join(st.src, "channels", "stable.yaml")
	b, _ := os.ReadFile(stable)
	if err := os.WriteFile(stable, bytes.Replace(b, []byte("database: 1.0.0"), []byte("database: 1.1.0"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.CommitDir(t, st.repo, "main", st.src, "promote database")
	srv2 := srv.restart(t)
	logs = func() string { return "server:\n" + srv2.log.String() + "\nagent:\n" + agentLog.String() }
	waitFor(t, "acme to catch up to generation 2", 3*time.Minute, logs, func() bool { return generation() == "2" })
}

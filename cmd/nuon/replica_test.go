package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// TestReplicasConverge runs the real binaries beyond one machine, on
// loopback: one writer, two read replicas with their own mirrors, and an
// agent on each replica (acme on the first, globex on the second). Both
// agents converge through their replica, their status lands on the
// writer, and each replica serves the other's status after a refresh.
func TestReplicasConverge(t *testing.T) {
	st := newServerTenant(t)
	token := filepath.Join(st.work, "replica-token")
	if err := os.WriteFile(token, []byte("a-replica-token-for-the-e2e-test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := st.startServer(t, "--replica-token-file", token)
	w.waitReady(t, 30*time.Second)
	var replicas []*nuonServer
	for range 2 {
		replicas = append(replicas, startServer(t, st.nuon, st.env, "--mode", "replica", "--writer", w.url,
			"--repo", filepath.Join(t.TempDir(), "mirror.git"), "--replica-token-file", token,
			"--poll-interval", "300ms"))
	}
	logs := func() string {
		var b strings.Builder
		b.WriteString("writer:\n" + w.log.String())
		for _, r := range replicas {
			b.WriteString("\nreplica " + r.url + ":\n" + r.log.String())
		}
		return b.String()
	}
	for _, r := range replicas {
		waitFor(t, "replica "+r.url, 30*time.Second, logs, r.ready)
	}
	agents := map[string]*nuonServer{"acme": replicas[0], "globex": replicas[1]}
	for id, r := range agents {
		l := st.startAgent(t, r, id)
		prev := logs
		logs = func() string { return prev() + "\nagent " + id + ":\n" + l.String() }
	}
	// Converged: the status of generation 1 (Degraded here: the image
	// component needs --vendor-key, the rest applied) is on the writer.
	generation := func(id string) string {
		out, _ := gittest.Run(st.repo, nil, "log", "-1", "--format=%(trailers:key="+schemas.TrailerGeneration+",valueonly)", schemas.StatusRef(id))
		return strings.TrimSpace(out)
	}
	for id := range agents {
		waitFor(t, id+"'s status of generation 1 on the writer", 4*time.Minute, logs, func() bool { return generation(id) == "1" })
	}
	// Each replica's mirror has both statuses once it refreshed.
	for _, r := range replicas {
		m := scrapeMetrics(r.url + "/metrics")
		if m[`nuon_server_pushes_forwarded_total{result="ok"}`] < 1 {
			t.Errorf("replica %s forwarded no push", r.url)
		}
	}
	// Each replica's mirror holds both installs' statuses once it
	// refreshed: its fleet snapshot has a status age for both (initech,
	// without an agent, has none).
	for _, r := range replicas {
		waitFor(t, "replica "+r.url+" to serve both statuses", 30*time.Second, logs, func() bool {
			m := scrapeMetrics(r.url + "/metrics")
			return m[`nuon_server_status_age_seconds_count`] == 2 && m[`nuon_server_installs{state="Unreported"}`] == 1
		})
	}
}

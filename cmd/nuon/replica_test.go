package main

import (
	"nuon.dev/nuon/internal/testenv"
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
	tf := testenv.TerraformConfig(t)
	root := repoRoot()
	keys := filepath.Join(root, "fixtures", "keys")
	nuonBin, agentBin := nuonBinary(t), agentBinary(t)
	work := t.TempDir()
	repo := filepath.Join(work, "tenant.git")
	gittest.InitBare(t, repo)
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS(filepath.Join(root, "fixtures", "tenant"))); err != nil {
		t.Fatal(err)
	}
	gittest.CommitDir(t, repo, "main", src, "shop")
	trust := filepath.Join(work, "allowed_signers")
	pub, _ := os.ReadFile(filepath.Join(keys, "render.pub"))
	if err := os.WriteFile(trust, []byte("renderer "+string(pub)), 0o644); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(work, "replica-token")
	if err := os.WriteFile(token, []byte("a-replica-token-for-the-e2e-test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"TF_CLI_CONFIG_FILE=" + tf, "NUON_SECRET_LICENSE_KEY=e2e-license-77", "CHECKPOINT_DISABLE=1"}
	wAddr, r1Addr, r2Addr := freeAddr(t), freeAddr(t), freeAddr(t)
	_, wLog := startProcess(t, env, nuonBin, "server", "--repo", repo, "--render-key", filepath.Join(keys, "render"),
		"--listen", wAddr, "--poll-interval", "200ms", "--replica-token-file", token)
	waitFor(t, "the writer", 30*time.Second, wLog.String, func() bool { return httpStatus("http://"+wAddr+"/readyz") == 200 })
	replicaLogs := map[string]*lockedBuffer{}
	for _, a := range []string{r1Addr, r2Addr} {
		_, l := startProcess(t, env, nuonBin, "server", "--mode", "replica", "--writer", "http://"+wAddr,
			"--repo", filepath.Join(t.TempDir(), "mirror.git"), "--replica-token-file", token,
			"--listen", a, "--poll-interval", "300ms")
		replicaLogs[a] = l
	}
	logs := func() string {
		var b strings.Builder
		b.WriteString("writer:\n" + wLog.String())
		for a, l := range replicaLogs {
			b.WriteString("\nreplica " + a + ":\n" + l.String())
		}
		return b.String()
	}
	for _, a := range []string{r1Addr, r2Addr} {
		waitFor(t, "replica "+a, 30*time.Second, logs, func() bool { return httpStatus("http://"+a+"/readyz") == 200 })
	}
	agents := map[string]string{"acme": r1Addr, "globex": r2Addr}
	for id, a := range agents {
		_, l := startProcess(t, env, agentBin, "agent", "--server-auth",
			"--repo", "http://"+a+"/tenant.git", "--install", id, "--trust", trust,
			"--key", filepath.Join(keys, id), "--workdir", filepath.Join(work, id),
			"--artifacts", fixtureLayout(t), "--insecure-skip-artifact-verification",
			"--interval", "500ms")
		prev := logs
		logs = func() string { return prev() + "\nagent " + id + ":\n" + l.String() }
	}
	// Converged: the status of generation 1 (Degraded here: the image
	// component needs --vendor-key, the rest applied) is on the writer.
	generation := func(id string) string {
		out, _ := gittest.Run(repo, nil, "log", "-1", "--format=%(trailers:key="+schemas.TrailerGeneration+",valueonly)", schemas.StatusRef(id))
		return strings.TrimSpace(out)
	}
	for id := range agents {
		waitFor(t, id+"'s status of generation 1 on the writer", 4*time.Minute, logs, func() bool { return generation(id) == "1" })
	}
	// Each replica's mirror has both statuses once it refreshed.
	for _, a := range []string{r1Addr, r2Addr} {
		m := scrapeMetrics("http://" + a + "/metrics")
		if m[`nuon_server_pushes_forwarded_total{result="ok"}`] < 1 {
			t.Errorf("replica %s forwarded no push", a)
		}
	}
	// Each replica's mirror holds both installs' statuses once it
	// refreshed: its fleet snapshot has a status age for both (initech,
	// without an agent, has none).
	for _, a := range []string{r1Addr, r2Addr} {
		waitFor(t, "replica "+a+" to serve both statuses", 30*time.Second, logs, func() bool {
			m := scrapeMetrics("http://" + a + "/metrics")
			return m[`nuon_server_status_age_seconds_count`] == 2 && m[`nuon_server_installs{state="Unreported"}`] == 1
		})
	}
}

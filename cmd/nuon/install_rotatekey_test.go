package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// TestInstallRotateKeyThroughServer: acme's agent runs behind nuon server;
// it is stopped, nuon install rotate-key hands its key over, and then the
// agent with the old key is refused by the server while the agent with the
// new key (DIR/agent.key after the rotation) converges and pushes status,
// and nuon status still reads acme's status. Main is not changed.
func TestInstallRotateKeyThroughServer(t *testing.T) {
	st := newServerTenant(t)
	srv := startServer(t, st.nuon, st.env, "--repo", st.repo, "--render-key", filepath.Join(st.keys, "render"), "--poll-interval", "1h")
	srv.waitReady(t, time.Minute)
	dir := filepath.Join(st.work, "acme-dir")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{"", ".pub"} {
		b, err := os.ReadFile(filepath.Join(st.keys, "acme"+ext))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "agent.key"+ext), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	url := srv.url + "/tenant.git"
	agentArgs := func(key string, more ...string) []string {
		return append([]string{"agent", "--server-auth", "--repo", url, "--install", "acme", "--trust", st.trust,
			"--key", key, "--workdir", filepath.Join(st.work, "acme"),
			"--artifacts", fixtureLayout(t), "--insecure-skip-artifact-verification"}, more...)
	}
	status := func() string {
		out, _ := gittest.Run(st.repo, nil, "rev-parse", "--verify", "--quiet", schemas.StatusRef("acme"))
		return out
	}
	agentCmd, agentLog := startProcess(t, st.env, st.agent, agentArgs(filepath.Join(dir, "agent.key"), "--interval", "2s")...)
	waitFor(t, "acme's first status through the server", 5*time.Minute, func() string { return srv.log.String() + agentLog.String() }, func() bool { return status() != "" })
	stopProcess(agentCmd)
	oldKey := filepath.Join(dir, "agent.key.old")
	if b, err := os.ReadFile(filepath.Join(dir, "agent.key")); err != nil || os.WriteFile(oldKey, b, 0o600) != nil {
		t.Fatal("copy the old key")
	}

	cmd := exec.Command(st.nuon, "install", "rotate-key", "acme", "--repo", url, "--server-auth", "--dir", dir, "-o", "json")
	cmd.Env = append(cmd.Environ(), st.env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("rotate-key: %v\n%s\n%s", err, out, srv.log.String())
	}
	var r rotateKeyReport
	if err := json.Unmarshal(out, &r); err != nil || r.Install != "acme" || r.AgentKey == r.RetiredKey {
		t.Fatalf("report %+v (%v)", r, err)
	}
	pub, err := os.ReadFile(filepath.Join(dir, "agent.key.pub"))
	if err != nil || !strings.HasPrefix(string(pub), r.AgentKey) {
		t.Fatalf("DIR/agent.key.pub is not the new key: %q %v", pub, err)
	}
	waitFor(t, "the hand-over mirrored upstream", time.Minute, srv.log.String, func() bool { return status() == r.Status })

	// The old key: its agent is refused, nothing moves.
	run := func(key string) (string, error) {
		c := exec.Command(st.agent, agentArgs(key, "--once")...)
		c.Env = append(c.Environ(), st.env...)
		b, err := c.CombinedOutput()
		return string(b), err
	}
	if out, err := run(oldKey); err == nil {
		t.Fatalf("the agent with the retired key ran:\n%s", out)
	}
	// A second rotation by the retired key is refused.
	stolen := t.TempDir()
	for _, ext := range []string{"", ".pub"} {
		b, _ := os.ReadFile(filepath.Join(dir, "agent.key.retired"+ext))
		if err := os.WriteFile(filepath.Join(stolen, "agent.key"+ext), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd = exec.Command(st.nuon, "install", "rotate-key", "acme", "--repo", url, "--server-auth", "--dir", stolen)
	cmd.Env = append(cmd.Environ(), st.env...)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("the retired key rotated again:\n%s", out)
	}
	// The new key's agent runs and its status is taken.
	if out, err := run(filepath.Join(dir, "agent.key")); err != nil {
		t.Fatalf("the agent with the new key: %v\n%s", err, out)
	}
	// nuon status, reading the tenant repository with main unchanged
	// (agentKey still the old key), verifies the status signed by the
	// new key: judged by the key in force at the tip.
	cmd = exec.Command(st.nuon, "status", "--repo", st.repo, "--install", "acme", "-o", "json", "--cache-dir", filepath.Join(st.work, "cli-cache"))
	cmd.Env = append(cmd.Environ(), st.env...)
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	var rows []struct {
		Install  string `json:"install"`
		Verified bool   `json:"verified"`
	}
	if err := json.Unmarshal(out, &rows); err != nil || len(rows) != 1 || !rows[0].Verified {
		t.Fatalf("status after the rotation: %+v (%v)\n%s", rows, err, out)
	}
	if !strings.Contains(srv.log.String(), "install key handed over") {
		t.Fatal("the server did not log the hand-over")
	}
}

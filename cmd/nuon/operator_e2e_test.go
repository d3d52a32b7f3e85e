package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// serverOperator is an install's agent behind nuon server, and the
// operator's commands in front of it, for the tests of the operator's CLI
// through the server.
type serverOperator struct {
	st       *serverTenant
	srv      *nuonServer
	agentLog *lockedBuffer
	op       string // the operator's key, fixtures/keys/operator
}

// newServerOperator starts nuon server, which checks main only once an
// hour (so nothing on a request's path waits for that), and acme's agent
// with interval, trusting the fixture's trust/requests; it waits for the
// agent's first status.
func newServerOperator(t testing.TB, interval string) *serverOperator {
	t.Helper()
	st := newServerTenant(t)
	srv := startServer(t, st.nuon, st.env, "--repo", st.repo, "--render-key", filepath.Join(st.keys, "render"), "--poll-interval", "1h")
	srv.waitReady(t, time.Minute)
	trust := filepath.Join(repoRoot(), "fixtures", "tenant", "trust", "requests")
	_, agentLog := startProcess(t, st.env, st.agent, "agent", "--server-auth",
		"--repo", srv.url+"/tenant.git", "--install", "acme", "--trust", st.trust,
		"--key", filepath.Join(st.keys, "acme"), "--workdir", filepath.Join(st.work, "acme"),
		"--artifacts", fixtureLayout(t), "--insecure-skip-artifact-verification",
		"--request-trust", trust, "--interval", interval)
	so := &serverOperator{st: st, srv: srv, agentLog: agentLog, op: filepath.Join(st.keys, "operator")}
	waitFor(t, "acme's first status through the server", 5*time.Minute, so.logs, func() bool {
		out, _ := gittest.Run(st.repo, nil, "rev-parse", "--verify", "--quiet", schemas.StatusRef("acme"))
		return out != ""
	})
	return so
}

func (so *serverOperator) logs() string {
	return "server:\n" + so.srv.log.String() + "\nagent:\n" + so.agentLog.String()
}

// run runs nuon with args through the server with the operator's key in
// the environment ($NUON_SERVER_URL, $NUON_OPERATOR_KEY), as an operator
// who sourced the demo's env file would; it returns the output and the
// error.
func (so *serverOperator) run(t testing.TB, key string, args ...string) (string, error) {
	t.Helper()
	// Flags go before "--": after it every word is the command's.
	at := len(args)
	for i, a := range args {
		if a == "--" {
			at = i
			break
		}
	}
	full := append(append(append([]string{}, args[:at]...), "--cache-dir", filepath.Join(so.st.work, "cli-cache")), args[at:]...)
	cmd := exec.Command(so.st.nuon, full...)
	cmd.Env = append(append(cmd.Environ(), so.st.env...), "NUON_SERVER_URL="+so.srv.url, "NUON_OPERATOR_KEY="+key)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestOperatorCLIThroughServer: nuon status, logs, debug and requests
// work against nuon server with the operator's key alone, no repository
// and no token; a request reaches the install at its agent's next poll
// (the server checks main once an hour: nothing waits for that); a key
// that trust/requests does not list reads and files nothing.
func TestOperatorCLIThroughServer(t *testing.T) {
	const interval = 2 * time.Second
	so := newServerOperator(t, interval.String())

	out, err := so.run(t, so.op, "status", "-o", "json")
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	var rows []struct {
		Install string `json:"install"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) == 0 || rows[0].Install != "acme" {
		t.Fatalf("status rows %v (%v):\n%s", rows, err, out)
	}

	t0 := time.Now()
	out, err = so.run(t, so.op, "logs", "acme", "network", "--tail", "5")
	rt := time.Since(t0)
	if err != nil || strings.TrimSpace(out) == "" {
		t.Fatalf("logs: %v\n%s\n%s", err, out, so.logs())
	}
	t.Logf("nuon logs through the server, agent interval %v: %v", interval, rt.Round(time.Millisecond))
	// The agent's interval (jittered by ±10%), a bounded job and the
	// CLI's own 1s poll: a server poll interval (1h) would not fit.
	if limit := interval*11/10 + 5*time.Second; rt > limit {
		t.Errorf("logs answered in %v, more than %v", rt, limit)
	}
	if !strings.Contains(out, "filed and rendered into acme's desired state") {
		t.Errorf("logs did not say the request was rendered at once:\n%s", out)
	}

	out, err = so.run(t, so.op, "debug", "acme", "--component", "network", "--", "state", "list")
	if err != nil || !strings.Contains(out, ".") {
		t.Fatalf("debug: %v\n%s", err, out)
	}
	out, err = so.run(t, so.op, "requests", "--install", "acme", "-o", "json")
	if err != nil {
		t.Fatalf("requests: %v\n%s", err, out)
	}
	var reqs []struct {
		Type, State string
	}
	if err := json.Unmarshal([]byte(out), &reqs); err != nil || len(reqs) != 2 {
		t.Fatalf("requests %v (%v):\n%s", reqs, err, out)
	}
	for _, r := range reqs {
		if r.State != schemas.RequestAnswered {
			t.Errorf("%s request %s", r.Type, r.State)
		}
	}

	// Keys not in trust/requests: an install's, the renderer's.
	for _, k := range []string{"acme", "render"} {
		key := filepath.Join(so.st.keys, k)
		if out, err := so.run(t, key, "status"); err == nil {
			t.Errorf("status with the %s key:\n%s", k, out)
		}
		if out, err := so.run(t, key, "logs", "acme", "network", "--no-wait"); err == nil {
			t.Errorf("logs with the %s key:\n%s", k, out)
		}
	}
	if out, _ := so.run(t, so.op, "requests", "--install", "acme", "-o", "json"); strings.Count(out, `"id"`) != 2 {
		t.Errorf("an untrusted key filed a request:\n%s", out)
	}
	// --repo wins over $NUON_SERVER_URL; neither is an error that says so.
	if out, err := so.run(t, so.op, "status", "--repo", so.st.repo); err != nil || !strings.Contains(out, "acme") {
		t.Errorf("status --repo: %v\n%s", err, out)
	}
	cmd := exec.Command(so.st.nuon, "status")
	cmd.Env = append(cmd.Environ(), "NUON_SERVER_URL=")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "--server URL (or $NUON_SERVER_URL)") {
		t.Errorf("status with no tenant: %v\n%s", err, out)
	}
}

// BenchmarkLogsThroughServer is the round trip of `nuon logs` through
// nuon server with the agent's default interval (30s): the server checks
// main once an hour, so the request reaches the install at the agent's
// next poll, whenever the operator asks within its interval. Run with
// -benchtime=1x; each iteration is one request.
func BenchmarkLogsThroughServer(b *testing.B) {
	so := newServerOperator(b, "30s")
	for b.Loop() {
		t0 := time.Now()
		if out, err := so.run(b, so.op, "logs", "acme", "network", "--tail", "5"); err != nil {
			b.Fatalf("logs: %v\n%s", err, out)
		}
		b.ReportMetric(time.Since(t0).Seconds(), "s/request")
	}
}

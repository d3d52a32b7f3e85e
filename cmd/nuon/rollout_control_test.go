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

// TestRolloutPauseCLI: nuon rollout pause and resume through a real nuon
// server, with the operator's key from the environment; nuon rollout
// status on the repository then says who paused it. An untrusted key, an
// unknown channel and a second resume are refused with their reason.
func TestRolloutPauseCLI(t *testing.T) {
	st := newServerTenant(t)
	edit := func(file, old, new string) {
		t.Helper()
		p := filepath.Join(st.src, file)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), old) {
			t.Fatalf("%s lacks %q", file, old)
		}
		if err := os.WriteFile(p, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit("installs/acme.yaml", "channel: stable\n", "channel: stable\nlabels:\n  ring: canary\n")
	edit("channels/stable.yaml", "  dashboards: 1.1.0\n", "  dashboards: 1.1.0\n"+stableRollout)
	gittest.CommitDir(t, st.repo, "main", st.src, "stable rolls out in waves")
	srv := st.startServer(t)
	srv.waitReady(t, time.Minute)
	phase := func() string {
		out, err := gittest.Run(st.repo, nil, "show", schemas.RolloutRef("stable")+":"+schemas.RolloutStateFile)
		if err != nil {
			return ""
		}
		var s schemas.RolloutState
		json.Unmarshal([]byte(out), &s)
		return s.Phase + "/" + s.Decision.Kind
	}
	waitFor(t, "the controller's baseline", time.Minute, srv.log.String, func() bool { return phase() == "finished/baseline" })
	edit("channels/stable.yaml", "database: 1.0.0", "database: 1.1.0")
	gittest.CommitDir(t, st.repo, "main", st.src, "stable: database 1.1.0")
	waitFor(t, "the rollout to start", time.Minute, srv.log.String, func() bool { return phase() == "running/started" })

	run := func(key string, args ...string) (string, error) {
		cmd := exec.Command(st.nuon, args...)
		cmd.Env = append(append(cmd.Environ(), st.env...), "NUON_SERVER_URL="+srv.url, "NUON_OPERATOR_KEY="+key)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	op := filepath.Join(st.keys, "operator")
	out, err := run(op, "rollout", "pause", "stable", "--reason", "error rate up", "-o", "json")
	if err != nil {
		t.Fatalf("pause: %v\n%s\n%s", err, out, srv.log.String())
	}
	var a struct{ Phase, By, Commit, Request string }
	if err := json.Unmarshal([]byte(out), &a); err != nil || a.Phase != schemas.RolloutPaused || !strings.HasPrefix(a.By, "support (op") {
		t.Fatalf("pause answer: %v %s", err, out)
	}
	waitFor(t, "the pause upstream", time.Minute, srv.log.String, func() bool { return phase() == "paused/paused" })
	status, err := exec.Command(st.nuon, "rollout", "status", "stable", "--repo", st.repo, "--trust", st.trust, "--cache-dir", filepath.Join(st.work, "cache")).CombinedOutput()
	if err != nil || !strings.Contains(string(status), "rollout 1 PAUSED") || !strings.Contains(string(status), "paused by support (key op") ||
		!strings.Contains(string(status), a.Request[:12]) || !strings.Contains(string(status), "error rate up") {
		t.Fatalf("status: %v\n%s", err, status)
	}
	// The same through the server, with the operator's key.
	if via, err := run(op, "rollout", "status", "stable", "--trust", st.trust); err != nil || !strings.Contains(via, "rollout 1 PAUSED") || !strings.Contains(via, "paused by support (key op") {
		t.Fatalf("status through the server: %v\n%s", err, via)
	}
	if via, err := run(filepath.Join(st.keys, "acme"), "rollout", "status", "stable", "--trust", st.trust); err == nil || !strings.Contains(via, "not trusted for requests") {
		t.Fatalf("status through the server with an install's key: %v\n%s", err, via)
	}

	for _, tc := range []struct {
		key  string
		args []string
		want string
	}{
		{filepath.Join(st.keys, "acme"), []string{"rollout", "pause", "stable"}, "not trusted for requests"},
		{op, []string{"rollout", "pause", "nosuch"}, "channel nosuch has no rollout"},
		{op, []string{"rollout", "pause", "beta"}, "channel beta has no rollout"},
		{op, []string{"rollout", "pause", "stable"}, "only a running rollout pauses"},
		{op, []string{"rollout", "resume"}, "accepts 1 arg"},
		{op, []string{"rollout", "pause", "stable", "--repo", st.repo}, "--repo: nuon rollout pause goes through the tenant server"},
	} {
		if out, err := run(tc.key, tc.args...); err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%v: %v %s, want %q", tc.args, err, out, tc.want)
		}
	}
	out, err = run(op, "rollout", "resume", "stable")
	if err != nil || !strings.Contains(out, "rollout 1 of stable is running") {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	if out, err := run(op, "rollout", "resume", "stable"); err == nil || !strings.Contains(out, "only a paused rollout resumes") {
		t.Errorf("second resume: %v %s", err, out)
	}
}

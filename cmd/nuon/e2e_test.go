package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// The end-to-end tests run the real binary, as a person or the agent's
// Deployment would.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// nuonBinary builds cmd/nuon once per test binary.
func nuonBinary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nuon-e2e-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "nuon")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = &buildError{out: string(out), err: err}
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return binPath
}

// agentBinary builds cmd/nuon-agent beside the nuon binary, where it finds
// nuon to run jobs with.
func agentBinary(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(filepath.Dir(nuonBinary(tb)), "nuon-agent")
	if out, err := exec.Command("go", "build", "-o", bin, "../nuon-agent").CombinedOutput(); err != nil {
		tb.Fatalf("go build nuon-agent: %v\n%s", err, out)
	}
	return bin
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return "go build: " + e.err.Error() + "\n" + e.out }

// nuon runs the binary and returns its stdout; the test fails on a
// non-zero exit unless wantCode says otherwise.
func nuon(tb testing.TB, env []string, wantCode int, args ...string) string {
	tb.Helper()
	cmd := exec.Command(nuonBinary(tb), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		tb.Fatal(err)
	}
	if code != wantCode {
		tb.Fatalf("nuon %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, wantCode, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// TestEndToEnd renders the sample tenant over a real smart-HTTP git server,
// runs the acme agent binary, which applies the terraform components with
// the real terraform, reads `nuon status --output json`, then promotes a
// version and checks that only that component's job runs.
func TestEndToEnd(t *testing.T) {
	env := e2eEnv(t)
	root := repoRoot()
	srv := gittest.NewServer(t)
	bare := srv.InitBare(t, "tenant.git")
	src, trust := commitTenant(t, bare, nil)
	url := srv.URL("tenant.git")
	keys := filepath.Join(root, "fixtures", "keys")
	work := t.TempDir()
	cache := "--cache-dir=" + filepath.Join(work, "cache")

	nuon(t, env, 0, "render", "--repo", url, "--key", filepath.Join(keys, "render"), cache)
	out := nuon(t, env, 0, "verify", "--repo", url, "--install", "acme", "--trust", trust, "-o", "json", cache)
	var v struct {
		Verified   bool  `json:"verified"`
		Generation int64 `json:"generation"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || !v.Verified || v.Generation != 1 {
		t.Fatalf("verify: %s (%v)", out, err)
	}
	agentArgs := []string{"agent", "--once", "--repo", url, "--install", "acme", "--trust", trust,
		"--key", filepath.Join(keys, "acme"), "--workdir", filepath.Join(work, "acme"),
		"--artifacts", fixtureLayout(t), "-o", "json"}

	// Without the vendor's key the agent verifies no artifact, so it
	// applies nothing that has one.
	var refused struct {
		Jobs   []schemas.Job  `json:"jobs"`
		Status schemas.Status `json:"status"`
	}
	if err := json.Unmarshal([]byte(nuon(t, env, 0, agentArgs...)), &refused); err != nil {
		t.Fatal(err)
	}
	if len(refused.Jobs) != 0 {
		t.Errorf("jobs ran without a vendor key: %+v", refused.Jobs)
	}
	for _, c := range []string{"network", "api-image"} {
		if cs := refused.Status.Components[c]; cs.Phase != "Failed" || !strings.Contains(cs.Error, "no vendor artifact key") {
			t.Errorf("%s without a vendor key: %s %q", c, cs.Phase, cs.Error)
		}
	}

	// Told to, it deploys unverified artifacts from the local layout, and
	// its status says so.
	agentArgs = append(agentArgs, "--insecure-skip-artifact-verification")
	nuon(t, env, 0, agentArgs...)

	rows := statusJSON(t, env, url, cache)
	if len(rows) != 1 || rows[0].Install != "acme" || !rows[0].Verified || rows[0].Artifacts != "Unverified" {
		t.Fatalf("status rows: %+v", rows)
	}
	if table := nuon(t, env, 0, "status", "--repo", url, cache); !strings.Contains(table, "UNVERIFIED") {
		t.Errorf("nuon status does not flag the unverified agent:\n%s", table)
	}
	phases := map[string]string{}
	for _, c := range rows[0].Components {
		phases[c.Name] = c.Phase
	}
	want := map[string]string{"network": "Applied", "database": "Applied", "api-image": "Unsupported", "api": "Blocked", "dashboards": "Blocked"}
	for name, phase := range want {
		if phases[name] != phase {
			t.Errorf("%s: %s, want %s", name, phases[name], phase)
		}
	}
	status := gittest.Git(t, bare, "show", "refs/heads/nuon/status/acme:status.json")
	if strings.Contains(status, "e2e-license-77") || strings.Contains(gittest.Git(t, bare, "log", "-p", "refs/heads/nuon/status/acme"), "e2e-license-77") {
		t.Fatal("a secret reached git")
	}
	if !strings.Contains(status, `"endpoint": "shop-acme.vpc-`) {
		t.Errorf("database endpoint output missing:\n%s", status)
	}

	// Promotion: database 1.1.0 on stable.
	stable := filepath.Join(src, "channels", "stable.yaml")
	b, _ := os.ReadFile(stable)
	if err := os.WriteFile(stable, bytes.Replace(b, []byte("database: 1.0.0"), []byte("database: 1.1.0"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.CommitDir(t, bare, "main", src, "promote database")
	nuon(t, env, 0, "render", "--repo", url, "--key", filepath.Join(keys, "render"), cache)
	var rep struct {
		Jobs   []schemas.Job  `json:"jobs"`
		Status schemas.Status `json:"status"`
	}
	if err := json.Unmarshal([]byte(nuon(t, env, 0, agentArgs...)), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Jobs) != 1 || rep.Jobs[0].Component != "database" || rep.Jobs[0].Operation != "update" || rep.Jobs[0].Version != "1.1.0" {
		t.Errorf("jobs after promotion: %+v", rep.Jobs)
	}
	if rep.Status.Generation != 2 {
		t.Errorf("generation %d, want 2", rep.Status.Generation)
	}
}

type statusRow struct {
	Install    string `json:"install"`
	Phase      string `json:"phase"`
	Verified   bool   `json:"verified"`
	Artifacts  string `json:"artifacts"`
	Components []struct {
		Name  string `json:"name"`
		Phase string `json:"phase"`
	} `json:"components"`
}

func statusJSON(t *testing.T, env []string, url, cache string) []statusRow {
	t.Helper()
	var rows []statusRow
	out := nuon(t, env, 0, "status", "--repo", url, "-o", "json", cache)
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("status json: %v\n%s", err, out)
	}
	return rows
}

package main

import (
	"bytes"
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

// TestOperateEndToEnd runs the binaries on loopback (a real smart-HTTP
// git server, the real terraform) through what an operator and a
// customer see between releases: a hand edit of a Terraform-managed file
// is found by a scheduled drift check and corrected; a log request and a
// debug command are answered in the status; a command off the allow-list
// is refused before it is filed; a key that trust/requests does not list files nothing; a
// request for another install never reaches this one; and an agent that
// stops is shown Unreachable once its heartbeat is late.
func TestOperateEndToEnd(t *testing.T) {
	// The database component checks its drift every second and corrects it.
	ot := newOpsTenant(t, func(src string) {
		app := filepath.Join(src, "nuon.yaml")
		b, _ := os.ReadFile(app)
		b = bytes.Replace(b, []byte("      license_key: ${secrets.license_key}\n    outputs: [endpoint]\n"),
			[]byte("      license_key: ${secrets.license_key}\n    outputs: [endpoint]\n    drift: {mode: correct, schedule: 1s}\n"), 1)
		if err := os.WriteFile(app, b, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	bare, url, keys, work, env, cache := ot.bare, ot.url, ot.keys, ot.work, ot.env, ot.cache
	render := func() { ot.render(t) }
	agentArgs := append(ot.agentArgs(t), "--once", "--heartbeat", "3s", "-o", "json")
	agent := func() schemas.Status {
		var rep struct {
			Status schemas.Status `json:"status"`
		}
		if err := json.Unmarshal([]byte(nuon(t, env, 0, agentArgs...)), &rep); err != nil {
			t.Fatal(err)
		}
		return rep.Status
	}
	render()
	if st := agent(); st.Components["database"].Phase != schemas.PhaseApplied {
		t.Fatalf("database not applied: %+v", st.Components["database"])
	}

	// Drift: a hand edit of the file terraform manages.
	files, _ := filepath.Glob(filepath.Join(work, "acme", "components", "database", "data", "*.json"))
	if len(files) != 1 {
		t.Fatalf("the database's file: %v", files)
	}
	orig, _ := os.ReadFile(files[0])
	if err := os.WriteFile(files[0], []byte(`{"edited":"by hand"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	st := agent()
	db := st.Components["database"]
	if len(db.Drift) == 0 || !db.Corrected || db.Drift[0].Address != "local_file.config" {
		t.Fatalf("database drift: %+v", db)
	}
	if now, _ := os.ReadFile(files[0]); !bytes.Equal(now, orig) {
		t.Errorf("the file was not corrected:\n%s", now)
	}
	var rows []struct {
		Install    string `json:"install"`
		State      string `json:"state"`
		Drifted    int    `json:"drifted"`
		Components []struct {
			Name      string `json:"name"`
			Corrected bool   `json:"corrected"`
		} `json:"components"`
	}
	if err := json.Unmarshal([]byte(nuon(t, env, 0, "status", "--repo", url, "-o", "json", cache)), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Drifted != 1 {
		t.Errorf("status after the correction: %+v", rows)
	}
	if text := nuon(t, env, 0, "status", "--repo", url, cache); !strings.Contains(text, "database(drift 1 corrected)") {
		t.Errorf("nuon status does not show the drift:\n%s", text)
	}

	// Requests.
	op := filepath.Join(keys, "initech")
	req := func(args ...string) string {
		full := append([]string{}, args...)
		// Flags go before "--": after it every word is the command's.
		at := len(full)
		for i, a := range full {
			if a == "--" {
				at = i
				break
			}
		}
		full = append(append(append([]string{}, full[:at]...), "--repo", url, "--key", op, "--no-wait", cache), full[at:]...)
		return strings.TrimSpace(nuon(t, env, 0, full...))
	}
	logsID := req("logs", "acme", "database", "--tail", "20")
	debugID := req("debug", "acme", "--component", "database", "--", "state", "list")
	otherID := req("logs", "globex", "network")
	// A command off the allow-list is refused before anything is filed
	// (the agent refuses it too: agent's TestRequestsAnswered).
	filed := requestsCount(t, bare)
	if out := nuonErr(t, env, "debug", "acme", "--component", "database", "--repo", url, "--key", op, "--no-wait", cache, "--", "sh", "-c", "cat /etc/passwd"); !strings.Contains(out, `"sh -c cat /etc/passwd" is not an allowed debug command;`) || !strings.Contains(out, "state list") {
		t.Errorf("a shell command:\n%s", out)
	}
	// Another plugin's command, judged by the component's type in acme's
	// rendered state.
	if out := nuonErr(t, env, "debug", "acme", "--component", "database", "--repo", url, "--key", op, "--no-wait", cache, "--", "get", "pods"); !strings.Contains(out, `"get pods" is not an allowed debug command for a terraform component`) {
		t.Errorf("a Kubernetes command for a terraform component:\n%s", out)
	}
	if n := requestsCount(t, bare); n != filed {
		t.Errorf("a refused command filed a request: %d requests, want %d", n, filed)
	}
	if out := nuonErr(t, env, "logs", "acme", "database", "--repo", url, "--key", filepath.Join(keys, "globex"), "--no-wait", cache); !strings.Contains(out, "not in trust/requests on main") {
		t.Errorf("an untrusted key filed a request:\n%s", out)
	}
	render()
	st = agent()
	if rs := st.Requests[logsID]; rs.State != schemas.RequestAnswered {
		t.Errorf("logs: %+v", rs)
	}
	if rs := st.Requests[debugID]; rs.State != schemas.RequestAnswered {
		t.Errorf("debug: %+v", rs)
	} else if ans := gittest.Git(t, bare, "show", schemas.StatusRef("acme")+":"+rs.Answer); !strings.Contains(ans, "local_file.config") {
		t.Errorf("state list answer:\n%s", ans)
	}
	if _, ok := st.Requests[otherID]; ok {
		t.Errorf("globex's request reached acme")
	}
	var listed []struct {
		ID, Install, State, Reason string
	}
	if err := json.Unmarshal([]byte(nuon(t, env, 0, "requests", "--repo", url, "-o", "json", cache)), &listed); err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, l := range listed {
		states[l.ID] = l.State
	}
	want := map[string]string{logsID: "answered", debugID: "answered", otherID: "pending"}
	for id, s := range want {
		if states[id] != s {
			t.Errorf("nuon requests: %s %s, want %s (%v)", id, states[id], s, states)
		}
	}
	if strings.Contains(gittest.Git(t, bare, "log", "-p", "--all"), "e2e-license-77") {
		t.Fatal("a secret reached git")
	}

	// A request waited for: filed, rendered, answered, printed.
	cmd := exec.Command(nuonBinary(t), "logs", "acme", "network", "--repo", url, "--key", op, "--poll", "200ms", cache)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(gittest.Git(t, bare, "for-each-ref", "refs/heads/nuon/requests"), "commit") || requestsCount(t, bare) < filed+1 {
		if time.Now().After(deadline) {
			t.Fatal("nuon logs filed nothing")
		}
		time.Sleep(100 * time.Millisecond)
	}
	render()
	agent()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(out.String(), "job") {
			t.Fatalf("nuon logs: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("nuon logs printed no answer:\n%s", out.String())
	}

	// The agent stops: its heartbeat (3s) goes late.
	if r := statusState(t, env, url, cache); r != schemas.InstallReady && r != schemas.InstallDegraded {
		t.Errorf("state right after a pass: %s", r)
	}
	time.Sleep(7 * time.Second)
	if r := statusState(t, env, url, cache); r != "Unreachable" {
		t.Errorf("state after the heartbeat is late: %s, want Unreachable", r)
	}
}

// opsTenant is the sample tenant on a smart-HTTP git server with alice
// (fixtures/keys/initech.pub) trusted in trust/requests on main, for the
// tests and benchmarks of log and debug requests.
type opsTenant struct {
	bare         string   // the tenant repository, served at url
	url          string   //
	keys         string   // fixtures/keys
	work         string   // the test's folder; the agent's workdir is in it
	trust        string   // allowed_signers that trusts the renderer's key
	requestTrust string   // allowed_signers that trusts alice's requests
	env          []string // the binaries' environment: terraform's CLI config, the license secret
	cache        string   // the --cache-dir flag of nuon render, status and requests
}

// newOpsTenant commits the sample tenant with trust/requests as main,
// after edit (when not nil) changed the tree. It needs terraform
// (testenv.TerraformConfig).
func newOpsTenant(tb testing.TB, edit func(src string)) *opsTenant {
	tb.Helper()
	srv := gittest.NewServer(tb)
	ot := &opsTenant{bare: srv.InitBare(tb, "tenant.git"), url: srv.URL("tenant.git"),
		keys: filepath.Join(repoRoot(), "fixtures", "keys"), work: tb.TempDir()}
	operator, _ := os.ReadFile(filepath.Join(ot.keys, "initech.pub"))
	_, ot.trust = commitTenant(tb, ot.bare, func(src string) {
		if edit != nil {
			edit(src)
		}
		if err := os.MkdirAll(filepath.Join(src, "trust"), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, "trust", "requests"), []byte("alice "+string(operator)), 0o644); err != nil {
			tb.Fatal(err)
		}
	})
	ot.requestTrust = filepath.Join(ot.work, "request_signers")
	if err := os.WriteFile(ot.requestTrust, []byte("alice "+string(operator)), 0o644); err != nil {
		tb.Fatal(err)
	}
	ot.env = e2eEnv(tb)
	ot.cache = "--cache-dir=" + filepath.Join(ot.work, "cache")
	return ot
}

// renderArgs renders main with the renderer's key.
func (ot *opsTenant) renderArgs() []string {
	return []string{"render", "--repo", ot.url, "--key", filepath.Join(ot.keys, "render"), ot.cache}
}

func (ot *opsTenant) render(tb testing.TB) { nuon(tb, ot.env, 0, ot.renderArgs()...) }

// agentArgs runs acme's agent with alice's requests trusted and the
// fixture modules' artifacts unverified.
func (ot *opsTenant) agentArgs(tb testing.TB) []string {
	return []string{"agent", "--repo", ot.url, "--install", "acme", "--trust", ot.trust, "--request-trust", ot.requestTrust,
		"--key", filepath.Join(ot.keys, "acme"), "--workdir", filepath.Join(ot.work, "acme"),
		"--artifacts", fixtureLayout(tb), "--insecure-skip-artifact-verification"}
}

func requestsCount(t *testing.T, bare string) int {
	return len(strings.Fields(gittest.Git(t, bare, "rev-list", "refs/heads/nuon/requests")))
}

func statusState(t *testing.T, env []string, url, cache string) string {
	t.Helper()
	var rows []struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal([]byte(nuon(t, env, 0, "status", "--repo", url, "-o", "json", cache)), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("status: %v %+v", err, rows)
	}
	return rows[0].State
}

// nuonErr runs the binary expecting exit 1 and returns its stderr.
func nuonErr(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(nuonBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatalf("nuon %s succeeded", strings.Join(args, " "))
	}
	return stderr.String()
}

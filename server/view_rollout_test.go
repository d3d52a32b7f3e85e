package server_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// newViewEnv is newEnv with the fleet view on: a writer that renders and
// runs the rollout controller, whose pages need viewToken.
func newViewEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, log: &syncBuffer{}, keys: map[string]*signature.Signer{}, keyFiles: map[string]string{}}
	for _, n := range []string{"acme", "globex", "initech", "render"} {
		e.keys[n], e.keyFiles[n] = loadKey(t, n)
	}
	root := t.TempDir()
	e.upstream = filepath.Join(root, "upstream.git")
	gittest.InitBare(t, e.upstream)
	src := filepath.Join(root, "src")
	gittest.Git(t, "", "init", "--quiet", src)
	if err := os.CopyFS(src, os.DirFS(fixtureTenant)); err != nil {
		t.Fatal(err)
	}
	gittest.CommitDir(t, e.upstream, "main", src, "tenant")
	e.dir = filepath.Join(root, "served.git")
	gittest.InitBare(t, e.dir)
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	srv, err := server.New(ctx, server.Config{Dir: e.dir, RenderKey: e.keys["render"], Upstream: e.upstream,
		PollInterval: time.Hour, MirrorDelay: 10 * time.Millisecond, ViewToken: viewToken,
		Logger: slog.New(slog.NewTextHandler(e.log, nil)), HookSecret: testHookSecret})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	if err := srv.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	e.http = httptest.NewServer(srv)
	t.Cleanup(func() {
		e.http.Close()
		cancel()
		<-done
		srv.Close()
		if t.Failed() {
			t.Logf("server log:\n%s", e.log.String())
		}
	})
	return e
}

// TestFleetViewRollouts: stable rolls out to its canary, acme; the
// rollouts page shows it running with the open wave judged; acme
// reports its database failing with an error that holds a script; the
// controller halts, and the channel's page shows the halt, the failing
// wave's counts, acme's status commit as evidence and its error as
// text, and the decisions of the rollout ref.
func TestFleetViewRollouts(t *testing.T) {
	e := newViewEnv(t)
	startCanary(t, e, "1h")

	list := page(t, e.http, "/fleet/rollouts")
	for _, want := range []string{
		`<tr data-channel="stable" data-phase="running">`,
		`<a href="/fleet/rollouts/stable">stable</a>`,
		`database 1.0.0 → <span class="behind">1.1.0</span>`,
		`<td>1 of 2</td>`,
		`<span class="ok">0 healthy</span> · <span>0 failed</span> · 0 deferred · 1 waiting`,
	} {
		if !strings.Contains(list, want) {
			t.Errorf("/fleet/rollouts lacks %s", want)
		}
	}
	if fl := page(t, e.http, "/fleet"); !strings.Contains(fl, `<a href="/fleet/rollouts">`) {
		t.Error("/fleet does not link to the rollouts")
	}
	running := page(t, e.http, "/fleet/rollouts/stable")
	for _, want := range []string{
		`<tr data-wave="1" data-stand="open"><td>1</td><td>canary</td><td>open</td><td class="n">1</td>`,
		`<tr data-wave="2" data-stand="not opened">`,
		`<tr data-install="acme" data-outcome="waiting">`,
	} {
		if !strings.Contains(running, want) {
			t.Errorf("running rollout page lacks %s", want)
		}
	}

	// An operator pauses and resumes it: each page names who, by the
	// signed request it kept.
	op, _ := loadKey(t, "operator")
	for _, step := range []struct{ action, phase, id string }{
		{schemas.RolloutPause, schemas.RolloutPaused, "r-pause-1"},
		{schemas.RolloutResume, schemas.RolloutRunning, "r-resume-1"},
	} {
		req, commit := rolloutRequest(t, op, "support", "stable", step.action, step.id, time.Now())
		if code, out := e.postRollout(op, req); code != http.StatusOK {
			t.Fatalf("%s: %d %s", step.action, code, out)
		}
		p := page(t, e.http, "/fleet/rollouts/stable")
		for _, want := range []string{
			`<span class="phase phase-` + step.phase + `">` + step.phase + `</span></h1>`,
			`request ` + step.id + ` signed by support (key `,
			`<code>` + commit[:10] + `</code>`,
		} {
			if !strings.Contains(p, want) {
				t.Errorf("after %s the rollout page lacks %s", step.action, want)
			}
		}
	}

	desired := e.serverRef(schemas.InstallRef("acme"))
	status, _ := json.Marshal(schemas.Status{APIVersion: schemas.APIVersion, Kind: "Status", Install: "acme", Desired: desired, Applied: desired,
		Phase: schemas.InstallDegraded, Components: map[string]schemas.ComponentStatus{
			"database": {Phase: schemas.PhaseFailed, Error: "terraform apply: engine version 1.1.0 not available " + injected}}})
	local := localRepo(t)
	c := e.statusCommit(local, "acme", "", e.keyFiles["acme"], string(status))
	e.mustGit(local, "push", "--quiet", e.proxy("acme", e.keys["acme"]), c+":"+schemas.StatusRef("acme"))
	e.waitDecision(schemas.DecisionHalted)

	halted := page(t, e.http, "/fleet/rollouts/stable")
	for _, want := range []string{
		`<h1>Rollout of stable <span class="phase phase-halted">halted</span></h1>`,
		`<dd id="by">controller</dd>`,
		`<tr data-wave="1" data-stand="stopped"><td>1</td><td>canary</td><td>stopped</td><td class="n">1</td>`,
		`<td class="n bad">1</td>`,
		`<tr data-install="acme" data-outcome="failed"><td><a href="/fleet/installs/acme">acme</a></td><td><span class="outcome-failed">failed</span></td><td><code title="` + c + `">` + c[:10] + `</code>`,
		`engine version 1.1.0 not available &lt;script&gt;`,
		`nuon: rollout stable: halted wave 1 (canary)`,
		`nuon: rollout stable: started wave 1 (canary)`,
		`nuon: rollout stable: baseline`,
	} {
		if !strings.Contains(halted, want) {
			t.Errorf("halted rollout page lacks %s", want)
		}
	}
	if os.Getenv("NUON_VIEW_DUMP") != "" {
		t.Log(halted)
	}
	if strings.Contains(halted, injected) {
		t.Error("the halted rollout page holds acme's error unescaped")
	}
	if n := strings.Count(page(t, e.http, "/fleet/rollouts"), `data-phase="halted"`); n != 1 {
		t.Errorf("/fleet/rollouts shows %d halted rollouts, want 1", n)
	}
}

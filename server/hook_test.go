package server_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/server"
)

// testHookSecret is the webhook secret of newEnv's server.
const testHookSecret = "a webhook secret for the tests"

// hook posts /hooks/main as GitHub does, signed with the test secret,
// and wants it accepted.
func (e *env) hook() {
	e.t.Helper()
	body := `{"ref":"refs/heads/main"}`
	if code := postHook(e.t, e.http.URL, body, map[string]string{"X-Hub-Signature-256": server.SignHook(testHookSecret, []byte(body))}); code != http.StatusAccepted {
		e.t.Fatalf("webhook answered %d, want %d", code, http.StatusAccepted)
	}
}

func postHook(t testing.TB, base, body string, header map[string]string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/hooks/main", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestWebhookSignature: /hooks/main checks the git host's proof that it
// sent the hook, GitHub's HMAC of the body or GitLab's token; anything
// else is refused, logged and counted, and makes no check of main.
func TestWebhookSignature(t *testing.T) {
	e := newEnv(t)
	body := `{"ref":"refs/heads/main"}`
	for _, tc := range []struct {
		name   string
		body   string
		header map[string]string
		want   int
	}{
		{"no signature", body, nil, http.StatusUnauthorized},
		{"another secret", body, map[string]string{"X-Hub-Signature-256": server.SignHook("not the secret", []byte(body))}, http.StatusUnauthorized},
		{"another body", `{"ref":"refs/heads/evil"}`, map[string]string{"X-Hub-Signature-256": server.SignHook(testHookSecret, []byte(body))}, http.StatusUnauthorized},
		{"sha1 name", body, map[string]string{"X-Hub-Signature-256": strings.Replace(server.SignHook(testHookSecret, []byte(body)), "sha256", "sha1", 1)}, http.StatusUnauthorized},
		{"not hex", body, map[string]string{"X-Hub-Signature-256": "sha256=zz"}, http.StatusUnauthorized},
		{"short", body, map[string]string{"X-Hub-Signature-256": server.SignHook(testHookSecret, []byte(body))[:20]}, http.StatusUnauthorized},
		{"wrong gitlab token", body, map[string]string{"X-Gitlab-Token": "not the secret"}, http.StatusUnauthorized},
		{"gitlab token prefix", body, map[string]string{"X-Gitlab-Token": testHookSecret[:5]}, http.StatusUnauthorized},
		{"github", body, map[string]string{"X-Hub-Signature-256": server.SignHook(testHookSecret, []byte(body))}, http.StatusAccepted},
		{"gitlab", body, map[string]string{"X-Gitlab-Token": testHookSecret}, http.StatusAccepted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := scrape(t, e.http.URL+"/metrics")[`nuon_server_refusals_total{reason="hook_signature"}`]
			if got := postHook(t, e.http.URL, tc.body, tc.header); got != tc.want {
				t.Fatalf("answered %d, want %d", got, tc.want)
			}
			after := scrape(t, e.http.URL+"/metrics")[`nuon_server_refusals_total{reason="hook_signature"}`]
			if refused := tc.want != http.StatusAccepted; refused != (after == before+1) {
				t.Errorf("refusals counted %v → %v", before, after)
			}
		})
	}
	if !strings.Contains(e.log.String(), "webhook refused") {
		t.Errorf("refusals not logged:\n%s", e.log.String())
	}
}

// TestWebhookNoSecret: without a secret the hook is refused, unless the
// operator asked for it open.
func TestWebhookNoSecret(t *testing.T) {
	dir := t.TempDir()
	gittest.InitBare(t, dir)
	for _, tc := range []struct {
		open bool
		want int
	}{{false, http.StatusUnauthorized}, {true, http.StatusAccepted}} {
		srv, err := server.New(context.Background(), server.Config{Dir: dir, HookOpen: tc.open})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv)
		if got := postHook(t, hs.URL, "{}", nil); got != tc.want {
			t.Errorf("HookOpen %v: answered %d, want %d", tc.open, got, tc.want)
		}
		hs.Close()
		srv.Close()
	}
}

// TestWebhookBurst: a thousand signed hooks at once make one check of
// main at once and none more until HookInterval has passed.
func TestWebhookBurst(t *testing.T) {
	e := newEnv(t)
	// A server of its own on the same repository, with an interval no
	// test outlasts: the count cannot depend on the machine's speed.
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, server.Config{Dir: e.dir, PollInterval: time.Hour, HookSecret: testHookSecret, HookInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(e.log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	t.Cleanup(func() { hs.Close(); cancel(); <-done; srv.Close() })
	checks := func() float64 {
		var n float64
		for k, v := range scrape(t, hs.URL+"/metrics") {
			if strings.HasPrefix(k, "nuon_server_main_polls_total") {
				n += v
			}
		}
		return n
	}
	waitChecks := func(n float64) {
		deadline := time.Now().Add(30 * time.Second)
		for checks() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%v checks of main, want %v", checks(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitChecks(1) // Run's first
	body := `{"ref":"refs/heads/main"}`
	sig := map[string]string{"X-Hub-Signature-256": server.SignHook(testHookSecret, []byte(body))}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for range 1000 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if got := postHook(t, hs.URL, body, sig); got != http.StatusAccepted {
				t.Errorf("hook answered %d", got)
			}
		}()
	}
	wg.Wait()
	waitChecks(2) // the burst's first hook checks at once
	time.Sleep(200 * time.Millisecond)
	if n := checks(); n != 2 {
		t.Fatalf("1,000 hooks made %v checks of main, want 1", n-1)
	}
}

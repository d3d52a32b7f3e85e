package agent_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/gitauth"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// TestConvergeOverSSH: the agent polls, fetches and pushes its status over
// SSH to Debian's sshd, with a key and known_hosts, at protocol version 2.
func TestConvergeOverSSH(t *testing.T) {
	tn := newTenant(t)
	sshd := gittest.NewSSHServer(t, tn.srv.Root)
	auth, err := gitauth.Options{SSHKey: sshd.ClientKey, KnownHosts: sshd.KnownHosts}.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	a := tn.agent("acme", func(c *agent.Config) {
		c.Remote = agent.NewRemote(sshd.URL("tenant.git"), agent.WithGitAuth(auth), agent.WithRemoteLogger(log))
	})
	rep := a.reconcile(t)
	if rep.Status.Phase != schemas.InstallReady || !rep.Pushed {
		t.Fatalf("phase %s, pushed %v; want Ready and pushed", rep.Status.Phase, rep.Pushed)
	}
	if got := tn.git("rev-parse", schemas.StatusRef("acme")); got != rep.StatusCommit.String() {
		t.Fatalf("server status ref = %s, want %s", got, rep.StatusCommit)
	}
	tn.git("fsck", "--strict", "--no-dangling")
	// Idle: one small poll, nothing fetched, the status ref stays.
	sshd.ResetWire()
	idle := a.reconcile(t)
	if !idle.Idle || len(idle.Jobs) != 0 {
		t.Errorf("second reconcile: idle %v, %d jobs", idle.Idle, len(idle.Jobs))
	}
	if got := tn.git("rev-parse", schemas.StatusRef("acme")); got != rep.StatusCommit.String() {
		t.Errorf("idle poll moved the status ref to %s", got)
	}
	if sent, recv, _ := sshd.Wire(); sent+recv > 3000 {
		t.Errorf("idle poll moved %d+%d bytes over SSH, want a small exchange", sent, recv)
	}
	if strings.Contains(logs.String(), "version 0") {
		t.Errorf("warned about protocol version 0 on a version 2 server:\n%s", logs.String())
	}
}

// countingTransport counts the requests it carries.
type countingTransport struct{ n atomic.Int64 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// TestRemoteHTTPAuth: over HTTP with a token, every request (ls-refs,
// fetch, push) goes through the caller's http.Client, and the token shows
// nowhere in the logs.
func TestRemoteHTTPAuth(t *testing.T) {
	const token = "tok-9a8b7c6d5e"
	tn := newTenant(t)
	tn.srv.RequireToken(token)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	none := tn.agent("acme", func(c *agent.Config) {
		c.Remote = agent.NewRemote(tn.srv.URL("tenant.git"), agent.WithRemoteLogger(log))
		c.Logger = log
	})
	if _, err := none.Reconcile(t.Context()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("reconcile without a token: %v, want a 401", err)
	}

	auth, err := gitauth.Options{}.Load(func(k string) string { return map[string]string{gitauth.EnvToken: token}[k] })
	if err != nil {
		t.Fatal(err)
	}
	rt := &countingTransport{}
	tn.srv.Reset()
	a := tn.agent("acme", func(c *agent.Config) {
		c.Remote = agent.NewRemote(tn.srv.URL("tenant.git"), agent.WithGitAuth(auth), agent.WithHTTPClient(&http.Client{Transport: rt}), agent.WithRemoteLogger(log))
		c.Logger = log
	})
	rep := a.reconcile(t)
	if rep.Status.Phase != schemas.InstallReady || !rep.Pushed {
		t.Fatalf("phase %s, pushed %v; want Ready and pushed", rep.Status.Phase, rep.Pushed)
	}
	if got, want := rt.n.Load(), tn.srv.Requests(); got != want || got == 0 {
		t.Errorf("%d requests through the caller's client, %d at the server; want all of them", got, want)
	}
	var pushed bool
	for _, r := range tn.srv.Log() {
		pushed = pushed || strings.HasSuffix(r.Path, "/git-receive-pack")
		if r.Status != http.StatusOK {
			t.Errorf("request %s %s: status %d", r.Method, r.Path, r.Status)
		}
	}
	if !pushed {
		t.Errorf("no receive-pack request in %v", tn.srv.Log())
	}
	if strings.Contains(logs.String(), token) {
		t.Errorf("the token is in the logs:\n%s", logs.String())
	}
}

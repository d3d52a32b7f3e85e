package server_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gitauth"
	"nuon.dev/nuon/internal/gitproto"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

const upstreamToken = "tok-upstream-7d2e9b41c0"

// secretFile writes a secret into a file of its own, readable by its
// owner only.
func secretFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// commitTenant commits the sample tenant as main of the bare repository
// dir.
func commitTenant(t *testing.T, dir string) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	if err := os.CopyFS(src, os.DirFS(fixtureTenant)); err != nil {
		t.Fatal(err)
	}
	gittest.CommitDir(t, dir, "main", src, "tenant")
}

// followPrivate runs a server that follows upstream with auth: it fetches
// and renders main, and mirrors the rendered refs back into upstreamDir,
// the repository behind upstream.
func followPrivate(t *testing.T, upstream, upstreamDir string, auth *gitauth.Auth) {
	t.Helper()
	render, _ := loadKey(t, "render")
	dir := filepath.Join(t.TempDir(), "served.git")
	gittest.InitBare(t, dir)
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, server.Config{Dir: dir, RenderKey: render, Upstream: upstream, UpstreamAuth: auth,
		PollInterval: time.Hour, MirrorDelay: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	defer func() { cancel(); <-done; srv.Close() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		want, _ := gittest.Run(dir, nil, "rev-parse", "--verify", "--quiet", schemas.RenderedRef)
		acme, _ := gittest.Run(dir, nil, "rev-parse", "--verify", "--quiet", schemas.InstallRef("acme"))
		got, _ := gittest.Run(upstreamDir, nil, "rev-parse", "--verify", "--quiet", schemas.RenderedRef)
		gotAcme, _ := gittest.Run(upstreamDir, nil, "rev-parse", "--verify", "--quiet", schemas.InstallRef("acme"))
		if want != "" && got == want && gotAcme == acme {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rendered %q, upstream has %q; log:\n%s", want, got, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Contains(logs.String(), upstreamToken) {
		t.Errorf("the log shows the token:\n%s", logs.String())
	}
}

// refusedUpstream checks that a server with a wrong credential fails to
// fetch main with an error that names the upstream and says it refused
// the credentials, and that neither the error nor the log shows a secret.
func refusedUpstream(t *testing.T, upstream string, auth *gitauth.Auth, secrets ...string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "served.git")
	gittest.InitBare(t, dir)
	var logs syncBuffer
	srv, err := server.New(context.Background(), server.Config{Dir: dir, Upstream: upstream, UpstreamAuth: auth,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	err = srv.Sync(context.Background())
	if err == nil {
		t.Fatal("fetched main with a wrong credential")
	}
	t.Logf("error: %v", err)
	if want := "fetch main from upstream " + gitproto.Redact(upstream) + ": it refused the credentials"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) || strings.Contains(logs.String(), s) {
			t.Errorf("a secret is shown:\nerror: %v\nlog: %s", err, logs.String())
		}
	}
}

// TestPrivateUpstreamHTTP: an upstream on a git host that requires a
// token (git-http-backend behind a bearer check). The server follows it
// with the token from a file and mirrors back; with no or a wrong token it
// says the upstream refused the credentials.
func TestPrivateUpstreamHTTP(t *testing.T) {
	host := gittest.NewServer(t)
	upstreamDir := host.InitBare(t, "upstream.git")
	commitTenant(t, upstreamDir)
	host.RequireToken(upstreamToken)
	upstream := host.URL("upstream.git")

	auth, err := gitauth.Options{TokenFile: secretFile(t, upstreamToken)}.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	followPrivate(t, upstream, upstreamDir, auth)

	wrong, err := gitauth.Options{TokenFile: secretFile(t, "tok-wrong-55aa")}.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	refusedUpstream(t, upstream, wrong, upstreamToken, "tok-wrong-55aa")
	refusedUpstream(t, upstream, nil, upstreamToken)

	// Credentials in the URL are refused before anything runs.
	withUser := strings.Replace(upstream, "http://", "http://bot:"+upstreamToken+"@", 1)
	_, err = server.New(context.Background(), server.Config{Dir: filepath.Join(t.TempDir(), "x.git"), Upstream: withUser})
	if err == nil || !strings.Contains(err.Error(), "user information") || strings.Contains(err.Error(), upstreamToken) {
		t.Errorf("New with credentials in the upstream URL: %v", err)
	}
}

// TestPrivateUpstreamSSH: an upstream reached over SSH (Debian's sshd) with
// a key and known_hosts. The server follows it and mirrors back; with
// another key it says the upstream refused the credentials.
func TestPrivateUpstreamSSH(t *testing.T) {
	host := gittest.NewSSHServer(t, "")
	upstreamDir := host.InitBare(t, "upstream.git")
	commitTenant(t, upstreamDir)
	upstream := host.URL("upstream.git")

	auth, err := gitauth.Options{SSHKey: host.ClientKey, KnownHosts: host.KnownHosts}.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	followPrivate(t, upstream, upstreamDir, auth)

	_, otherPEM := gittest.NewSSHKey(t)
	wrong, err := gitauth.Options{SSHKey: secretFile(t, string(otherPEM)), KnownHosts: host.KnownHosts}.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	refusedUpstream(t, upstream, wrong, string(otherPEM))
}

package gitauth_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/internal/gitauth"
	"nuon.dev/nuon/internal/gitproto"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
)

const (
	token    = "tok-4f1c9e2b7a"
	password = "pw-88d1e0c3aa"
)

func file(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoad(t *testing.T) {
	_, pemKey := gittest.NewSSHKey(t)
	keyFile := file(t, string(pemKey))
	known := file(t, "")
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		name   string
		opts   gitauth.Options
		env    map[string]string
		header string // the Authorization header set on a request
		ssh    bool
		err    string
	}{
		{name: "none", header: ""},
		{name: "token file", opts: gitauth.Options{TokenFile: file(t, token+"\n")}, header: "Bearer " + token},
		{name: "token env", env: map[string]string{gitauth.EnvToken: token}, header: "Bearer " + token},
		{name: "token file wins", opts: gitauth.Options{TokenFile: file(t, token)}, env: map[string]string{gitauth.EnvToken: "other"}, header: "Bearer " + token},
		{name: "basic file", opts: gitauth.Options{Username: "agent", PasswordFile: file(t, password)}, header: "Basic YWdlbnQ6cHctODhkMWUwYzNhYQ=="},
		{name: "basic env", opts: gitauth.Options{Username: "agent"}, env: map[string]string{gitauth.EnvPassword: password}, header: "Basic YWdlbnQ6cHctODhkMWUwYzNhYQ=="},
		{name: "token and user", opts: gitauth.Options{Username: "agent"}, env: map[string]string{gitauth.EnvToken: token, gitauth.EnvPassword: password}, err: "not both"},
		{name: "user without password", opts: gitauth.Options{Username: "agent"}, err: "needs --git-password-file"},
		{name: "password without user", opts: gitauth.Options{PasswordFile: file(t, password)}, err: "needs --git-username"},
		{name: "empty token file", opts: gitauth.Options{TokenFile: file(t, "\n")}, err: "is empty"},
		{name: "missing token file", opts: gitauth.Options{TokenFile: "/nonexistent/token"}, err: "no such file"},
		{name: "ssh", opts: gitauth.Options{SSHKey: keyFile, KnownHosts: known}, ssh: true},
		{name: "bad ssh key", opts: gitauth.Options{SSHKey: file(t, "not a key"), KnownHosts: known}, err: "ssh key"},
		{name: "known hosts without key", opts: gitauth.Options{KnownHosts: known}, err: "needs --ssh-key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := tt.opts.Load(env(tt.env))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Load: %v, want an error saying %q", err, tt.err)
				}
				if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), password) {
					t.Errorf("error shows a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodGet, "https://git.example.com/", nil)
			a.SetHeader(req)
			if got := req.Header.Get("Authorization"); got != tt.header {
				t.Errorf("Authorization = %q, want %q", got, tt.header)
			}
			if (a.SSH() != nil) != tt.ssh {
				t.Errorf("SSH() = %v, want ssh %v", a.SSH(), tt.ssh)
			}
			var logs bytes.Buffer
			slog.New(slog.NewJSONHandler(&logs, nil)).Info("loaded", "auth", a)
			for _, s := range []string{a.String(), logs.String()} {
				if strings.Contains(s, token) || strings.Contains(s, password) || strings.Contains(s, "YWdlbnQ6") {
					t.Errorf("secret printed: %s", s)
				}
			}
		})
	}
}

func TestCheck(t *testing.T) {
	a, err := gitauth.Options{}.Load(func(k string) string { return map[string]string{gitauth.EnvToken: token}[k] })
	if err != nil {
		t.Fatal(err)
	}
	for loc, want := range map[string]string{
		"https://git.example.com/t.git":                 "",
		"http://127.0.0.1:8080/t.git":                   "",
		"http://git.example.com/t.git":                  "plain http",
		"https://x:" + token + "@git.example.com/t.git": "user information",
		"git@git.example.com:t.git":                     "",
	} {
		err := a.Check(loc)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("Check(%s) = %v, want %q", gitproto.Redact(loc), err, want)
		}
		if err != nil && strings.Contains(err.Error(), token) {
			t.Errorf("Check error shows the token: %v", err)
		}
	}
}

// TestHTTP: a server that requires credentials refuses the client without
// them and serves it with them, for gitproto (the agent) and go-git (the
// CLI), and the secret is never in an error or a log line.
func TestHTTP(t *testing.T) {
	srv := gittest.NewServer(t)
	dir := srv.InitBare(t, "tenant.git")
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "README.md"), []byte("tenant\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	head := plumbing.NewHash(gittest.CommitDir(t, dir, "main", src, "first"))
	ctx := context.Background()
	tests := []struct {
		name    string
		require func()
		opts    gitauth.Options
		env     map[string]string
	}{
		{"token", func() { srv.RequireToken(token) }, gitauth.Options{TokenFile: file(t, token)}, nil},
		{"basic", func() { srv.RequireBasic("agent", password) }, gitauth.Options{Username: "agent"}, map[string]string{gitauth.EnvPassword: password}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.require()
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			var errs []string

			none, _ := gitauth.Options{}.Load(func(string) string { return "" })
			c, err := none.Client(srv.URL("tenant.git"), nil, log)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.LsRefs(ctx, "refs/heads/main")
			if he, ok := errors.AsType[*gitproto.HTTPError](err); !ok || he.StatusCode != http.StatusUnauthorized || gitproto.Temporary(err) {
				t.Fatalf("LsRefs without credentials: %v, want a permanent 401", err)
			}

			a, err := tt.opts.Load(func(k string) string { return tt.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			c, err = a.Client(srv.URL("tenant.git"), nil, log)
			if err != nil {
				t.Fatal(err)
			}
			refs, err := c.LsRefs(ctx, "refs/heads/main")
			if err != nil || refs["refs/heads/main"] != head {
				t.Fatalf("LsRefs with credentials = %v, %v; want main at %s", refs, err, head)
			}
			if _, err := c.Fetch(ctx, memory.NewStorage(), []plumbing.Hash{head}, nil); err != nil {
				t.Fatal(err)
			}
			// A failing request with credentials: the error names the
			// repository, not the secret.
			_, err = (&gitproto.Client{URL: srv.URL("missing.git"), Auth: a.SetHeader, Log: log}).LsRefs(ctx, "refs/")
			errs = append(errs, err.Error())

			repo, err := gitrepo.Open(srv.URL("tenant.git"), gitrepo.WithCacheDir(t.TempDir()), gitrepo.WithCredentials(a))
			if err != nil {
				t.Fatal(err)
			}
			if err := repo.Fetch(ctx, "refs/heads/"); err != nil {
				t.Fatalf("gitrepo fetch with credentials: %v", err)
			}
			repo, err = gitrepo.Open(srv.URL("tenant.git"), gitrepo.WithCacheDir(t.TempDir()), gitrepo.WithCredentials(none))
			if err != nil {
				t.Fatal(err)
			}
			err = repo.Fetch(ctx, "refs/heads/")
			if err == nil {
				t.Fatal("gitrepo fetch without credentials succeeded")
			}
			errs = append(errs, err.Error())
			log.Info("client", "auth", a)
			for _, s := range append(errs, logs.String()) {
				if strings.Contains(s, token) || strings.Contains(s, password) {
					t.Errorf("secret printed: %s", s)
				}
			}
		})
	}
}

package gitauth_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"nuon.dev/nuon/internal/gitauth"
	"nuon.dev/nuon/internal/gittest"
)

// gitCLI runs the git command line in a fresh home with env added; it
// returns the combined output.
func gitCLI(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "GIT_CONFIG_NOSYSTEM=1")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestEnvHTTP: the git command line with Env reads a repository that
// requires a token or basic auth; without credentials or with wrong ones
// it fails at once, without a prompt, and its message names the
// repository but never the secret.
func TestEnvHTTP(t *testing.T) {
	srv := gittest.NewServer(t)
	dir := srv.InitBare(t, "tenant.git")
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "README.md"), []byte("tenant\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	head := gittest.CommitDir(t, dir, "main", src, "first")
	url := srv.URL("tenant.git")
	tests := []struct {
		name         string
		require      func()
		right, wrong gitauth.Options
	}{
		{"token", func() { srv.RequireToken(token) }, gitauth.Options{TokenFile: file(t, token)}, gitauth.Options{TokenFile: file(t, "tok-wrong")}},
		{"basic", func() { srv.RequireBasic("agent", password) },
			gitauth.Options{Username: "agent", PasswordFile: file(t, password)}, gitauth.Options{Username: "agent", PasswordFile: file(t, "pw-wrong")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.require()
			a, err := tt.right.Load(func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			env, err := a.Env(url)
			if err != nil {
				t.Fatal(err)
			}
			out, err := gitCLI(t, env, "ls-remote", url, "refs/heads/main")
			if err != nil || !strings.HasPrefix(out, head) {
				t.Fatalf("ls-remote with credentials: %v\n%s", err, out)
			}
			wrong, err := tt.wrong.Load(func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			none, _ := gitauth.Options{}.Load(func(string) string { return "" })
			for _, b := range []*gitauth.Auth{wrong, none} {
				env, err := b.Env(url)
				if err != nil {
					t.Fatal(err)
				}
				out, err := gitCLI(t, env, "ls-remote", url, "refs/heads/main")
				if err == nil {
					t.Fatalf("ls-remote with %s succeeded:\n%s", b, out)
				}
				if host := strings.Split(strings.TrimPrefix(url, "http://"), "/")[0]; !strings.Contains(out, host) {
					t.Errorf("error does not name the host:\n%s", out)
				}
				if strings.Contains(out, token) || strings.Contains(out, password) {
					t.Errorf("error shows the secret:\n%s", out)
				}
			}
		})
	}
}

// TestEnvSSH: the git command line with Env reads and pushes over SSH with
// the key alone and checks the host key; with another key, or a
// known_hosts file that does not list the server, it fails.
func TestEnvSSH(t *testing.T) {
	srv := gittest.NewSSHServer(t, "")
	dir := srv.InitBare(t, "tenant.git")
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "README.md"), []byte("tenant\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	head := gittest.CommitDir(t, dir, "main", src, "first")
	url := srv.URL("tenant.git")
	a, err := gitauth.Options{SSHKey: srv.ClientKey, KnownHosts: srv.KnownHosts}.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	env, err := a.Env(url)
	if err != nil {
		t.Fatal(err)
	}
	out, err := gitCLI(t, env, "ls-remote", url, "refs/heads/main")
	if err != nil || !strings.HasPrefix(out, head) {
		t.Fatalf("ls-remote over ssh: %v\n%s", err, out)
	}
	local := filepath.Join(t.TempDir(), "local.git")
	gittest.InitBare(t, local)
	if out, err := gitCLI(t, env, "-C", local, "fetch", "--quiet", url, "main:main"); err != nil {
		t.Fatalf("fetch over ssh: %v\n%s", err, out)
	}
	if out, err := gitCLI(t, env, "-C", local, "push", "--quiet", url, "main:refs/heads/copy"); err != nil {
		t.Fatalf("push over ssh: %v\n%s", err, out)
	}
	if got := gittest.Git(t, dir, "rev-parse", "refs/heads/copy"); got != head {
		t.Fatalf("pushed ref at %s, want %s", got, head)
	}

	_, otherKey := gittest.NewSSHKey(t)
	other := file(t, string(otherKey))
	if err := os.Chmod(other, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]gitauth.Options{
		"other key":        {SSHKey: other, KnownHosts: srv.KnownHosts},
		"unknown host key": {SSHKey: srv.ClientKey, KnownHosts: file(t, "")},
	} {
		b, err := opts.Load(nil)
		if err != nil {
			t.Fatal(err)
		}
		env, err := b.Env(url)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := gitCLI(t, env, "ls-remote", url); err == nil {
			t.Errorf("%s: ls-remote succeeded:\n%s", name, out)
		}
	}
}

func TestEnv(t *testing.T) {
	_, pemKey := gittest.NewSSHKey(t)
	key := file(t, string(pemKey))
	if err := os.Chmod(key, 0o600); err != nil {
		t.Fatal(err)
	}
	open := file(t, string(pemKey))
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	known := file(t, "")
	load := func(o gitauth.Options, env map[string]string) *gitauth.Auth {
		a, err := o.Load(func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	tok := load(gitauth.Options{}, map[string]string{gitauth.EnvToken: token})
	basic := load(gitauth.Options{Username: "agent"}, map[string]string{gitauth.EnvPassword: password})
	sshAuth := load(gitauth.Options{SSHKey: key, KnownHosts: known}, nil)
	none := load(gitauth.Options{}, nil)
	header := []string{"GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader"}
	tests := []struct {
		name     string
		a        *gitauth.Auth
		location string
		want     []string // exactly, or with sshCmd the prefix
		sshCmd   string
		err      string
	}{
		{name: "token", a: tok, location: "https://git.example.com/t.git", want: append(header, "GIT_CONFIG_VALUE_0=Authorization: Bearer "+token)},
		{name: "basic", a: basic, location: "https://git.example.com/t.git", want: append(header, "GIT_CONFIG_VALUE_0=Authorization: Basic YWdlbnQ6cHctODhkMWUwYzNhYQ==")},
		{name: "none", a: none, location: "https://git.example.com/t.git", want: []string{"GIT_TERMINAL_PROMPT=0"}},
		{name: "nil", location: "https://git.example.com/t.git", want: []string{"GIT_TERMINAL_PROMPT=0"}},
		{name: "local path", a: tok, location: "/srv/tenant.git", want: []string{"GIT_TERMINAL_PROMPT=0"}},
		{name: "ssh key, https", a: sshAuth, location: "https://git.example.com/t.git", want: []string{"GIT_TERMINAL_PROMPT=0"}},
		{name: "ssh", a: sshAuth, location: "ssh://git@git.example.com:2222/t.git",
			sshCmd: "GIT_SSH_COMMAND=ssh -F /dev/null -i " + key + " -o IdentitiesOnly=yes -o IdentityAgent=none -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile=" + known + " -o GlobalKnownHostsFile=/dev/null"},
		{name: "scp-like", a: sshAuth, location: "git@git.example.com:v/t.git", sshCmd: "GIT_SSH_COMMAND=ssh -F /dev/null -i " + key},
		{name: "ssh without key", a: tok, location: "git@git.example.com:v/t.git", err: "needs --ssh-key"},
		{name: "ssh key others read", a: load(gitauth.Options{SSHKey: open, KnownHosts: known}, nil), location: "git@git.example.com:v/t.git", err: "chmod 600"},
		{name: "plain http", a: tok, location: "http://git.example.com/t.git", err: "plain http"},
		{name: "user information too", a: basic, location: "https://bot:" + password + "@git.example.com/t.git", err: "user information"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.a.Env(tt.location)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Env: %v, want an error saying %q", err, tt.err)
				}
				if strings.Contains(err.Error(), password) || strings.Contains(err.Error(), token) {
					t.Errorf("error shows a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.sshCmd != "" {
				if len(got) != 2 || got[0] != "GIT_TERMINAL_PROMPT=0" || !strings.HasPrefix(got[1], tt.sshCmd) {
					t.Fatalf("Env = %q, want GIT_TERMINAL_PROMPT=0 and %q…", got, tt.sshCmd)
				}
				return
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("Env = %q, want %q", got, tt.want)
			}
		})
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"nuon.dev/nuon/internal/gittest"
)

// nuonFails runs the binary, wants exit code 1 and returns its stderr.
func nuonFails(tb testing.TB, env []string, args ...string) string {
	tb.Helper()
	cmd := exec.Command(nuonBinary(tb), args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		tb.Fatalf("nuon %s: %v, want exit 1\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stderr.String()
}

// tenantRepo commits the sample tenant as main of a bare repository in
// root and returns the allowed_signers file that trusts the renderer.
func tenantRepo(t *testing.T, root string) (trust string) {
	t.Helper()
	bare := filepath.Join(root, "tenant.git")
	gittest.InitBare(t, bare)
	gittest.Git(t, bare, "config", "http.receivepack", "true")
	_, trust = commitTenant(t, bare, nil)
	return trust
}

// TestCLIOverSSH: render, verify and status against the tenant repository
// served by sshd, with a key and known_hosts given as flags; an unknown
// host key is refused.
func TestCLIOverSSH(t *testing.T) {
	sshd := gittest.NewSSHServer(t, "")
	trust := tenantRepo(t, sshd.Root)
	url := sshd.URL("tenant.git")
	creds := []string{"--ssh-key", sshd.ClientKey, "--known-hosts", sshd.KnownHosts}
	cache := "--cache-dir=" + t.TempDir()

	nuon(t, nil, 0, append([]string{"render", "--repo", url, "--key", filepath.Join(repoRoot(), "fixtures", "keys", "render"), cache}, creds...)...)
	out := nuon(t, nil, 0, append([]string{"verify", "--repo", url, "--install", "acme", "--trust", trust, "-o", "json", cache}, creds...)...)
	var v struct {
		Verified   bool  `json:"verified"`
		Generation int64 `json:"generation"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || !v.Verified || v.Generation != 1 {
		t.Fatalf("verify over ssh: %s (%v)", out, err)
	}
	out = nuon(t, nil, 0, append([]string{"status", "--repo", url, "-o", "json", cache}, creds...)...)
	if strings.TrimSpace(out) != "[]" && strings.TrimSpace(out) != "null" {
		t.Errorf("status of a tenant without agents: %s", out)
	}

	other := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	stderr := nuonFails(t, nil, "status", "--repo", url, "--ssh-key", sshd.ClientKey, "--known-hosts", other, "--cache-dir="+t.TempDir())
	if !strings.Contains(stderr, "not in known_hosts") {
		t.Errorf("status with an unknown host key: %s", stderr)
	}
	stderr = nuonFails(t, nil, "status", "--repo", url, cache)
	if !strings.Contains(stderr, "ssh") {
		t.Errorf("status over ssh without a key: %s", stderr)
	}
}

// TestCLIHTTPToken: verify against a server that wants a token, given in
// the environment or a file; never echoed.
func TestCLIHTTPToken(t *testing.T) {
	const token = "tok-e2e-31415926"
	srv := gittest.NewServer(t)
	trust := tenantRepo(t, srv.Root)
	url := srv.URL("tenant.git")
	render := filepath.Join(repoRoot(), "fixtures", "keys", "render")
	srv.RequireToken(token)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nuon(t, nil, 0, "render", "--repo", url, "--key", render, "--git-token-file", tokenFile, "--cache-dir="+t.TempDir())
	nuon(t, []string{"NUON_GIT_TOKEN=" + token}, 0, "verify", "--repo", url, "--install", "acme", "--trust", trust, "--cache-dir="+t.TempDir())
	stderr := nuonFails(t, []string{"NUON_GIT_TOKEN=wrong-" + token}, "verify", "--repo", url, "--install", "acme", "--trust", trust, "--cache-dir="+t.TempDir())
	if strings.Contains(stderr, token) {
		t.Errorf("the token is in the error output: %s", stderr)
	}
	stderr = nuonFails(t, nil, "verify", "--repo", "http://x:"+token+"@127.0.0.1:1/t.git", "--install", "acme", "--trust", trust, "--cache-dir="+t.TempDir())
	if strings.Contains(stderr, token) {
		t.Errorf("a password in the URL is in the error output: %s", stderr)
	}
}

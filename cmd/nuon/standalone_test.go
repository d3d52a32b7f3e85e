package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandsNameTheirFix runs commands in-process the way a user would
// outside make, with nothing in the environment and an empty cache: each
// error that stops them names the flag, the variable or the file that
// fixes it, and nuon debug refuses a command off the allow-list before it
// opens the repository.
func TestCommandsNameTheirFix(t *testing.T) {
	tmp := t.TempDir()
	for _, env := range []string{"NUON_KUBE_ASSETS", "NUON_TF_CLI_CONFIG", "TF_CLI_CONFIG_FILE", "NUON_SECRETS_FILE", "NUON_REQUEST_TRUST"} {
		t.Setenv(env, "")
	}
	t.Setenv("XDG_CACHE_HOME", filepath.Join(tmp, "cache"))
	keys := filepath.Join(repoRoot(), "fixtures", "keys")
	badSecrets := filepath.Join(tmp, "bad.secrets")
	if err := os.WriteFile(badSecrets, []byte("# acme\nlicense_key demo-license-4242\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noRepo := filepath.Join(tmp, "no-such-tenant.git")
	agent := []string{"agent", "--repo", noRepo, "--install", "acme", "--trust", filepath.Join(tmp, "trust"),
		"--key", filepath.Join(keys, "acme"), "--workdir", filepath.Join(tmp, "work"), "--once"}
	create := []string{"install", "create", "acme", "--repo", noRepo, "--dir", filepath.Join(tmp, "acme")}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"install create without kube assets", append(create, "--channel", "beta", "--render-key", filepath.Join(keys, "render.pub")),
			[]string{"the local sandbox needs the kube assets", "--kube-assets", "$NUON_KUBE_ASSETS", "make kube-binaries", filepath.Join(tmp, "cache", "nuon", "kube")}},
		{"install create with a missing terraform configuration", append(create, "--kube-assets", tmp, "--phase", "agent", "--tf-cli-config", filepath.Join(tmp, "terraformrc")),
			[]string{filepath.Join(tmp, "terraformrc") + ": not a file", "--tf-cli-config", "$NUON_TF_CLI_CONFIG", "make tf-providers"}},
		{"install create --phase agent needs no channel or render key", append(create, "--kube-assets", tmp, "--phase", "agent"),
			[]string{"agent: sandbox outputs", "--phase sandbox"}},
		{"install create without a channel", append(create, "--kube-assets", tmp, "--render-key", filepath.Join(keys, "render.pub")),
			[]string{"--channel"}},
		{"agent with a missing terraform configuration", append(agent, "--tf-cli-config", filepath.Join(tmp, "terraformrc")),
			[]string{"--tf-cli-config", "$NUON_TF_CLI_CONFIG", "make tf-providers"}},
		{"agent with a bad secrets file", append(agent, "--secrets-file", badSecrets),
			[]string{"--secrets-file " + badSecrets + ":2: want NAME=VALUE"}},
		{"agent with a missing secrets file", append(agent, "--secrets-file", filepath.Join(tmp, "none.secrets")),
			[]string{"--secrets-file (or $NUON_SECRETS_FILE)"}},
		{"agent with a missing trust file", agent, []string{"--trust:"}},
		{"job run with a missing terraform configuration", []string{"job", "run", filepath.Join(tmp, "manifest.json"), "--tf-cli-config", filepath.Join(tmp, "terraformrc")},
			[]string{"--tf-cli-config", "$NUON_TF_CLI_CONFIG"}},
		{"debug off the allow-list", []string{"debug", "acme", "--component", "api", "--repo", noRepo, "--key", filepath.Join(keys, "operator"), "--", "sh", "-c", "id"},
			[]string{`"sh -c id" is not an allowed debug command`, "nothing was filed", "get KIND", "state list"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runNuon(t, tc.args...)
			if err == nil {
				t.Fatalf("nuon %s succeeded", strings.Join(tc.args, " "))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
	if _, err := os.Stat(noRepo); err == nil {
		t.Errorf("a refused command made %s", noRepo)
	}
}

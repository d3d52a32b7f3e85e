package lifecycle

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestCreateErrorsNameTheFix: what Create needs from the command line is
// asked for by the phases that use it, and each error names the flag (and
// variable) that gives it.
func TestCreateErrorsNameTheFix(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("TF_CLI_CONFIG_FILE", "")
	empty := t.TempDir()
	for _, tc := range []struct {
		name string
		opts func(o *Options)
		want []string
	}{
		{"no kube assets", func(o *Options) { o.KubeAssets = "" },
			[]string{"install acme: the local sandbox needs the kube assets", "--kube-assets", "$NUON_KUBE_ASSETS", "make kube-binaries"}},
		{"kube assets without binaries", func(o *Options) { o.KubeAssets = empty },
			[]string{"install acme: sandbox: the local sandbox needs the kube binaries", empty, "no executable etcd", "--kube-assets", "$NUON_KUBE_ASSETS"}},
		{"no channel", func(o *Options) { o.Channel = "" },
			[]string{"install acme: the install file needs its channel: set --channel"}},
		{"no render key", func(o *Options) { o.RenderKey = "" },
			[]string{"install acme: the agent needs the trust root (--trust-root trust/root/1.json) or the render public key (--render-key, deprecated)"}},
		{"terraform config missing", func(o *Options) { o.TFCLIConfig = "/nonexistent/terraformrc" },
			[]string{"install acme: terraform CLI configuration /nonexistent/terraformrc: not a file", "--tf-cli-config", "$NUON_TF_CLI_CONFIG", "make tf-providers"}},
		// --phase agent needs neither the channel nor the render key: it
		// goes as far as the sandbox's outputs, which it needs.
		{"agent phase alone", func(o *Options) { o.Only, o.Channel, o.RenderKey = []string{"agent"}, "", "" },
			[]string{"install acme: agent: sandbox outputs:", "--phase sandbox"}},
		{"agent phase in a cluster needs no kube assets", func(o *Options) {
			o.Only, o.Channel, o.RenderKey, o.KubeAssets, o.AgentMode = []string{"agent"}, "", "", "", AgentKubernetes
		}, []string{"install acme: agent: sandbox outputs:", "--phase sandbox"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			o := Options{ID: "acme", Repo: filepath.Join(dir, "tenant.git"), Dir: filepath.Join(dir, "acme"),
				Channel: "beta", RenderKey: filepath.Join(dir, "render.pub"), KubeAssets: empty}
			writeFile(t, o.RenderKey, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOI093FQc+72WNrTUNkTxXuw9DMb7Qmo+M7BQq0kk/Gv render\n")
			tc.opts(&o)
			err := Create(context.Background(), o)
			if err == nil {
				t.Fatalf("Create succeeded, want an error naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			for _, never := range []string{"channel and render key are required"} {
				if strings.Contains(err.Error(), never) {
					t.Errorf("error %q", err)
				}
			}
		})
	}
}

// TestInitErrorNamesTheConfiguration: a failed terraform init says which
// CLI configuration terraform read and how to give another.
func TestInitErrorNamesTheConfiguration(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	for _, tc := range []struct {
		name, flag, env string
		want            []string
	}{
		{"none", "", "", []string{"terraform init: could not connect", "no terraform CLI configuration was given", "--tf-cli-config", "$NUON_TF_CLI_CONFIG"}},
		{"from the flag", "/srv/terraformrc", "", []string{"read its CLI configuration from /srv/terraformrc", "--tf-cli-config"}},
		{"from terraform's variable", "", "/root/.terraformrc", []string{"read its CLI configuration from /root/.terraformrc", "--tf-cli-config"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("TF_CLI_CONFIG_FILE", tc.env)
			o := &Options{TFCLIConfig: tc.flag}
			err := o.initError(errorString("could not connect to registry.terraform.io"))
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// errorString is an error with a fixed text.
type errorString string

func (e errorString) Error() string { return string(e) }

package toolcache

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// withCache points the user cache folder at a temporary one.
func withCache(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", dir)
	return dir
}

func TestPaths(t *testing.T) {
	cache := withCache(t)
	if got, want := KubeAssets(), filepath.Join(cache, "nuon", "kube", KubeVersion); got != want {
		t.Errorf("KubeAssets() = %s, want %s", got, want)
	}
	if got, want := TerraformConfig(), filepath.Join(cache, "nuon", "terraform-providers", TerraformProviders, "terraformrc"); got != want {
		t.Errorf("TerraformConfig() = %s, want %s", got, want)
	}
}

func TestDefault(t *testing.T) {
	cache := withCache(t)
	there := filepath.Join(cache, "there")
	if err := os.WriteFile(there, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, env, cached, want string
	}{
		{name: "the variable wins", env: "/from/env", cached: there, want: "/from/env"},
		{name: "the cache when it exists", cached: there, want: there},
		{name: "nothing when it does not", cached: filepath.Join(cache, "missing"), want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NUON_TEST_TOOL", tc.env)
			if got := Default("NUON_TEST_TOOL", tc.cached); got != tc.want {
				t.Errorf("Default = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestErrorsNameTheFix: every error says which flag and variable to set
// and which make target fills the cache.
func TestErrorsNameTheFix(t *testing.T) {
	withCache(t)
	full, partial := t.TempDir(), t.TempDir()
	for _, b := range KubeBinaries {
		if err := os.WriteFile(filepath.Join(full, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(partial, "etcd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(partial, "kube-apiserver"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rc := filepath.Join(full, "terraformrc")
	if err := os.WriteFile(rc, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want []string // substrings; none: no error
	}{
		{"no kube assets", CheckKubeAssets("", "--kube-assets"),
			[]string{"no kube assets folder", "--kube-assets", "$NUON_KUBE_ASSETS", "make kube-binaries", KubeAssets()}},
		{"kube binaries missing", CheckKubeAssets(partial, "--kube-assets"),
			[]string{partial, "no executable kube-apiserver, kube-controller-manager", "--kube-assets", "$NUON_KUBE_ASSETS", "make kube-binaries"}},
		{"kube assets complete", CheckKubeAssets(full, "--kube-assets"), nil},
		{"terraform config missing", CheckTerraformConfig("/nonexistent/terraformrc", "--tf-cli-config"),
			[]string{"/nonexistent/terraformrc", "--tf-cli-config", "$NUON_TF_CLI_CONFIG", "make tf-providers", TerraformConfig()}},
		{"terraform config a folder", CheckTerraformConfig(full, "--tf-cli-config"), []string{full, "not a file"}},
		{"terraform config present", CheckTerraformConfig(rc, "--tf-cli-config"), nil},
		{"terraform config not given", CheckTerraformConfig("", "--tf-cli-config"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want == nil {
				if tc.err != nil {
					t.Fatalf("error %v, want none", tc.err)
				}
				return
			}
			if tc.err == nil {
				t.Fatalf("no error, want one naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(tc.err.Error(), w) {
					t.Errorf("error %q does not name %q", tc.err, w)
				}
			}
		})
	}
}

func TestTerraformHint(t *testing.T) {
	withCache(t)
	for _, tc := range []struct {
		inUse string
		want  []string
	}{
		{"", []string{"no terraform CLI configuration was given", "--tf-cli-config", "$NUON_TF_CLI_CONFIG", "make tf-providers"}},
		{"/etc/terraformrc", []string{"read its CLI configuration from /etc/terraformrc", "--tf-cli-config", "$NUON_TF_CLI_CONFIG"}},
	} {
		got := TerraformHint("--tf-cli-config", tc.inUse)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("TerraformHint(%q) = %q, does not name %q", tc.inUse, got, w)
			}
		}
	}
}

// Package toolcache knows where the Makefile caches the heavy tools it
// builds ($XDG_CACHE_HOME/nuon, else ~/.cache/nuon, keyed by version), so
// that commands run outside make default to them and name them when they
// are missing. It finds paths; it never builds anything.
package toolcache

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Versions of the cached tools, as the Makefile names their folders.
const (
	// KubeVersion is the version of the kube binaries (make kube-binaries).
	KubeVersion = "v1.37.1"
	// TerraformProviders is the provider mirror's folder (make tf-providers).
	TerraformProviders = "local-2.9.0-random-3.9.0"
)

// Environment variables that name the tools, as the Makefile exports them.
const (
	// EnvKubeAssets names the folder with etcd, kube-apiserver and
	// kube-controller-manager.
	EnvKubeAssets = "NUON_KUBE_ASSETS"
	// EnvTFCLIConfig names terraform's CLI configuration for the offline
	// provider mirror.
	EnvTFCLIConfig = "NUON_TF_CLI_CONFIG"
)

// KubeBinaries are the programs the local sandbox runs from the kube
// assets folder.
var KubeBinaries = []string{"etcd", "kube-apiserver", "kube-controller-manager"}

// Dir is the cache folder the Makefile uses: $XDG_CACHE_HOME/nuon, else
// ~/.cache/nuon; empty when neither is known.
func Dir() string {
	base, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(base, "nuon")
}

// KubeAssets is the folder make kube-binaries fills.
func KubeAssets() string { return under("kube", KubeVersion) }

// TerraformConfig is the CLI configuration make tf-providers writes.
func TerraformConfig() string {
	return under("terraform-providers", TerraformProviders, "terraformrc")
}

func under(elem ...string) string {
	d := Dir()
	if d == "" {
		return ""
	}
	return filepath.Join(append([]string{d}, elem...)...)
}

// Default is a flag's default: the environment variable env when set,
// else the cached path when it exists, else empty.
func Default(env, cached string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	if cached != "" {
		if _, err := os.Stat(cached); err == nil {
			return cached
		}
	}
	return ""
}

// CheckKubeAssets reports the kube binaries missing from dir, in an error
// that names what fixes it: the flag (and its variable) or make
// kube-binaries.
func CheckKubeAssets(dir, flag string) error {
	fix := fmt.Sprintf("set %s or $%s to a folder with %s; `make kube-binaries` builds them into %s",
		flag, EnvKubeAssets, strings.Join(KubeBinaries, ", "), KubeAssets())
	if dir == "" {
		return fmt.Errorf("no kube assets folder: %s", fix)
	}
	var missing []string
	for _, b := range KubeBinaries {
		st, err := os.Stat(filepath.Join(dir, b))
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("kube assets %s: no executable %s: %s", dir, strings.Join(missing, ", "), fix)
	}
	return nil
}

// CheckTerraformConfig checks that file, terraform's CLI configuration,
// exists; empty is allowed (terraform's own configuration).
func CheckTerraformConfig(file, flag string) error {
	if file == "" {
		return nil
	}
	st, err := os.Stat(file)
	if err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("terraform CLI configuration %s: not a file: set %s or $%s to one; `make tf-providers` writes %s",
			file, flag, EnvTFCLIConfig, TerraformConfig())
	}
	return nil
}

// TerraformHint is what an error from terraform init adds: which CLI
// configuration terraform read (inUse; empty: none was given) and how to
// give another, since an offline machine gets its providers from a
// mirror.
func TerraformHint(flag, inUse string) string {
	fix := fmt.Sprintf("set %s or $%s (`make tf-providers` writes %s)", flag, EnvTFCLIConfig, TerraformConfig())
	if inUse == "" {
		return "no terraform CLI configuration was given: for offline providers " + fix
	}
	return fmt.Sprintf("terraform read its CLI configuration from %s: for another one %s", inUse, fix)
}

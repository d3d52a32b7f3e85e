package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// RequireTools is the environment variable `make test` and `make bench`
// set to 1: they provision every tool first, so a missing one is a
// failure there too.
const RequireTools = "NUON_REQUIRE_TOOLS"

// Required reports whether every real component must be present: in CI
// (CI set, and not to "false" or "0"), or with RequireTools=1.
func Required() bool {
	ci := os.Getenv("CI")
	return ci != "" && ci != "false" && ci != "0" || os.Getenv(RequireTools) == "1"
}

// Missing reports a missing component: it skips t, or fails it when
// Required. The message should name what is missing and the make target
// that provides it.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("%s (CI=%q %s=%q: every tool must be present)", msg, os.Getenv("CI"), RequireTools, os.Getenv(RequireTools))
	}
	t.Skip(msg)
}

// TerraformProviders is the folder under the nuon cache (`make
// tf-providers`) that holds the offline provider mirror and its CLI
// configuration.
const TerraformProviders = "nuon/terraform-providers/local-2.9.0-random-3.9.0"

// TerraformConfig returns the terraform CLI configuration of the offline
// provider mirror `make tf-providers` builds: NUON_TF_CLI_CONFIG, else
// TF_CLI_CONFIG_FILE (both set by the Makefile), else the file in the
// user's cache folder. Without one that exists it calls Missing.
func TerraformConfig(t testing.TB) string {
	t.Helper()
	var tried []string
	for _, env := range []string{"NUON_TF_CLI_CONFIG", "TF_CLI_CONFIG_FILE"} {
		if p := os.Getenv(env); p != "" {
			if isFile(p) {
				return p
			}
			tried = append(tried, env+"="+p)
		}
	}
	if cache, err := os.UserCacheDir(); err == nil {
		p := filepath.Join(cache, TerraformProviders, "terraformrc")
		if isFile(p) {
			return p
		}
		tried = append(tried, p)
	}
	Missing(t, "no terraform provider mirror (tried %v): run `make tf-providers`", tried)
	return ""
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

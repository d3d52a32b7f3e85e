package publish

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nuon.dev/nuon/schemas"
)

// TestCheckPolicies: the same files pass once compiled, without a compile
// again; files that do not compile are refused each time, with their
// problems, and a change to a file that passed is compiled again.
func TestCheckPolicies(t *testing.T) {
	good := map[string]string{}
	for _, name := range []string{"no-data-loss.rego", "no-public-bucket.rego"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "tenant", "policies", name))
		if err != nil {
			t.Fatal(err)
		}
		good["policies/"+name] = string(b)
	}
	bad := map[string]string{"policies/bad.rego": "package nuon.plans.bad\n\ndeny contains msg if {\n\tmsg := \n}\n"}
	broken := map[string]string{}
	for k, v := range good {
		broken[k] = v
	}
	broken["policies/no-data-loss.rego"] = strings.Replace(good["policies/no-data-loss.rego"], "package", "packag", 1)
	refused := func(files map[string]string) {
		t.Helper()
		err := checkPolicies(files)
		var ps schemas.Problems
		if err == nil || !errors.As(err, &ps) || len(ps) == 0 {
			t.Fatalf("files that do not compile: %v, want problems", err)
		}
	}
	for range 2 {
		if err := checkPolicies(good); err != nil {
			t.Fatal(err)
		}
		refused(bad)
		refused(broken)
	}
	if err := checkPolicies(good); err != nil {
		t.Fatal(err)
	}
	// Passed, then kept: the caller's map changed after is compiled
	// again, not taken for the one kept.
	files := map[string]string{}
	for k, v := range good {
		files[k] = v
	}
	if err := checkPolicies(files); err != nil {
		t.Fatal(err)
	}
	files["policies/no-data-loss.rego"] = broken["policies/no-data-loss.rego"]
	refused(files)
}

package renderer_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"nuon.dev/nuon/policy/plans"
	"nuon.dev/nuon/schemas"
)

// TestPoliciesRendered: main's policies/*.rego reach every install's
// signed state byte for byte; one that does not compile fails the render
// at its file and line, and nothing is issued.
func TestPoliciesRendered(t *testing.T) {
	tn := newTenant(t)
	opts := options(t)
	opts.CheckPolicies = plans.Check
	tn.render(opts)
	want := readTree(t, tn.dir, "main")["policies/no-data-loss.rego"]
	for _, id := range []string{"acme", "globex", "initech"} {
		if got := readTree(t, tn.dir, schemas.InstallRef(id))["policies/no-data-loss.rego"]; got == "" || got != want {
			t.Errorf("%s: the policy is not in its state", id)
		}
	}

	tn.write("policies/broken.rego", "package broken\n\nimport rego.v1\n\ndeny contains msg if {\n  msg := undefined_function(input)\n}\n")
	tn.commit("a broken policy")
	before := refs(t, tn.dir)
	_, err := renderRepo(context.Background(), tn.open(), "main", opts)
	var ps schemas.Problems
	if !errors.As(err, &ps) || len(ps) != 1 || ps[0].File != "policies/broken.rego" || ps[0].Line != 6 || !strings.Contains(ps[0].Message, "undefined function") {
		t.Fatalf("render of a broken policy: %v", err)
	}
	if after := refs(t, tn.dir); len(after) != len(before) {
		t.Errorf("refs moved: %v → %v", before, after)
	}
}

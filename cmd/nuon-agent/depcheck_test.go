package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The agent binary must stay small: none of the plugins' or the builder's
// libraries may be linked into it.
func TestAgentLinksNoPlugins(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"helm.sh/helm", "github.com/sigstore/cosign", "github.com/fluxcd/pkg/ssa", "github.com/hashicorp/terraform-exec", "nuon.dev/nuon/reconciler/", "nuon.dev/nuon/builder", "nuon.dev/nuon/renderer"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("nuon-agent links %s", dep)
			}
		}
	}
}

package plugin_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the protocol apart from what it runs: neither the
// protocol, its runner and server nor the test kit link a built-in plugin,
// cosign, Helm or the agent's, renderer's and server's packages. A
// vendor's Go plugin imports this package and gets the protocol only.
func TestDependencies(t *testing.T) {
	for _, pkg := range []string{"nuon.dev/nuon/plugin", "nuon.dev/nuon/plugin/plugintest"} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list: %v", err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, banned := range []string{"github.com/sigstore/cosign/", "helm.sh/", "k8s.io/client-go/",
				"nuon.dev/nuon/reconciler/", "nuon.dev/nuon/builder", "nuon.dev/nuon/renderer",
				"nuon.dev/nuon/agent", "nuon.dev/nuon/server", "nuon.dev/nuon/jobrun"} {
				if strings.HasPrefix(dep, banned) {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}

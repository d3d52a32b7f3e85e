package sync_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the agent light: it verifies cosign signatures
// with go-containerregistry and sigstore's signature package, not cosign,
// and builds nothing.
func TestDependencies(t *testing.T) {
	for _, pkg := range []string{"nuon.dev/nuon/agent/sync", "nuon.dev/nuon/internal/oci"} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list: %v", err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, banned := range []string{"github.com/sigstore/cosign/", "helm.sh/", "oras.land/", "nuon.dev/nuon/builder", "nuon.dev/nuon/renderer"} {
				if strings.HasPrefix(dep, banned) {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}

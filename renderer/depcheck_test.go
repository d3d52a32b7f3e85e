package renderer_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the renderer pure: it reaches no network and runs
// no process, whatever its dependencies import.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "nuon.dev/nuon/renderer").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	for _, banned := range []string{"net/http", "os/exec", "nuon.dev/nuon/agent", "nuon.dev/nuon/internal/gitrepo", "nuon.dev/nuon/internal/gittest"} {
		if deps[banned] {
			t.Errorf("the renderer depends on %s", banned)
		}
	}
}

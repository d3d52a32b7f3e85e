package rollout_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the rollout decisions pure: they reach no
// network, run no process, and know nothing of the server or the agent
// that drive them.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "nuon.dev/nuon/rollout").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	for _, banned := range []string{"net/http", "os/exec", "nuon.dev/nuon/agent", "nuon.dev/nuon/server", "nuon.dev/nuon/renderer", "nuon.dev/nuon/internal/gitrepo"} {
		if deps[banned] {
			t.Errorf("rollout depends on %s", banned)
		}
	}
}

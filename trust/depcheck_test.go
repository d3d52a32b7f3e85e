package trust_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps trust a room of pure decisions: it reads no
// clock, reaches no network, runs no process and knows none of the agent,
// the renderer or the server that will use it.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "nuon.dev/nuon/trust").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"net/http", "os/exec", "nuon.dev/nuon/agent", "nuon.dev/nuon/server", "nuon.dev/nuon/renderer", "github.com/go-git/"} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") || strings.HasSuffix(banned, "/") && strings.HasPrefix(dep, banned) {
				t.Errorf("trust depends on %s", dep)
			}
		}
	}
}

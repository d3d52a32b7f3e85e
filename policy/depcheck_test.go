package policy_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps policy a room of pure decisions: it reaches no
// network, runs no process and knows neither the agent nor the server
// that use it.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "nuon.dev/nuon/policy").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"net/http", "os/exec", "nuon.dev/nuon/agent", "nuon.dev/nuon/server", "nuon.dev/nuon/renderer", "github.com/go-git/"} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") || strings.HasSuffix(banned, "/") && strings.HasPrefix(dep, banned) {
				t.Errorf("policy depends on %s", dep)
			}
		}
	}
}

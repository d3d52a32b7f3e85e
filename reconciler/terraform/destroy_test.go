package terraform

import (
	"os"
	"testing"

	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// TestDestroyWithoutState checks that a component that never applied is
// destroyed by doing nothing: no terraform, no artifact, no files.
func TestDestroyWithoutState(t *testing.T) {
	stateDir := t.TempDir()
	p := &Plugin{Binary: "/nonexistent/terraform"}
	job := newJob("network", fixture("network"), nil)
	job.Operation = schemas.OpDelete
	job.Artifacts = nil
	if err := p.Destroy(t.Context(), job, reconciler.Env{StateDir: stateDir}); err != nil {
		t.Fatalf("Destroy = %v, want nil", err)
	}
	entries, err := os.ReadDir(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("Destroy left %d files in the state directory", len(entries))
	}
}

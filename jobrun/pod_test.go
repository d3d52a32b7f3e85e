package jobrun

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/atomicfile"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/schemas"
)

// TestPodMain runs a job as a pod runs it and checks the result line and
// termination message the runner reads.
func TestPodMain(t *testing.T) {
	dir := t.TempDir()
	job := testJob(t, "echo")
	job.Inputs = map[string]any{"greeting": "hi"}
	job.StateDir = filepath.Join(dir, "state")
	job.ResultFile = filepath.Join(dir, ResultFile)
	manifest := filepath.Join(dir, ManifestFile)
	if err := atomicfile.WriteJSON(manifest, job); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	term := filepath.Join(dir, "termination-log")
	if err := podMain(t.Context(), manifest, testPlugins, oci.Layout{Path: dir}, &out, term); err != nil {
		t.Fatal(err)
	}
	res := resultLine(t, out.String())
	if res == nil || res.Job != job.ID || res.Outputs["greeting"] != "hi" {
		t.Fatalf("result line: %+v in\n%s", res, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if !strings.HasPrefix(lines[len(lines)-1], ResultLinePrefix) {
		t.Errorf("the result is not the last line:\n%s", out.String())
	}
	b, err := os.ReadFile(term)
	if err != nil {
		t.Fatal(err)
	}
	var got schemas.JobResult
	if err := json.Unmarshal(b, &got); err != nil || !cmp.Equal(res, &got) {
		t.Errorf("termination message %s, want the result", b)
	}
}

// resultLine decodes the result line of a pod's output.
func resultLine(t *testing.T, out string) *schemas.JobResult {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(line, ResultLinePrefix); ok {
			var res schemas.JobResult
			if err := json.Unmarshal([]byte(s), &res); err != nil {
				t.Fatal(err)
			}
			return &res
		}
	}
	return nil
}

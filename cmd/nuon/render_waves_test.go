package main

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files in testdata/")

// stableRollout is a rollout for the fixture's stable channel: the
// canary ring first, then the rest.
const stableRollout = `rollout:
  waves:
    - name: canary
      selector: {matchLabels: {ring: canary}}
      bake: 1h
    - name: rest
      rest: true
      minHealthy: 1
      failureBudget: 1
      onFailure: rollback
`

// TestRenderDryRunWaves: labels and a rollout change no install's
// rendered state, and --dry-run shows each install's wave, in text and
// JSON.
func TestRenderDryRunWaves(t *testing.T) {
	rt := localRenderTenant(t)
	rt.mustRun(t, nil)
	rt.edit(t, "installs/acme.yaml", "channel: stable\n", "channel: stable\nlabels:\n  ring: canary\n  region: us-east-1\n")
	rt.edit(t, "channels/stable.yaml", "  dashboards: 1.1.0\n", "  dashboards: 1.1.0\n"+stableRollout)

	out := rt.mustRun(t, func(o *renderOptions) { o.dryRun = true })
	if !strings.Contains(out.stdout, "would render 0 of 3 installs") {
		t.Errorf("labels or a rollout changed rendered state:\n%s", out.stdout)
	}
	i := strings.Index(out.stdout, "\nrollout of channel")
	if i < 0 {
		t.Fatalf("no rollout in the dry run:\n%s", out.stdout)
	}
	golden(t, "render-dry-run-waves.txt", out.stdout[i:])

	out = rt.mustRun(t, func(o *renderOptions) { o.dryRun, o.output = true, "json" })
	var rep renderReport
	if err := json.Unmarshal([]byte(out.stdout), &rep); err != nil {
		t.Fatalf("--output json: %v\n%s", err, out.stdout)
	}
	b, err := json.MarshalIndent(rep.Rollouts, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "render-dry-run-waves.json", string(b)+"\n")

	before := gitRefs(t, rt.dir)
	out = rt.mustRun(t, nil)
	if !strings.Contains(out.stdout, "rendered 0 of 3 installs") {
		t.Errorf("a render after adding labels and a rollout rendered installs:\n%s", out.stdout)
	}
	after := gitRefs(t, rt.dir)
	for _, id := range []string{"acme", "globex", "initech"} {
		if ref := "refs/heads/nuon/installs/" + id; before[ref] != after[ref] {
			t.Errorf("%s moved: %s, then %s", ref, before[ref], after[ref])
		}
	}
	if strings.Contains(out.stdout, "rollout of channel") {
		t.Errorf("a render that is not a dry run shows waves:\n%s", out.stdout)
	}
}

// TestRenderDryRunBadRollout: a selector that matches no install stops
// the dry run with the channel file's line.
func TestRenderDryRunBadRollout(t *testing.T) {
	rt := localRenderTenant(t)
	rt.edit(t, "channels/stable.yaml", "  dashboards: 1.1.0\n", "  dashboards: 1.1.0\n"+stableRollout)
	out := rt.run(t, func(o *renderOptions) { o.dryRun = true })
	if out.err == nil {
		t.Fatalf("dry run passed:\n%s", out.stdout)
	}
	want := "channels/stable.yaml:11:17: rollout.waves[0].selector: ring=canary selects no install of channel stable (allowEmpty: true lets it)\n"
	if !strings.Contains(out.stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, out.stderr)
	}
}

// golden compares got with testdata/name; -update rewrites it.
func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *updateGolden {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read golden file (run with -update to write it): %v", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got); run with -update if the change is intended:\n%s", p, diff)
	}
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// TestCustomerPolicyEndToEnd runs the real binary: an agent whose
// customer holds every change applies nothing and reports Held, read back
// by nuon status as a table and as JSON; named by $NUON_CUSTOMER_POLICY, a
// policy whose only window is far away makes it Waiting for window, with
// the opening. No job runs, so no tool is needed.
func TestCustomerPolicyEndToEnd(t *testing.T) {
	root := repoRoot()
	srv := gittest.NewServer(t)
	bare := srv.InitBare(t, "tenant.git")
	_, trust := commitTenant(t, bare, nil)
	url := srv.URL("tenant.git")
	keys := filepath.Join(root, "fixtures", "keys")
	work := t.TempDir()
	cache := "--cache-dir=" + filepath.Join(work, "cache")
	nuon(t, nil, 0, "render", "--repo", url, "--key", filepath.Join(keys, "render"), cache)

	policy := filepath.Join(work, "policy.yaml")
	head := "apiVersion: nuon.dev/v1\nkind: CustomerPolicy\n"
	if err := os.WriteFile(policy, []byte(head+"hold:\n  reason: migration weekend\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	agentArgs := []string{"agent", "--once", "--repo", url, "--install", "acme", "--trust", trust,
		"--key", filepath.Join(keys, "acme"), "--workdir", filepath.Join(work, "acme"),
		"--insecure-skip-artifact-verification", "-o", "json"}
	var rep struct {
		Outcome string         `json:"outcome"`
		Jobs    []schemas.Job  `json:"jobs"`
		Status  schemas.Status `json:"status"`
	}
	if err := json.Unmarshal([]byte(nuon(t, nil, 0, append(agentArgs, "--customer-policy", policy)...)), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Outcome != "deferred" || len(rep.Jobs) != 0 || rep.Status.Deferred == nil || rep.Status.Deferred.Reason != schemas.DeferredHold {
		t.Fatalf("agent under a hold: outcome %s, %d jobs, deferred %+v", rep.Outcome, len(rep.Jobs), rep.Status.Deferred)
	}
	table := nuon(t, nil, 0, "status", "--repo", url, cache)
	t.Logf("nuon status:\n%s", table)
	if !strings.Contains(table, " Held ") || !strings.Contains(table, "held by the customer: migration weekend") {
		t.Errorf("nuon status does not show the hold:\n%s", table)
	}
	var rows []struct {
		State    string            `json:"state"`
		Deferred *schemas.Deferred `json:"deferred"`
	}
	if err := json.Unmarshal([]byte(nuon(t, nil, 0, "status", "--repo", url, "-o", "json", cache)), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].State != "Held" || rows[0].Deferred == nil || rows[0].Deferred.Commit != rep.Status.Desired {
		t.Fatalf("nuon status -o json: %+v", rows)
	}

	// The only window opens at 03:00 on 1 January.
	if err := os.WriteFile(policy, []byte(head+"allow:\n  - cron: \"0 3 1 1 *\"\n    duration: 1m\n    timezone: UTC\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(nuon(t, []string{"NUON_CUSTOMER_POLICY=" + policy}, 0, agentArgs...)), &rep); err != nil {
		t.Fatal(err)
	}
	d := rep.Status.Deferred
	if rep.Outcome != "deferred" || d == nil || d.Reason != schemas.DeferredWindow || d.Until == nil || d.Until.Month() != 1 || d.Until.Day() != 1 || d.Until.Hour() != 3 {
		t.Fatalf("agent outside its window: outcome %s, deferred %+v", rep.Outcome, d)
	}
	table = nuon(t, nil, 0, "status", "--repo", url, cache)
	t.Logf("nuon status:\n%s", table)
	if want := "Waiting for window (opens at " + d.Until.Format("2006-01-02T15:04:05Z07:00") + ")"; !strings.Contains(table, want) {
		t.Errorf("nuon status does not say %q:\n%s", want, table)
	}
}

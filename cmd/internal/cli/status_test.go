package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/fleet"
	"nuon.dev/nuon/schemas"
)

// TestPrintStatus checks the table's STATE column: Stale (with the expiry)
// over the phase while the agent reports its desired state expired, and a
// replaced forged status named among the problems; Unreachable when the
// heartbeat is late, with health, drift and the customer's veto listed.
func TestPrintStatus(t *testing.T) {
	expires := time.Date(2030, 1, 1, 1, 0, 0, 0, time.UTC)
	commit := strings.Repeat("a", 40)
	rows := []fleet.Install{
		{Install: "acme", Generation: 3, Desired: commit, Applied: commit, Phase: schemas.InstallReady, State: fleet.StateStale,
			Stale: true, Expires: &expires, Verified: true, InSync: true},
		{Install: "globex", Generation: 2, Desired: commit, Applied: commit, Phase: schemas.InstallReady, State: schemas.InstallReady,
			Forged: &schemas.Forged{Commit: strings.Repeat("b", 40), Reason: "not signed by this install's key"}, Verified: true, InSync: true},
		{Install: "initech", Generation: 4, Desired: commit, Applied: commit, Phase: schemas.InstallReady, State: fleet.StateUnreachable,
			Unreachable: true, Time: expires, HeartbeatEvery: "10m0s", Vetoed: []string{"debug"}, Verified: true, InSync: true,
			Components: []fleet.Component{
				{Name: "api", ComponentStatus: schemas.ComponentStatus{Phase: schemas.PhaseApplied, Health: &schemas.Health{Status: schemas.HealthProgressing},
					Drift: []schemas.ResourceDrift{{Kind: "ConfigMap", Name: "a"}, {Kind: "ConfigMap", Name: "b"}}, Corrected: true}},
				{Name: "db", ComponentStatus: schemas.ComponentStatus{Phase: schemas.PhaseApplied, Health: &schemas.Health{Status: schemas.HealthReady}}},
			}},
	}
	var out bytes.Buffer
	printStatus(&out, rows)
	var got [][]string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		got = append(got, strings.Fields(line))
	}
	want := [][]string{
		{"INSTALL", "GEN", "DESIRED", "APPLIED", "STATE", "SYNCED", "VERIFIED", "ARTIFACTS", "FAILING"},
		{"acme", "3", "aaaaaaaaaaaa", "aaaaaaaaaaaa", "Stale", "yes", "yes", "-", "desired", "state", "expired", "2030-01-01T01:00:00Z"},
		{"globex", "2", "aaaaaaaaaaaa", "aaaaaaaaaaaa", "Ready", "yes", "yes", "-", "replaced", "forged", "status", "bbbbbbbbbbbb"},
		{"initech", "4", "aaaaaaaaaaaa", "aaaaaaaaaaaa", "Unreachable", "yes", "yes", "-", "no", "status", "commit", "since", "2030-01-01T01:00:00Z",
			"(heartbeat", "10m0s)", "api(health", "Progressing,", "drift", "2", "corrected)", "turned", "off", "by", "the", "customer:", "debug"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status table (-want +got):\n%s\n%s", diff, out.String())
	}
}

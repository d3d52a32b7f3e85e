package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/fleet"
	"nuon.dev/nuon/schemas"
)

// TestPrintStatusArtifacts: the table shows each agent's artifact
// verification, and an unverified one stands out.
func TestPrintStatusArtifacts(t *testing.T) {
	rows := []fleet.Install{
		{Install: "acme", Generation: 3, Phase: schemas.InstallReady, State: schemas.InstallReady, Verified: true, InSync: true, Artifacts: schemas.ArtifactsVerified},
		{Install: "globex", Generation: 3, Phase: schemas.InstallReady, State: schemas.InstallReady, Verified: true, InSync: true, Artifacts: schemas.ArtifactsUnverified},
		{Install: "initech", Generation: 2, Phase: schemas.InstallDegraded, State: schemas.InstallDegraded, Verified: true,
			Components: []fleet.Component{{Name: "api", ComponentStatus: schemas.ComponentStatus{Phase: schemas.PhaseFailed}}}},
	}
	var b strings.Builder
	printStatus(&b, rows)
	want := `INSTALL  GEN  DESIRED  APPLIED  STATE     SYNCED  VERIFIED  ARTIFACTS   FAILING
acme     3    -        -        Ready     yes     yes       verified    
globex   3    -        -        Ready     yes     yes       UNVERIFIED  
initech  2    -        -        Degraded  no      yes       -           api(Failed)
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

// TestPrintStatusDeferred: an install that holds a change back for its
// customer shows Held, or Waiting for window with the opening, and why;
// its phase stays what the applied components say, not a failure.
func TestPrintStatusDeferred(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	since := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	opens := time.Date(2030, 1, 2, 22, 0, 0, 0, berlin)
	desired := strings.Repeat("b", 40)
	rows := []fleet.Install{
		{Install: "acme", Generation: 4, Phase: schemas.InstallReady, Verified: true, InSync: true, Artifacts: schemas.ArtifactsVerified, Time: since,
			Deferred: &schemas.Deferred{Reason: schemas.DeferredHold, Message: "held by the customer: quarterly audit", Since: since, Commit: desired}},
		{Install: "globex", Generation: 4, Phase: schemas.InstallReady, Verified: true, InSync: true, Artifacts: schemas.ArtifactsVerified, Time: since,
			Deferred: &schemas.Deferred{Reason: schemas.DeferredWindow, Message: "outside every allow window; changes may go ahead at 2030-01-02T22:00:00+01:00 (nights)",
				Since: since, Until: &opens, Commit: desired}},
	}
	for i := range rows {
		rows[i] = rows[i].At(since)
	}
	if rows[0].State != fleet.StateHeld || rows[1].State != fleet.StateWaiting {
		t.Fatalf("states %s, %s; want Held, Waiting", rows[0].State, rows[1].State)
	}
	var b strings.Builder
	printStatus(&b, rows)
	want := `INSTALL  GEN  DESIRED  APPLIED  STATE                                                    SYNCED  VERIFIED  ARTIFACTS  FAILING
acme     4    -        -        Held                                                     yes     yes       verified   deferred bbbbbbbbbbbb: held by the customer: quarterly audit
globex   4    -        -        Waiting for window (opens at 2030-01-02T22:00:00+01:00)  yes     yes       verified   deferred bbbbbbbbbbbb: outside every allow window; changes may go ahead at 2030-01-02T22:00:00+01:00 (nights)
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

package cli

import (
	"strings"
	"testing"

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

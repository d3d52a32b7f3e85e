package server_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/schemas"
)

// TestRolloutFirstPolicyWithPinChange: one commit gives stable its first
// rollout policy and moves its database pin. The change reaches acme, the
// canary, first; initech keeps the old version until the canary passes.
func TestRolloutFirstPolicyWithPinChange(t *testing.T) {
	e := newEnv(t)
	acmeRef, initechRef := schemas.InstallRef("acme"), schemas.InstallRef("initech")
	acmeBefore, initechBefore := e.serverRef(acmeRef), e.serverRef(initechRef)
	e.pushMain("stable rolls out in waves, with database 1.1.0", func(work string) {
		appendFile(t, filepath.Join(work, "channels", "stable.yaml"), "rollout:\n  waves:\n    - name: canary\n      selector: {matchLabels: {ring: canary}}\n      bake: 1h\n    - name: rest\n      rest: true\n")
		appendFile(t, filepath.Join(work, "installs", "acme.yaml"), "labels: {ring: canary}\n")
		replaceIn(t, filepath.Join(work, "channels", "stable.yaml"), "database: 1.0.0", "database: 1.1.0")
	})
	base := e.rolloutState()
	if base.Decision.Kind != schemas.DecisionBaseline || base.To["database"] != "1.0.0" || !strings.Contains(base.Decision.Reason, "before its first rollout policy") {
		t.Fatalf("baseline: %+v to %v", base.Decision, base.To)
	}
	if e.serverRef(initechRef) != initechBefore {
		t.Fatal("initech moved with the commit that brought the policy")
	}
	if got := e.mustGit(e.dir, "show", initechRef+":"+"components/database.json"); !strings.Contains(got, "1.0.0") {
		t.Fatalf("initech's database: %s", got)
	}
	started := e.waitDecision(schemas.DecisionStarted)
	if started.Rollout != 1 || started.To["database"] != "1.1.0" || started.Waves[0].Installs[0] != "acme" {
		t.Fatalf("started: %+v", started)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.serverRef(acmeRef) == acmeBefore {
		if time.Now().After(deadline) {
			t.Fatal("acme did not get the change in wave 1")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := e.mustGit(e.dir, "show", acmeRef+":"+"components/database.json"); !strings.Contains(got, "1.1.0") {
		t.Fatalf("acme's database: %s", got)
	}
	if e.serverRef(initechRef) != initechBefore {
		t.Fatal("initech, outside wave 1, moved")
	}
}

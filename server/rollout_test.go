package server_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// pushMain commits the change edit makes to a clone of upstream's main,
// pushes it and has the server follow it.
func (e *env) pushMain(msg string, edit func(work string)) {
	e.t.Helper()
	work := filepath.Join(e.t.TempDir(), "work")
	e.mustGit("", "clone", "--quiet", "--no-local", "--branch", "main", e.upstream, work)
	edit(work)
	e.mustGit(work, "commit", "--quiet", "-am", msg)
	e.mustGit(work, "push", "--quiet", "origin", "main")
	if err := e.srv.Sync(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, text...), 0o644); err != nil {
		t.Fatal(err)
	}
}

func replaceIn(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s lacks %q", path, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitDecision evaluates the rollouts until stable's rollout ref records
// a decision of kind, and returns its rollout.json.
func (e *env) waitDecision(kind string) schemas.RolloutState {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := e.srv.EvaluateRollouts(context.Background()); err != nil {
			e.t.Fatal(err)
		}
		out, err := gittest.Run(e.dir, nil, "show", schemas.RolloutRef("stable")+":"+schemas.RolloutStateFile)
		if err == nil {
			var s schemas.RolloutState
			if err := json.Unmarshal([]byte(out), &s); err != nil {
				e.t.Fatal(err)
			}
			if s.Decision.Kind == kind {
				return s
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no %s decision; rollout.json: %s", kind, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRolloutHaltsOnCanaryFailure: stable rolls out canary first. A pin
// change reaches acme, the canary, only; acme's agent reports the new
// version failing, in a status signed by its key; the controller halts
// the rollout in a signed commit whose evidence names acme and its
// error, and initech never gets the new version. A push of the rollout
// ref by an install's key is refused.
func TestRolloutHaltsOnCanaryFailure(t *testing.T) {
	e := newEnv(t)
	e.pushMain("stable rolls out in waves", func(work string) {
		appendFile(t, filepath.Join(work, "channels", "stable.yaml"), "rollout:\n  waves:\n    - name: canary\n      selector: {matchLabels: {ring: canary}}\n      bake: 1h\n    - name: rest\n      rest: true\n")
		appendFile(t, filepath.Join(work, "installs", "acme.yaml"), "labels: {ring: canary}\n")
	})
	e.waitDecision(schemas.DecisionBaseline)
	acmeRef, initechRef := schemas.InstallRef("acme"), schemas.InstallRef("initech")
	acmeBefore, initechBefore := e.serverRef(acmeRef), e.serverRef(initechRef)

	e.pushMain("stable: database 1.1.0", func(work string) {
		replaceIn(t, filepath.Join(work, "channels", "stable.yaml"), "database: 1.0.0", "database: 1.1.0")
	})
	if e.serverRef(acmeRef) != acmeBefore || e.serverRef(initechRef) != initechBefore {
		t.Fatal("a pin change moved installs before the controller decided")
	}
	started := e.waitDecision(schemas.DecisionStarted)
	if started.Waves[0].Installs[0] != "acme" {
		t.Fatalf("canary wave %v", started.Waves[0].Installs)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.serverRef(acmeRef) == acmeBefore {
		if time.Now().After(deadline) {
			t.Fatal("acme's desired ref did not move after the wave opened")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if e.serverRef(initechRef) != initechBefore {
		t.Fatal("initech, outside the open wave, moved")
	}

	// acme fails on its new desired commit.
	desired := e.serverRef(acmeRef)
	status, _ := json.Marshal(schemas.Status{APIVersion: schemas.APIVersion, Kind: "Status", Install: "acme", Desired: desired, Applied: desired,
		Phase: schemas.InstallDegraded, Components: map[string]schemas.ComponentStatus{
			"database": {Phase: schemas.PhaseFailed, Error: "terraform apply: engine version 1.1.0 not available"}}})
	local := localRepo(t)
	acme := e.proxy("acme", e.keys["acme"])
	c := e.statusCommit(local, "acme", "", e.keyFiles["acme"], string(status))
	e.mustGit(local, "push", "--quiet", acme, c+":"+schemas.StatusRef("acme"))
	halted := e.waitDecision(schemas.DecisionHalted)
	if len(halted.Decision.Evidence) != 1 || halted.Decision.Evidence[0].Status != c || !strings.Contains(halted.Decision.Evidence[0].Reason, "engine version 1.1.0") {
		t.Fatalf("evidence %+v", halted.Decision.Evidence)
	}
	if e.serverRef(initechRef) != initechBefore {
		t.Fatal("initech moved")
	}
	sig := e.mustGit(e.dir, "log", "-1", "--format=%G? %B", schemas.RolloutRef("stable"))
	if !strings.Contains(sig, "nuon: rollout stable: halted wave 1 (canary)") {
		t.Errorf("halt commit: %s", sig)
	}

	// An install's key may not write the rollout ref.
	before := e.serverRef(schemas.RolloutRef("stable"))
	forged := e.statusCommit(local, "acme", "", e.keyFiles["acme"], "{}")
	out, err := git(local, "push", acme, forged+":"+schemas.RolloutRef("stable"), "--force")
	if err == nil || !strings.Contains(out, "only its own status ref") {
		t.Fatalf("push of the rollout ref: %v\n%s", err, out)
	}
	if e.serverRef(schemas.RolloutRef("stable")) != before {
		t.Fatal("rollout ref moved")
	}
}

// TestRolloutBadInput: a pin to a version with no release record, and a
// rollout whose selector matches no install, are refused with the
// channel file named; nothing moves.
func TestRolloutBadInput(t *testing.T) {
	e := newEnv(t)
	e.pushMain("stable rolls out in waves", func(work string) {
		appendFile(t, filepath.Join(work, "channels", "stable.yaml"), "rollout:\n  waves:\n    - name: canary\n      selector: {matchLabels: {ring: canary}}\n    - name: rest\n      rest: true\n")
		appendFile(t, filepath.Join(work, "installs", "acme.yaml"), "labels: {ring: canary}\n")
	})
	base := e.waitDecision(schemas.DecisionBaseline)
	refsBefore := map[string]string{}
	for _, id := range []string{"acme", "initech", "globex"} {
		refsBefore[id] = e.serverRef(schemas.InstallRef(id))
	}
	rolloutBefore := e.serverRef(schemas.RolloutRef("stable"))
	check := func(want string) {
		t.Helper()
		if _, err := e.srv.EvaluateRollouts(context.Background()); err != nil && !strings.Contains(err.Error(), want) {
			t.Fatalf("evaluate: %v", err)
		}
		if !strings.Contains(e.log.String(), want) {
			t.Fatalf("log lacks %q:\n%s", want, e.log.String())
		}
		if got := e.serverRef(schemas.RolloutRef("stable")); got != rolloutBefore {
			t.Fatalf("rollout ref moved to %s", got)
		}
		for id, before := range refsBefore {
			if got := e.serverRef(schemas.InstallRef(id)); got != before {
				t.Fatalf("%s moved", id)
			}
		}
	}
	e.pushMain("stable: database 9.9.9", func(work string) {
		replaceIn(t, filepath.Join(work, "channels", "stable.yaml"), "database: 1.0.0", "database: 9.9.9")
	})
	check("channels/stable.yaml:4:13: components.database: database 9.9.9 is not released")
	e.pushMain("a canary ring nobody is in", func(work string) {
		replaceIn(t, filepath.Join(work, "channels", "stable.yaml"), "database: 9.9.9", "database: 1.1.0")
		replaceIn(t, filepath.Join(work, "channels", "stable.yaml"), "ring: canary", "ring: canery")
	})
	check("channels/stable.yaml:")
	check("selects no install of channel stable")
	if base.To["database"] != "1.0.0" {
		t.Fatalf("baseline %v", base.To)
	}
}

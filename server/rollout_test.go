package server_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/rollout"
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

// TestRolloutBadInput pushes main commits that are wrong in each way the
// issue names, one after the other, to a server whose stable channel has
// a rollout: each is refused with a message naming the file and line,
// and no install ref and no rollout ref moves. The last, a good pin
// change, then starts the rollout: what the refusals held back was
// there to move.
func TestRolloutBadInput(t *testing.T) {
	e := newEnv(t)
	const policy = "rollout:\n  waves:\n    - name: canary\n      selector: {matchLabels: {ring: canary}}\n    - name: rest\n      rest: true\n"
	e.pushMain("stable rolls out in waves", func(work string) {
		appendFile(t, filepath.Join(work, "channels", "stable.yaml"), policy)
		appendFile(t, filepath.Join(work, "installs", "acme.yaml"), "labels: {ring: canary}\n")
	})
	base := e.waitDecision(schemas.DecisionBaseline)
	if base.To["database"] != "1.0.0" {
		t.Fatalf("baseline %v", base.To)
	}
	good := map[string][]byte{}
	for _, f := range []string{"channels/stable.yaml", "installs/acme.yaml", "installs/initech.yaml"} {
		out, err := gittest.Run(e.upstream, nil, "show", "main:"+f)
		if err != nil {
			t.Fatal(err)
		}
		good[f] = []byte(out + "\n")
	}
	refsBefore := map[string]string{}
	for _, id := range []string{"acme", "initech", "globex"} {
		refsBefore[id] = e.serverRef(schemas.InstallRef(id))
	}
	rolloutBefore := e.serverRef(schemas.RolloutRef("stable"))
	stable := func(work string) string { return filepath.Join(work, "channels", "stable.yaml") }
	for _, tc := range []struct {
		name string
		edit func(work string)
		want []string // each in the error or the server's log
	}{{
		name: "a selector matching no install",
		edit: func(work string) { replaceIn(t, stable(work), "ring: canary", "ring: canery") },
		want: []string{"channels/stable.yaml:11:17: rollout.waves[0].selector: ring=canery selects no install of channel stable"},
	}, {
		name: "overlapping waves",
		edit: func(work string) {
			replaceIn(t, stable(work), "    - name: rest\n", "    - name: canary-again\n      selector: {matchExpressions: [{key: ring, operator: Exists}]}\n    - name: rest\n")
		},
		want: []string{"channels/stable.yaml:13:17: rollout.waves[1].selector: overlaps earlier waves: every install ring selects is in one already (canary)"},
	}, {
		name: "a wave of 0 installs",
		edit: func(work string) {
			replaceIn(t, stable(work), "    - name: rest\n", "    - {name: none, count: 0}\n    - name: rest\n")
		},
		want: []string{"channels/stable.yaml:12:27: rollout.waves[1].count: must be at least 1, not 0"},
	}, {
		name: "shares over 100 %",
		edit: func(work string) {
			replaceIn(t, stable(work), "    - name: rest\n      rest: true\n", "    - {name: most, percent: 60}\n    - {name: more, percent: 50}\n")
		},
		want: []string{"channels/stable.yaml:13:29: rollout.waves[2].percent: the percent waves up to here add up to 110 %, more than 100 %"},
	}, {
		name: "shares that leave installs in no wave",
		edit: func(work string) {
			replaceIn(t, stable(work), "    - name: rest\n      rest: true\n", "")
		},
		want: []string{"channels/stable.yaml:10:5: rollout.waves: 1 install is in no wave: initech; end the waves with rest: true"},
	}, {
		name: "an unknown channel",
		edit: func(work string) {
			replaceIn(t, filepath.Join(work, "installs", "initech.yaml"), "channel: stable", "channel: stabel")
		},
		want: []string{`installs/initech.yaml:1:10: channel: channel "stabel" does not exist (no channels/stabel.yaml)`},
	}, {
		name: "a version that is not released",
		edit: func(work string) { replaceIn(t, stable(work), "database: 1.1.0", "database: 9.9.9") },
		want: []string{"channels/stable.yaml:4:13: components.database: database 9.9.9 is not released"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			logAt := len(e.log.String())
			e.pushMain(tc.name, func(work string) {
				for f, data := range good {
					if err := os.WriteFile(filepath.Join(work, f), data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				// Each case pins a new version: were the input taken,
				// the canary would move.
				replaceIn(t, stable(work), "database: 1.0.0", "database: 1.1.0")
				tc.edit(work)
			})
			var got string
			if _, err := e.srv.EvaluateRollouts(context.Background()); err != nil {
				got = err.Error() + "\n"
			}
			got += e.log.String()[logAt:]
			for _, want := range tc.want {
				if !strings.Contains(got, want) {
					t.Errorf("error and log lack %q:\n%s", want, got)
				}
			}
			if got := e.serverRef(schemas.RolloutRef("stable")); got != rolloutBefore {
				t.Fatalf("rollout ref moved to %s", got)
			}
			for id, before := range refsBefore {
				if got := e.serverRef(schemas.InstallRef(id)); got != before {
					t.Fatalf("%s moved", id)
				}
			}
		})
	}
	e.pushMain("stable: database 1.1.0", func(work string) {
		for f, data := range good {
			if err := os.WriteFile(filepath.Join(work, f), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		replaceIn(t, stable(work), "database: 1.0.0", "database: 1.1.0")
	})
	if s := e.waitDecision(schemas.DecisionStarted); s.To["database"] != "1.1.0" {
		t.Fatalf("started %v", s.To)
	}
	if e.serverRef(schemas.InstallRef("acme")) == refsBefore["acme"] || e.serverRef(schemas.InstallRef("initech")) != refsBefore["initech"] {
		t.Fatal("the good pin change did not move the canary alone")
	}
}

// TestRolloutForgedRef: a rollout ref the server's key did not sign,
// written into the repository behind the server's back (a restored
// backup, a hand-edited mirror), is refused: the render of the next main
// fails naming the ref, the controller logs it and decides nothing on
// the channel, and no install ref moves although the forged state opens
// every wave to a new version.
func TestRolloutForgedRef(t *testing.T) {
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
	// acme's key signs a finished rollout to database 1.1.0.
	forged := base
	forged.Rollout, forged.To = 1, map[string]string{}
	for c, v := range base.To {
		forged.To[c] = v
	}
	forged.To["database"] = "1.1.0"
	forged.Decision = schemas.RolloutDecision{Kind: schemas.DecisionFinished, At: time.Now(), By: "controller", Reason: "forged"}
	repo, err := gitrepo.Open(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	ref := plumbing.ReferenceName(schemas.RolloutRef("stable"))
	tip, err := repo.Ref(ref)
	if err != nil {
		t.Fatal(err)
	}
	b := gitobj.NewBatch()
	h, err := rollout.Commit(b, tip, &forged, e.keys["acme"], object.Signature{Name: "nuon rollout controller", Email: "rollouts@nuon.invalid", When: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(repo.Storer()); err != nil {
		t.Fatal(err)
	}
	e.mustGit(e.dir, "update-ref", ref.String(), h.String(), tip.String())

	work := filepath.Join(t.TempDir(), "work")
	e.mustGit("", "clone", "--quiet", "--no-local", "--branch", "main", e.upstream, work)
	replaceIn(t, filepath.Join(work, "channels", "stable.yaml"), "database: 1.0.0", "database: 1.1.0")
	e.mustGit(work, "commit", "--quiet", "-am", "stable: database 1.1.0")
	e.mustGit(work, "push", "--quiet", "origin", "main")
	err = e.srv.Sync(context.Background())
	if err == nil || !strings.Contains(err.Error(), h.String()) {
		t.Fatalf("render with a forged rollout ref: %v", err)
	}
	if _, err := e.srv.EvaluateRollouts(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.log.String(), "rollout ref refused: nothing moves on the channel") {
		t.Fatalf("the controller did not refuse the forged ref:\n%s", e.log.String())
	}
	if got := e.serverRef(ref.String()); got != h.String() {
		t.Fatalf("rollout ref at %s, the controller wrote over the forged one", got)
	}
	for id, before := range refsBefore {
		if got := e.serverRef(schemas.InstallRef(id)); got != before {
			t.Fatalf("%s moved", id)
		}
	}
}

// TestRolloutUndeclaredReadsNoInstall: while no channel declares a
// rollout the controller reads no install file (a million of them at
// fleet size); the main that declares one reads them all and assigns
// waves.
func TestRolloutUndeclaredReadsNoInstall(t *testing.T) {
	e := newEnv(t)
	if _, err := e.srv.EvaluateRollouts(context.Background()); err != nil {
		t.Fatal(err)
	}
	if log := e.log.String(); !strings.Contains(log, "rollout waves assigned") || !strings.Contains(log, "declared=0") || strings.Contains(log, "read=") {
		t.Fatalf("no rollout declared, the controller's load:\n%s", log)
	}
	e.pushMain("stable rolls out in waves", func(work string) {
		appendFile(t, filepath.Join(work, "channels", "stable.yaml"), "rollout:\n  waves:\n    - name: canary\n      selector: {matchLabels: {ring: canary}}\n    - name: rest\n      rest: true\n")
		appendFile(t, filepath.Join(work, "installs", "acme.yaml"), "labels: {ring: canary}\n")
	})
	e.waitDecision(schemas.DecisionBaseline)
	if !strings.Contains(e.log.String(), "installs=3 read=3") {
		t.Fatalf("the main declaring a rollout read no install:\n%s", e.log.String())
	}
}

package renderer_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

// stableRollout is the rollout the tests give channel stable: acme, the
// canary, first, then the rest.
const stableRollout = `rollout:
  waves:
    - name: canary
      selector:
        matchLabels: {ring: canary}
      bake: 1h
    - name: rest
      rest: true
`

// rolloutTenant is the fixture tenant with stable's rollout and acme
// labelled canary, rendered once.
func rolloutTenant(t *testing.T) *tenant {
	t.Helper()
	tn := newTenant(t)
	b, _ := os.ReadFile(filepath.Join(tn.src, "channels", "stable.yaml"))
	tn.write("channels/stable.yaml", string(b)+stableRollout)
	b, _ = os.ReadFile(filepath.Join(tn.src, "installs", "acme.yaml"))
	tn.write("installs/acme.yaml", string(b)+"labels: {ring: canary}\n")
	tn.commit("stable rolls out in waves")
	return tn
}

// decide runs the controller's decision on the tenant's source as it is.
func decide(t *testing.T, tn *tenant, prev *schemas.RolloutState, reports map[string]rollout.Report, now time.Time) *schemas.RolloutState {
	t.Helper()
	src, err := schemas.Load(os.DirFS(tn.src))
	if err != nil {
		t.Fatal(err)
	}
	all, err := rollout.Load(context.Background(), os.DirFS(tn.src), src)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(tn.src, "channels", "stable.yaml"))
	p, err := rollout.Parse("channels/stable.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	var waves *rollout.Waves
	for _, w := range all {
		if w.Channel == "stable" {
			waves = w
		}
	}
	main := gittest.Git(t, tn.dir, "rev-parse", "main")
	s, err := rollout.Decide(rollout.Input{Policy: p, Waves: waves, State: prev, Pins: src.Channels["stable"].Components, Source: main, Reports: reports, Now: now})
	if err != nil || s == nil {
		t.Fatalf("decide: %v, %v", s, err)
	}
	return s
}

// record writes s as the next commit of stable's rollout ref, signed by
// signer, and returns it.
func record(t *testing.T, tn *tenant, s *schemas.RolloutState, signer gitobj.Signer) plumbing.Hash {
	t.Helper()
	r := tn.open()
	ref := plumbing.ReferenceName(schemas.RolloutRef("stable"))
	old, err := r.Ref(ref)
	if err != nil {
		t.Fatal(err)
	}
	b := gitobj.NewBatch()
	h, err := rollout.Commit(b, old, s, signer, object.Signature{Name: "nuon server", Email: "server@nuon.invalid", When: s.Decision.At})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(r.Storer()); err != nil {
		t.Fatal(err)
	}
	if err := r.Apply(context.Background(), []gitrepo.Update{{Name: ref, Old: old, New: h}}); err != nil {
		t.Fatal(err)
	}
	return h
}

// componentVersion reads a component's version from an install's desired
// ref.
func componentVersion(t *testing.T, tn *tenant, id, component string) string {
	t.Helper()
	files := readTree(t, tn.dir, schemas.InstallRef(id))
	data := files[schemas.ComponentStateFile(component)]
	_, v, ok := strings.Cut(data, `"version": "`)
	if !ok {
		t.Fatalf("%s: no version in %s", id, data)
	}
	v, _, _ = strings.Cut(v, `"`)
	return v
}

// TestRenderRollout renders a pin change of a channel with a rollout:
// only the canary's wave gets it, the others keep the from-pins and get
// no commit at all; the rollback gives the canary its old version back.
// The same main and rollout ref give the same per-install commits
// (golden), and a rollout ref not signed by the server's key fails the
// render, moving nothing.
func TestRenderRollout(t *testing.T) {
	tn := rolloutTenant(t)
	ctx := context.Background()
	render := func() *renderer.Result {
		r := tn.open()
		opts := options(t)
		tip, err := r.Ref(plumbing.ReferenceName(schemas.RolloutRef("stable")))
		if err != nil {
			t.Fatal(err)
		}
		opts.Rollouts = map[string]plumbing.Hash{"stable": tip}
		res, err := renderRepo(ctx, r, "main", opts)
		if err != nil {
			t.Fatalf("render: %v", err)
		}
		if err := apply(ctx, r, res, res.Updates); err != nil {
			t.Fatal(err)
		}
		return res
	}
	server := loadSigner(t, "render")
	at := renderTime
	base := decide(t, tn, nil, nil, at)
	record(t, tn, base, server)
	render()
	if v := componentVersion(t, tn, "acme", "database"); v != "1.0.0" {
		t.Fatalf("acme at baseline has database %s", v)
	}
	before := refs(t, tn.dir)

	tn.edit("channels/stable.yaml", "\n  database: 1.0.0\n", "\n  database: 1.1.0\n")
	tn.commit("stable: database 1.1.0")
	// Main's new pin alone moves nothing: the rollout has not started.
	if res := render(); res.ChangedCount() != 0 {
		t.Fatalf("a pin change before the rollout started moved %d installs", res.ChangedCount())
	}
	started := decide(t, tn, base, nil, at.Add(time.Minute))
	record(t, tn, started, server)
	res := render()
	if !res.Incremental || len(res.Installs) != 1 || res.Installs[0].ID != "acme" || res.Installs[0].Change != renderer.Changed {
		t.Fatalf("the rollout's start rendered %+v (incremental %v), want acme alone", res.Installs, res.Incremental)
	}
	after := refs(t, tn.dir)
	for _, id := range []string{"initech", "globex"} {
		if ref := schemas.InstallRef(id); before[ref] != after[ref] {
			t.Errorf("%s moved outside the open wave", ref)
		}
	}
	if v := componentVersion(t, tn, "acme", "database"); v != "1.1.0" {
		t.Errorf("canary acme has database %s, want 1.1.0", v)
	}
	if v := componentVersion(t, tn, "initech", "database"); v != "1.0.0" {
		t.Errorf("initech, not yet in an open wave, has database %s", v)
	}
	msg := gittest.Git(t, tn.dir, "log", "-1", "--format=%B", schemas.InstallRef("acme"))
	if !strings.Contains(msg, "Pins of rollout 1 of channel stable (running), after decision started") {
		t.Errorf("acme's commit does not say which rollout moved it:\n%s", msg)
	}
	if again := render(); again.ChangedCount() != 0 || !again.Rendered.IsZero() {
		t.Errorf("a second render of the same inputs moved %d installs", again.ChangedCount())
	}

	// The canary passes and the rest opens: initech alone is rendered.
	passed := *started
	passed.Waves = slices.Clone(started.Waves)
	opened := at.Add(2 * time.Hour)
	passed.Waves[0].Passed, passed.Waves[1].Opened, passed.Waves[1].Installs = &opened, &opened, []string{"initech"}
	passed.Decision = schemas.RolloutDecision{Kind: schemas.DecisionPassed, Wave: 1, At: opened, By: rollout.By, Reason: "test"}
	tip := record(t, tn, &passed, server)
	res = render()
	if !res.Incremental || len(res.Installs) != 1 || res.Installs[0].ID != "initech" {
		t.Errorf("opening wave rest rendered %+v (incremental %v), want initech alone", res.Installs, res.Incremental)
	}
	// initech pins its own api: the rollout gives it database only.
	if v := componentVersion(t, tn, "initech", "database"); v != "1.1.0" {
		t.Errorf("initech in the opened wave has database %s", v)
	}
	if v := componentVersion(t, tn, "initech", "api"); v != "2.4.0" {
		t.Errorf("initech's own api pin became %s", v)
	}
	// Back to the state before, as a rollout ref reset would: initech
	// goes back too.
	r := tn.open()
	ref := plumbing.ReferenceName(schemas.RolloutRef("stable"))
	startedTip := plumbing.NewHash(gittest.Git(t, tn.dir, "rev-parse", tip.String()+"^"))
	if err := r.Apply(ctx, []gitrepo.Update{{Name: ref, Old: tip, New: startedTip}}); err != nil {
		t.Fatal(err)
	}
	render()
	if v := componentVersion(t, tn, "initech", "database"); v != "1.0.0" {
		t.Errorf("initech after the reset has database %s", v)
	}

	// The canary fails: rolled back, it gets its old version again.
	s := *started
	s.Phase = schemas.RolloutRolledBack
	s.Rollback = map[string]map[string]string{"acme": started.From}
	s.Decision = schemas.RolloutDecision{Kind: schemas.DecisionRolledBack, Wave: 1, At: at.Add(time.Hour), By: rollout.By, Reason: "test"}
	record(t, tn, &s, server)
	res = render()
	if !res.Incremental || len(res.Installs) != 1 || res.Installs[0].ID != "acme" || res.Installs[0].Change != renderer.Changed {
		t.Errorf("a rollback of acme rendered %+v (incremental %v), want acme alone", res.Installs, res.Incremental)
	}
	if v := componentVersion(t, tn, "acme", "database"); v != "1.0.0" {
		t.Errorf("rolled back acme has database %s, want 1.0.0", v)
	}
	var lines []string
	for _, id := range []string{"acme", "globex", "initech"} {
		lines = append(lines, fmt.Sprintf("%s %s", schemas.InstallRef(id), gittest.Git(t, tn.dir, "rev-parse", schemas.InstallRef(id))))
	}
	goldenFile(t, filepath.Join("testdata", "rollout", "install-refs.txt"), []byte(strings.Join(lines, "\n")+"\n"))

	// A rollout commit an install's key signed: the render fails and
	// nothing moves.
	before = refs(t, tn.dir)
	forged := s
	forged.Phase, forged.Rollback = schemas.RolloutFinished, nil
	forged.Decision.Kind = schemas.DecisionFinished
	for i := range forged.Waves {
		forged.Waves[i].Opened, forged.Waves[i].Passed = &at, &at
	}
	tip = record(t, tn, &forged, loadSigner(t, "acme"))
	opts := options(t)
	opts.Rollouts = map[string]plumbing.Hash{"stable": tip}
	_, err := renderRepo(ctx, tn.open(), "main", opts)
	if !errors.Is(err, rollout.ErrUnsigned) || !strings.Contains(err.Error(), schemas.RolloutRef("stable")) {
		t.Fatalf("render of a forged rollout ref: %v", err)
	}
	after = refs(t, tn.dir)
	delete(after, schemas.RolloutRef("stable"))
	delete(before, schemas.RolloutRef("stable"))
	if !slices.Equal(sortedValues(before), sortedValues(after)) {
		t.Errorf("refs moved on a forged rollout ref")
	}
}

// TestRenderWithoutRolloutPolicy: a rollout ref of a channel that
// declares no rollout on main changes nothing.
func TestRenderWithoutRolloutPolicy(t *testing.T) {
	tn := newTenant(t)
	tn.render(options(t))
	before := refs(t, tn.dir)
	st := &schemas.RolloutState{APIVersion: schemas.APIVersion, Kind: schemas.KindRolloutState, Channel: "stable", Phase: schemas.RolloutFinished,
		From: map[string]string{"database": "9.9.9"}, To: map[string]string{"database": "9.9.9"}, Waves: []schemas.RolloutWaveState{},
		Decision: schemas.RolloutDecision{Kind: schemas.DecisionBaseline, At: renderTime, By: rollout.By}}
	tip := record(t, tn, st, loadSigner(t, "render"))
	opts := options(t)
	opts.Rollouts = map[string]plumbing.Hash{"stable": tip}
	res := tn.render(opts)
	if res.ChangedCount() != 0 {
		t.Fatalf("%d installs changed", res.ChangedCount())
	}
	for _, id := range []string{"acme", "initech", "globex"} {
		if ref := schemas.InstallRef(id); refs(t, tn.dir)[ref] != before[ref] {
			t.Errorf("%s moved", ref)
		}
	}
}

func sortedValues(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+" "+v)
	}
	slices.Sort(out)
	return out
}

// TestRenderRolloutFinish: a channel's first rollout state, a baseline,
// renders no install. A rollout's finish changes the default pins,
// yet renders only the installs its state does not name — one added to
// main while the rollout ran, which gets the new version now, and those
// of other channels, unchanged — not the installs its waves moved.
func TestRenderRolloutFinish(t *testing.T) {
	tn := rolloutTenant(t)
	ctx := context.Background()
	render := func() *renderer.Result {
		r := tn.open()
		opts := options(t)
		tip, err := r.Ref(plumbing.ReferenceName(schemas.RolloutRef("stable")))
		if err != nil {
			t.Fatal(err)
		}
		opts.Rollouts = map[string]plumbing.Hash{"stable": tip}
		res, err := renderRepo(ctx, r, "main", opts)
		if err != nil {
			t.Fatalf("render: %v", err)
		}
		if err := apply(ctx, r, res, res.Updates); err != nil {
			t.Fatal(err)
		}
		return res
	}
	server := loadSigner(t, "render")
	at := renderTime
	render()
	base := decide(t, tn, nil, nil, at)
	record(t, tn, base, server)
	// The channel's first state, a baseline of its pins, moves nothing
	// and reads no install file.
	if res := render(); !res.Incremental || len(res.Installs) != 0 {
		t.Fatalf("the baseline rendered %+v (incremental %v), want none", res.Installs, res.Incremental)
	}
	tn.edit("channels/stable.yaml", "\n  database: 1.0.0\n", "\n  database: 1.1.0\n")
	tn.commit("stable: database 1.1.0")
	started := decide(t, tn, base, nil, at.Add(time.Minute))
	record(t, tn, started, server)
	render()
	// hooli joins stable while the rollout runs: in no wave, it gets the
	// from-pins.
	b, err := os.ReadFile(filepath.Join(tn.src, "installs", "acme.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	hooli := strings.ReplaceAll(strings.Replace(string(b), "labels: {ring: canary}\n", "", 1), "acme", "hooli")
	tn.write("installs/hooli.yaml", hooli)
	tn.commit("hooli joins stable")
	render()
	if v := componentVersion(t, tn, "hooli", "database"); v != "1.0.0" {
		t.Fatalf("hooli, added while the rollout runs, has database %s", v)
	}
	passed := *started
	passed.Waves = slices.Clone(started.Waves)
	opened := at.Add(2 * time.Hour)
	passed.Waves[0].Passed, passed.Waves[1].Opened, passed.Waves[1].Installs = &opened, &opened, []string{"initech"}
	passed.Decision = schemas.RolloutDecision{Kind: schemas.DecisionPassed, Wave: 1, At: opened, By: rollout.By, Reason: "test"}
	record(t, tn, &passed, server)
	render()
	before := refs(t, tn.dir)

	finished := passed
	finished.Waves = slices.Clone(passed.Waves)
	done := at.Add(3 * time.Hour)
	finished.Waves[1].Passed, finished.Phase = &done, schemas.RolloutFinished
	finished.Decision = schemas.RolloutDecision{Kind: schemas.DecisionFinished, Wave: 2, At: done, By: rollout.By, Reason: "test"}
	record(t, tn, &finished, server)
	res := render()
	var ids []string
	for _, in := range res.Installs {
		ids = append(ids, in.ID)
	}
	if !res.Incremental || !slices.Equal(ids, []string{"globex", "hooli"}) {
		t.Fatalf("the finish rendered %v (incremental %v), want globex and hooli, the installs its state does not name", ids, res.Incremental)
	}
	if v := componentVersion(t, tn, "hooli", "database"); v != "1.1.0" {
		t.Errorf("hooli after the finish has database %s, want 1.1.0", v)
	}
	after := refs(t, tn.dir)
	for _, id := range []string{"acme", "initech", "globex"} {
		if ref := schemas.InstallRef(id); before[ref] != after[ref] {
			t.Errorf("the finish moved %s", ref)
		}
	}
}

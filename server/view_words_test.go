package server

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/fleet"
	"nuon.dev/nuon/schemas"
)

// wholeInstall is an install as fleet reads it, with everything the
// index does not keep: commit ids, digests, outputs, spec, plan, health
// resources, drift details.
func wholeInstall(id, channel, phase string, seen time.Time, comps ...fleet.Component) *viewInstall {
	in := &viewInstall{ID: id, desiredH: [20]byte{1}, statsH: [20]byte{2}, file: [20]byte{3},
		Desired: fleet.Desired{Commit: "0101", Channel: channel, Generation: 3, Time: seen.Add(-time.Hour),
			Versions: map[string]string{"api": "2.4.0", "db": "1.0.0"}}}
	if phase != "" {
		for i := range comps {
			comps[i].Digests = map[string]string{"app": "sha256:" + id}
			comps[i].Spec, comps[i].Job = "spec-"+id, "job-"+id
			comps[i].Outputs = map[string]any{"url": "https://" + id}
			comps[i].Plan = &schemas.PlanRecord{Hash: "plan-" + id}
		}
		in.Status = &fleet.Install{Install: id, Commit: "0202", Desired: "0101", Applied: "0101", Rendered: "0101",
			Phase: phase, Generation: 3, InSync: true, Verified: true, HeartbeatEvery: "10m0s", Time: seen, Components: comps}
	}
	return in
}

// TestViewWordsSlim: an index of slim installs (viewWords.slim) answers
// every list, filter, order and count as the index of the installs read
// whole, and installs that report the same plain components share them.
func TestViewWordsSlim(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	applied := func(name, version string) fleet.Component { return comp(name, version, schemas.PhaseApplied) }
	failed := comp("db", "1.0.0", schemas.PhaseFailed)
	failed.Error = "terraform apply: AccessDenied"
	drifted := applied("db", "1.0.0")
	drifted.Drift = []schemas.ResourceDrift{{Kind: "Deployment", Name: "db", Action: "update", Fields: []string{"spec.replicas"}}}
	corrected := drifted
	corrected.Corrected = true
	sick := applied("db", "1.0.0")
	sick.Health = &schemas.Health{Status: schemas.HealthProgressing, Message: "1 of 3 pods ready", Resources: []schemas.ResourceHealth{{Kind: "Pod", Name: "db-0", Status: "NotReady"}}}
	healthy := applied("db", "1.0.0")
	healthy.Health = &schemas.Health{Status: schemas.HealthReady, Resources: []schemas.ResourceHealth{{Kind: "Pod", Name: "db-0", Status: "Ready"}}}
	awaiting := comp("db", "1.0.0", schemas.PhaseAwaitingApproval)

	var installs []*viewInstall
	add := func(in *viewInstall) {
		if in.Status != nil {
			*in.Status = in.Status.At(time.Time{}) // as fleet.ReadInstall reads it
		}
		installs = append(installs, in)
	}
	add(wholeInstall("failed", "stable", schemas.InstallDegraded, now, applied("api", "2.4.0"), failed))
	failed2 := failed
	failed2.Error = "terraform apply: Throttling" // the same list but for its error
	add(wholeInstall("failed2", "stable", schemas.InstallDegraded, now, applied("api", "2.4.0"), failed2))
	add(wholeInstall("drifted", "beta", schemas.InstallReady, now, applied("api", "2.4.0"), drifted))
	add(wholeInstall("corrected", "beta", schemas.InstallReady, now, applied("api", "2.4.0"), corrected))
	add(wholeInstall("sick", "stable", schemas.InstallReady, now, applied("api", "2.4.0"), sick))
	add(wholeInstall("awaiting", "stable", schemas.InstallReady, now, applied("api", "2.4.0"), awaiting))
	add(wholeInstall("late", "stable", schemas.InstallReady, now.Add(-time.Hour), applied("api", "2.4.0")))
	add(wholeInstall("unreported", "stable", "", now))
	held := wholeInstall("held", "stable", schemas.InstallReady, now, applied("api", "2.3.0"))
	held.Status.Deferred = &schemas.Deferred{Reason: schemas.DeferredHold, Message: "change freeze", Commit: "0101"}
	held.Status.InSync = false
	add(held)
	refused := wholeInstall("refused", "stable", schemas.InstallRefused, now)
	refused.Status.Refusal = &schemas.Refusal{Commit: "0101", Reason: "signed by an unknown key"}
	refused.Status.Verified, refused.Status.VerifyError = false, "not signed by the install's key"
	refused.Status.Vetoed = []string{"destroy"}
	add(refused)
	broken := wholeInstall("broken", "stable", "", now)
	broken.Err = "desired state 0101: object not found"
	add(broken)
	for i := range 20 {
		add(wholeInstall(fmt.Sprintf("plain%02d", i), []string{"stable", "beta"}[i%2], schemas.InstallReady, now, applied("api", "2.4.0"), healthy))
	}

	v := &view{s: &Server{cfg: Config{ViewStaleAfter: 10 * time.Minute}}}
	build := func(slim bool) *fleetIndex {
		x := newFleetIndex()
		changed := map[string]*viewEntry{}
		for _, in := range installs {
			if slim {
				in = x.words.slim(in)
			}
			changed[in.ID] = newEntry(in, map[string]string{"region": "eu"}, now, nil)
		}
		x.apply(changed)
		x.advance(now)
		return x
	}
	whole, slim := build(false), build(true)

	if diff := cmp.Diff(whole.summary, slim.summary); diff != "" {
		t.Errorf("summary (-whole +slim):\n%s", diff)
	}
	if diff := cmp.Diff(ids(whole.order), ids(slim.order)); diff != "" {
		t.Errorf("problems first (-whole +slim):\n%s", diff)
	}
	for _, in := range installs {
		w, s := whole.entries[in.ID], slim.entries[in.ID]
		if w.state != s.state || w.rank != s.rank || w.traits != s.traits || !w.late.Equal(s.late) {
			t.Errorf("%s: state %q rank %d traits %b late %v, slim: %q %d %b %v", in.ID, w.state, w.rank, w.traits, w.late, s.state, s.rank, s.traits, s.late)
		}
		if ws, ss := symWords(whole, w), symWords(slim, s); !slices.Equal(ws, ss) {
			t.Errorf("%s: symbols %q, slim %q", in.ID, ws, ss)
		}
		if diff := cmp.Diff(v.listRow(w, now), v.listRow(s, now)); diff != "" {
			t.Errorf("%s: list row (-whole +slim):\n%s", in.ID, diff)
		}
	}
	for _, q := range []string{"state=Degraded", "is=drifted", "is=corrected", "is=awaiting-approval", "is=unverified", "is=out-of-sync",
		"component=db&phase=Failed", "component=api&version=2.4.0", "channel=beta", "q=plain0", "q=region=eu", "state=Unreachable", "phase=AwaitingApproval"} {
		match := func(x *fleetIndex) []string {
			m := x.compile(parseFleetQuery(mustQuery(t, q)))
			var got []string
			for _, e := range x.byID {
				if m.match(e) {
					got = append(got, e.in.ID)
				}
			}
			return got
		}
		w, s := match(whole), match(slim)
		if len(w) == 0 {
			t.Errorf("%s matches nothing: the table misses a case", q)
		}
		if diff := cmp.Diff(w, s); diff != "" {
			t.Errorf("%s (-whole +slim):\n%s", q, diff)
		}
	}

	// Installs reporting the same plain components share one list.
	a, b := slim.entries["plain00"].in.Status.Components, slim.entries["plain01"].in.Status.Components
	if &a[0] != &b[0] || a[1].Health != b[1].Health {
		t.Error("two installs reporting the same plain components each keep their own")
	}
	if f, d := slim.entries["failed"].in.Status.Components, slim.entries["drifted"].in.Status.Components; &f[0] == &a[0] || &d[0] == &a[0] {
		t.Error("a list with an error or drift is shared")
	}
	// Nothing whole kept: the install's page reads it again.
	s := slim.entries["plain00"]
	if s.in.Desired.Commit != "" || s.in.Status.Commit != "" || s.in.Status.Components[1].Health.Resources != nil || s.in.Status.Components[0].Digests != nil || s.in.Status.Components[0].Plan != nil {
		t.Errorf("slim install keeps what it reads again: %+v", s.in.Status)
	}
	if s.row != s.in.Status {
		t.Error("an entry whose row is its status as read keeps a copy")
	}
	// The installs read whole are not changed.
	if installs[0].Status.Commit != "0202" || installs[0].Desired.Commit != "0101" || installs[0].Status.Components[0].Plan == nil {
		t.Error("slim changed the install it was given")
	}
}

// symWords is the words of e's symbols in x: state, channel, and each
// component's name, version and phase.
func symWords(x *fleetIndex, e *viewEntry) []string {
	word := map[uint32]string{}
	for w, n := range x.syms {
		word[n] = w
	}
	out := []string{word[e.stateSym], word[e.channelSym]}
	for _, c := range e.comps {
		out = append(out, word[c.name], word[c.version], word[c.phase])
	}
	return out
}

package server

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/fleet"
	"nuon.dev/nuon/schemas"
)

// indexInstall is an install of the index tests: phase and heartbeat as
// its agent reported them at seen.
func indexInstall(id, channel, phase string, seen time.Time, every string, comps ...fleet.Component) *viewInstall {
	in := &viewInstall{ID: id, Desired: fleet.Desired{Channel: channel, Generation: 1}}
	if phase != "" {
		in.Status = &fleet.Install{Install: id, Phase: phase, Generation: 1, InSync: true, Verified: true, HeartbeatEvery: every, Time: seen, Components: comps}
	}
	return in
}

func comp(name, version, phase string) fleet.Component {
	return fleet.Component{Name: name, ComponentStatus: schemas.ComponentStatus{Version: version, Phase: phase}}
}

// ids lists an order's install ids.
func ids(es []*viewEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.in.ID)
	}
	return out
}

// TestFleetIndexMoves: the index moved one install at a time (a status
// pushed, an install gone, a heartbeat turned late) has the counts and
// orders of an index built at once from the same installs.
func TestFleetIndexMoves(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	ok := comp("api", "2.4.0", schemas.PhaseApplied)
	installs := []*viewInstall{
		indexInstall("acme", "stable", schemas.InstallReady, now, "10m0s", ok),
		indexInstall("globex", "beta", schemas.InstallDegraded, now, "10m0s", comp("api", "2.3.0", schemas.PhaseApplied), comp("db", "", schemas.PhaseFailed)),
		indexInstall("initech", "stable", "", now, ""),
		indexInstall("umbrella", "stable", schemas.InstallReady, now.Add(-15*time.Minute), "10m0s", ok),
		indexInstall("hooli", "beta", schemas.InstallReady, now.Add(-time.Hour), "", ok),
	}
	// Enough others that one change is not a bulk change.
	for i := range 40 {
		installs = append(installs, indexInstall(fmt.Sprintf("z%02d", i), "stable", schemas.InstallReady, now, "10m0s", ok))
	}

	built := func(at time.Time, ins []*viewInstall) *fleetIndex {
		x := newFleetIndex()
		changed := map[string]*viewEntry{}
		for _, in := range ins {
			changed[in.ID] = newEntry(in, nil, at, nil)
		}
		x.apply(changed)
		x.advance(at)
		return x
	}
	same := func(t *testing.T, want, got *fleetIndex) {
		t.Helper()
		if diff := cmp.Diff(want.summary, got.summary); diff != "" {
			t.Errorf("summary (-built +moved):\n%s", diff)
		}
		if diff := cmp.Diff(ids(want.order), ids(got.order)); diff != "" {
			t.Errorf("problems first (-built +moved):\n%s", diff)
		}
		if diff := cmp.Diff(ids(want.byID), ids(got.byID)); diff != "" {
			t.Errorf("by id (-built +moved):\n%s", diff)
		}
	}

	x := built(now, installs)
	if got := x.summary.States; !cmp.Equal(got, map[string]int{schemas.InstallReady: 43, schemas.InstallDegraded: 1, phaseUnreported: 1}) {
		t.Errorf("states at first: %v", got)
	}
	if got := ids(x.order[:3]); !cmp.Equal(got, []string{"globex", "initech", "acme"}) {
		t.Errorf("problems first: %v", got)
	}

	// umbrella's heartbeat (10m, last seen 15m ago) turns late at +5m.
	later := now.Add(6 * time.Minute)
	x.advance(later)
	if x.entries["umbrella"].state != fleet.StateUnreachable || x.summary.States[fleet.StateUnreachable] != 1 {
		t.Errorf("umbrella at +6m: %s, states %v", x.entries["umbrella"].state, x.summary.States)
	}
	same(t, built(later, installs), x)

	// initech reports, z00 is deleted, globex recovers.
	next := append([]*viewInstall{}, installs...)
	next[1] = indexInstall("globex", "beta", schemas.InstallReady, later, "10m0s", comp("api", "2.4.0", schemas.PhaseApplied), comp("db", "1.0.0", schemas.PhaseApplied))
	next[2] = indexInstall("initech", "stable", schemas.InstallReady, later, "10m0s", ok)
	next = append(next[:5], next[6:]...)
	x.apply(map[string]*viewEntry{
		"globex":  newEntry(next[1], nil, later, nil),
		"initech": newEntry(next[2], nil, later, nil),
		"z00":     nil,
	})
	same(t, built(later, next), x)
	if x.summary.Failing["db"] != 0 || x.summary.Versions["api"]["2.3.0"] != 0 || x.summary.Versions["db"]["1.0.0"] != 1 {
		t.Errorf("after globex recovered: failing %v, versions %v", x.summary.Failing, x.summary.Versions)
	}

	// acme's old entry, replaced, must not turn late: its new status is
	// fresh.
	acme := indexInstall("acme", "stable", schemas.InstallReady, later, "10m0s", ok)
	next[0] = acme
	x.apply(map[string]*viewEntry{"acme": newEntry(acme, nil, later, nil)})
	end := now.Add(21 * time.Minute) // the old acme would be late; the new one is not
	x.advance(end)
	if x.entries["acme"].state != schemas.InstallReady {
		t.Errorf("acme at +21m after a fresh status: %s", x.entries["acme"].state)
	}
	same(t, built(end, next), x)
}

// TestFleetQuery: each filter of the list, alone.
func TestFleetQuery(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	drift := comp("web", "1.0.0", schemas.PhaseApplied)
	drift.Drift = []schemas.ResourceDrift{{Kind: "Deployment", Name: "web", Action: "update"}}
	corrected := drift
	corrected.Corrected = true
	x := newFleetIndex()
	add := func(in *viewInstall, labels map[string]string) {
		x.apply(map[string]*viewEntry{in.ID: newEntry(in, labels, now, nil)})
	}
	add(indexInstall("acme-1", "stable", schemas.InstallReady, now, "", comp("api", "2.4.0", schemas.PhaseApplied)), map[string]string{"region": "eu"})
	add(indexInstall("acme-2", "beta", schemas.InstallDegraded, now, "", comp("api", "2.3.0", schemas.PhaseFailed)), map[string]string{"region": "us"})
	add(indexInstall("globex", "stable", schemas.InstallReady, now, "", drift), nil)
	add(indexInstall("initech", "stable", schemas.InstallReady, now, "", corrected), nil)
	behind := indexInstall("hooli", "stable", schemas.InstallReady, now, "", comp("api", "2.4.0", schemas.PhaseApplied))
	behind.Status.InSync = false
	add(behind, nil)

	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"q=acme", []string{"acme-1", "acme-2"}},
		{"q=region=us", []string{"acme-2"}},
		{"state=Degraded", []string{"acme-2"}},
		{"channel=beta", []string{"acme-2"}},
		{"component=api", []string{"acme-1", "acme-2", "hooli"}},
		{"component=api&version=2.4.0", []string{"acme-1", "hooli"}},
		{"phase=Failed", []string{"acme-2"}},
		{"is=drifted", []string{"globex"}},
		{"is=corrected", []string{"initech"}},
		{"is=out-of-sync", []string{"hooli"}},
		{"is=nonsense", nil},
		{"component=nonesuch", nil},
		{"state=Degraded&channel=stable", nil},
	} {
		t.Run(tc.query, func(t *testing.T) {
			m := x.compile(parseFleetQuery(mustQuery(t, tc.query)))
			var got []string
			for _, e := range x.byID {
				if m.match(e) {
					got = append(got, e.in.ID)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.query, diff)
			}
		})
	}
}

func mustQuery(t *testing.T, s string) url.Values {
	t.Helper()
	v, err := url.ParseQuery(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

package renderer_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

// TestRenderPinsOnly: a change of a channel's pins alone, while the
// channel's rollout state gives its installs their pins, renders no
// install (an incremental render of none); anything else about the
// channel renders every install, as before. Either way every install's
// tree is what a full render makes of the same main and rollout refs:
// one from the install refs alone (no rendered commit to trust) moves
// none, and one from nothing at all makes the same trees.
func TestRenderPinsOnly(t *testing.T) {
	server := loadSigner(t, "render")
	at := renderTime
	// baseline records the channel's first state, a baseline of its
	// pins (finished), and renders it.
	baseline := func(t *testing.T, tn *tenant) *schemas.RolloutState {
		s := decide(t, tn, nil, nil, at)
		record(t, tn, s, server)
		renderWith(t, tn, true)
		return s
	}
	// running has the baseline, then database 1.1.0 on main, the rollout
	// started with acme's wave open, all rendered.
	running := func(t *testing.T, tn *tenant) {
		base := baseline(t, tn)
		tn.edit("channels/stable.yaml", "\n  database: 1.0.0\n", "\n  database: 1.1.0\n")
		tn.commit("stable: database 1.1.0")
		renderWith(t, tn, true)
		record(t, tn, decide(t, tn, base, nil, at.Add(time.Minute)), server)
		renderWith(t, tn, true)
	}
	dashboards := func(tn *tenant) {
		tn.edit("channels/stable.yaml", "\n  dashboards: 1.1.0\n", "\n  dashboards: 1.2.0\n")
	}
	for _, tc := range []struct {
		name string
		// setup brings the tenant to the render before the change;
		// change edits main's source, committed after.
		setup  func(t *testing.T, tn *tenant)
		change func(tn *tenant)
		// rollouts: the render reads the rollout refs.
		rollouts bool
		// incremental: the render is incremental, rendering none;
		// otherwise it renders every install.
		incremental bool
		// moved are the installs whose tree the change moves.
		moved []string
	}{{
		name:  "baseline state, pin changed",
		setup: func(t *testing.T, tn *tenant) { baseline(t, tn) },
		change: func(tn *tenant) {
			tn.edit("channels/stable.yaml", "\n  database: 1.0.0\n", "\n  database: 1.1.0\n")
		},
		rollouts: true, incremental: true,
	}, {
		name:  "baseline state, pins and comments changed",
		setup: func(t *testing.T, tn *tenant) { baseline(t, tn) },
		change: func(tn *tenant) {
			tn.edit("channels/stable.yaml", "\n  database: 1.0.0\n", "\n  # on beta since May\n  database: 1.1.0 # after beta\n")
			dashboards(tn)
		},
		rollouts: true, incremental: true,
	}, {
		name:     "running state, another pin changed",
		setup:    running,
		change:   dashboards,
		rollouts: true, incremental: true,
	}, {
		name: "finished state, pin changed",
		setup: func(t *testing.T, tn *tenant) {
			base := baseline(t, tn)
			tn.edit("channels/stable.yaml", "\n  database: 1.0.0\n", "\n  database: 1.1.0\n")
			tn.commit("stable: database 1.1.0")
			s := decide(t, tn, base, nil, at.Add(time.Minute))
			done := at.Add(time.Hour)
			for i := range s.Waves {
				s.Waves[i].Opened, s.Waves[i].Passed = &done, &done
			}
			s.Phase = schemas.RolloutFinished
			s.Decision = schemas.RolloutDecision{Kind: schemas.DecisionFinished, Wave: len(s.Waves), At: done, By: rollout.By, Reason: "test"}
			record(t, tn, s, server)
			renderWith(t, tn, true)
		},
		// The finished state's to-pins, not main's, give stable's
		// installs their versions until the controller decides again.
		change:   dashboards,
		rollouts: true, incremental: true,
	}, {
		name:  "baseline state, rollout policy changed too",
		setup: func(t *testing.T, tn *tenant) { baseline(t, tn) },
		change: func(tn *tenant) {
			dashboards(tn)
			tn.edit("channels/stable.yaml", "bake: 1h", "bake: 2h")
		},
		rollouts: true,
	}, {
		name:  "baseline state, rollout policy removed",
		setup: func(t *testing.T, tn *tenant) { baseline(t, tn) },
		change: func(tn *tenant) {
			dashboards(tn)
			tn.edit("channels/stable.yaml", stableRollout, "")
		},
		rollouts: true, moved: []string{"acme", "initech"},
	}, {
		name:  "no state read",
		setup: func(t *testing.T, tn *tenant) { baseline(t, tn) },
		change: func(tn *tenant) {
			tn.edit("channels/stable.yaml", "\n  database: 1.0.0\n", "\n  database: 1.1.0\n")
		},
		moved: []string{"acme", "initech"},
	}, {
		name: "first state in this render",
		setup: func(t *testing.T, tn *tenant) {
			renderWith(t, tn, false)
			record(t, tn, decide(t, tn, nil, nil, at), server)
		},
		change: func(tn *tenant) {
			tn.edit("channels/stable.yaml", "\n  database: 1.0.0\n", "\n  database: 1.1.0\n")
		},
		rollouts: true,
	}, {
		name: "state without the changed component",
		setup: func(t *testing.T, tn *tenant) {
			s := decide(t, tn, nil, nil, at)
			delete(s.From, "dashboards")
			delete(s.To, "dashboards")
			record(t, tn, s, server)
			renderWith(t, tn, true)
		},
		change:   dashboards,
		rollouts: true, moved: []string{"acme", "initech"},
	}, {
		name:  "channel without a rollout",
		setup: func(t *testing.T, tn *tenant) { baseline(t, tn) },
		change: func(tn *tenant) {
			tn.edit("channels/beta.yaml", "\n  dashboards: 1.2.0\n", "\n  dashboards: 1.1.0\n")
		},
		rollouts: true, moved: []string{"globex"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tn := rolloutTenant(t)
			tc.setup(t, tn)
			before := refs(t, tn.dir)
			tc.change(tn)
			tn.commit("stable: " + tc.name)
			res := renderWith(t, tn, tc.rollouts)
			var ids []string
			for _, in := range res.Installs {
				ids = append(ids, in.ID)
			}
			if tc.incremental {
				if !res.Incremental || len(ids) != 0 {
					t.Errorf("rendered %v (incremental %v), want none", ids, res.Incremental)
				}
			} else if res.Incremental || len(ids) != 3 {
				t.Errorf("rendered %v (incremental %v), want all three", ids, res.Incremental)
			}
			after := refs(t, tn.dir)
			var moved []string
			for _, id := range []string{"acme", "globex", "initech"} {
				if ref := schemas.InstallRef(id); before[ref] != after[ref] {
					moved = append(moved, id)
				}
			}
			if !slices.Equal(moved, tc.moved) {
				t.Errorf("moved %v, want %v", moved, tc.moved)
			}
			assertFullRender(t, tn, tc.rollouts)
		})
	}
}

// renderWith renders main and applies the result, reading stable's
// rollout ref when rollouts.
func renderWith(t *testing.T, tn *tenant, rollouts bool) *renderer.Result {
	t.Helper()
	r := tn.open()
	opts := options(t)
	if rollouts {
		tip, err := r.Ref(plumbing.ReferenceName(schemas.RolloutRef("stable")))
		if err != nil {
			t.Fatal(err)
		}
		opts.Rollouts = map[string]plumbing.Hash{"stable": tip}
	}
	res, err := renderRepo(context.Background(), r, "main", opts)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	if err := apply(context.Background(), r, res, res.Updates); err != nil {
		t.Fatal(err)
	}
	return res
}

// assertFullRender renders main in full twice, writing no ref: from the
// install refs without the rendered commit, it must move none; from
// nothing, its install trees must be those of the install refs.
func assertFullRender(t *testing.T, tn *tenant, rollouts bool) {
	t.Helper()
	ctx := context.Background()
	r := tn.open()
	opts := options(t)
	if rollouts {
		tip, err := r.Ref(plumbing.ReferenceName(schemas.RolloutRef("stable")))
		if err != nil {
			t.Fatal(err)
		}
		opts.Rollouts = map[string]plumbing.Hash{"stable": tip}
	}
	src, err := r.Resolve("main")
	if err != nil {
		t.Fatal(err)
	}
	current := map[string]plumbing.Hash{}
	var prev renderer.Previous
	for _, id := range []string{"acme", "globex", "initech"} {
		h, err := r.Ref(plumbing.ReferenceName(schemas.InstallRef(id)))
		if err != nil {
			t.Fatal(err)
		}
		current[id] = h
		prev.Refs = append(prev.Refs, renderer.InstallRef{ID: id, Commit: h})
	}
	full, err := renderer.Render(ctx, r.Storer(), src, prev, opts)
	if err != nil {
		t.Fatal(err)
	}
	if full.Incremental || len(full.Installs) != 3 || full.ChangedCount() != 0 {
		t.Errorf("a full render from the install refs rendered %+v (incremental %v), want all three unchanged", full.Installs, full.Incremental)
	}
	fresh, err := renderer.Render(ctx, r.Storer(), src, renderer.Previous{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.Objects.Flush(r.Storer()); err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	for _, u := range fresh.Updates {
		if id, ok := installOf(u.Name); ok {
			got[id] = readTree(t, tn.dir, u.New.String())
		}
	}
	for id, h := range current {
		want := readTree(t, tn.dir, h.String())
		if !maps.Equal(got[id], want) {
			t.Errorf("%s: a render from nothing makes another tree than the install ref's", id)
		}
	}
}

// installOf is the install of an install ref's name.
func installOf(name plumbing.ReferenceName) (string, bool) {
	return strings.CutPrefix(string(name), schemas.InstallRefPrefix)
}

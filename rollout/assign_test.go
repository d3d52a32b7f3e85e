package rollout_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

// policy parses a rollout of channels/stable.yaml, failing the test on a
// problem.
func policy(t testing.TB, waves string) *rollout.Policy {
	t.Helper()
	p, err := rollout.Parse("channels/stable.yaml", []byte(pins+"rollout:\n  waves:\n"+waves))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return p
}

// fleet makes installs named prefix-0… with labels from label(i).
func fleet(n int, prefix string, label func(i int) map[string]string) []rollout.Install {
	ins := make([]rollout.Install, n)
	for i := range ins {
		ins[i] = rollout.Install{ID: fmt.Sprintf("%s-%d", prefix, i)}
		if label != nil {
			ins[i].Labels = label(i)
		}
	}
	return ins
}

// sizes is each wave's name and number of installs.
func sizes(w *rollout.Waves) []string {
	var s []string
	for _, wave := range w.Waves {
		s = append(s, fmt.Sprintf("%s=%d", wave.Name, len(wave.Installs)))
	}
	return s
}

func TestAssign(t *testing.T) {
	ring := func(i int) map[string]string {
		switch {
		case i < 2:
			return map[string]string{"ring": "canary", "region": "eu"}
		case i < 20:
			return map[string]string{"region": "eu"}
		}
		return map[string]string{"region": "us"}
	}
	for _, tc := range []struct {
		name, waves string
		installs    []rollout.Install
		want        []string
	}{{
		name:     "percent waves of a large fleet",
		waves:    "    - {name: one, percent: 1}\n    - {name: ten, percent: 10}\n    - {name: half, percent: 50}\n    - {name: rest, rest: true}\n",
		installs: fleet(10000, "i", nil),
		want:     []string{"one=93", "ten=1021", "half=4934", "rest=3952"},
	}, {
		name:     "count then percent",
		waves:    "    - {name: one, count: 1}\n    - {name: ten, percent: 10}\n    - {name: rest, rest: true}\n",
		installs: fleet(100, "i", nil),
		want:     []string{"one=1", "ten=10", "rest=89"},
	}, {
		name:     "a small fleet's percent waves take one install each",
		waves:    "    - {name: a, percent: 1}\n    - {name: b, percent: 1}\n    - {name: rest, rest: true}\n",
		installs: fleet(3, "i", nil),
		want:     []string{"a=1", "b=1", "rest=1"},
	}, {
		name:     "count and rest waves with nothing left are empty",
		waves:    "    - {name: a, count: 5}\n    - {name: b, count: 5}\n    - {name: rest, rest: true}\n",
		installs: fleet(3, "i", nil),
		want:     []string{"a=3", "b=0", "rest=0"},
	}, {
		name:     "selectors choose first, the first match wins",
		waves:    "    - {name: canary, selector: {matchLabels: {ring: canary}}}\n    - {name: eu, selector: {matchLabels: {region: eu}}}\n    - {name: rest, rest: true}\n",
		installs: fleet(100, "i", ring),
		want:     []string{"canary=2", "eu=18", "rest=80"},
	}, {
		name:     "a share wave before a selector wave does not take its installs",
		waves:    "    - {name: ten, percent: 10}\n    - {name: eu, selector: {matchLabels: {region: eu}}}\n    - {name: rest, rest: true}\n",
		installs: fleet(100, "i", ring),
		want:     []string{"ten=9", "eu=20", "rest=71"},
	}, {
		name:     "a selector with a share",
		waves:    "    - {name: eu-one, count: 1, selector: {matchLabels: {region: eu}}}\n    - {name: eu-half, percent: 50, selector: {matchLabels: {region: eu}}}\n    - {name: rest, rest: true}\n",
		installs: fleet(100, "i", ring),
		want:     []string{"eu-one=1", "eu-half=9", "rest=90"},
	}, {
		name:     "matchExpressions",
		waves:    "    - {name: not-us, selector: {matchExpressions: [{key: region, operator: NotIn, values: [us]}]}}\n    - {name: rest, rest: true}\n",
		installs: fleet(100, "i", ring),
		want:     []string{"not-us=20", "rest=80"},
	}, {
		name:     "an empty selector wave that may be",
		waves:    "    - {name: ap, allowEmpty: true, selector: {matchLabels: {region: ap}}}\n    - {name: rest, rest: true}\n",
		installs: fleet(10, "i", ring),
		want:     []string{"ap=0", "rest=10"},
	}, {
		name:     "percents adding to 100 place everyone",
		waves:    "    - {name: a, percent: 30}\n    - {name: b, percent: 70}\n",
		installs: fleet(1000, "i", nil),
		want:     []string{"a=303", "b=697"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := rollout.Assign(policy(t, tc.waves), tc.installs)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, sizes(w)); diff != "" {
				t.Errorf("waves (-want +got):\n%s", diff)
			}
			checkPartition(t, w, tc.installs)
		})
	}
}

// checkPartition checks that every install is in exactly one wave and
// Of says which.
func checkPartition(t *testing.T, w *rollout.Waves, ins []rollout.Install) {
	t.Helper()
	seen := map[string]int{}
	for _, wave := range w.Waves {
		for _, id := range wave.Installs {
			if prev, dup := seen[id]; dup {
				t.Errorf("%s is in waves %d and %d", id, prev, wave.Number)
			}
			seen[id] = wave.Number
			if n, ok := w.Of(id); !ok || n != wave.Number {
				t.Errorf("Of(%s) = %d, %t; want %d", id, n, ok, wave.Number)
			}
		}
	}
	if len(seen) != len(ins) {
		t.Errorf("%d installs in waves, want %d", len(seen), len(ins))
	}
}

// TestWavesJSON: waves read back from JSON (nuon render --dry-run -o
// json) answer Of as the assigned ones do.
func TestWavesJSON(t *testing.T) {
	ins := fleet(50, "i", nil)
	w, err := rollout.Assign(policy(t, "    - {count: 2, bake: 90m}\n    - {percent: 20}\n    - {rest: true}\n"), ins)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	var back rollout.Waves
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(w.Waves, back.Waves); diff != "" {
		t.Errorf("round trip (-assigned +read):\n%s", diff)
	}
	checkPartition(t, &back, ins)
}

func TestAssignWithoutRollout(t *testing.T) {
	w, err := rollout.Assign(nil, fleet(3, "i", nil))
	if err != nil {
		t.Fatal(err)
	}
	want := []rollout.Wave{{Number: 1, Name: "all", Installs: []string{"i-0", "i-1", "i-2"}, OnFailure: "halt"}}
	if diff := cmp.Diff(want, w.Waves); diff != "" || w.Declared {
		t.Errorf("waves (-want +got):\n%s\ndeclared %t", diff, w.Declared)
	}
}

// TestAssignDeterministic: the waves depend on the installs, not on the
// order they are listed in.
func TestAssignDeterministic(t *testing.T) {
	p := policy(t, "    - {count: 3}\n    - {percent: 20}\n    - {rest: true}\n")
	ins := fleet(200, "i", nil)
	first, err := rollout.Assign(p, ins)
	if err != nil {
		t.Fatal(err)
	}
	rand.Shuffle(len(ins), func(i, j int) { ins[i], ins[j] = ins[j], ins[i] })
	again, err := rollout.Assign(p, ins)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first.Waves, again.Waves); diff != "" {
		t.Errorf("shuffled installs gave other waves (-first +again):\n%s", diff)
	}
}

func TestAssignProblems(t *testing.T) {
	eu := func(i int) map[string]string { return map[string]string{"region": "eu"} }
	for _, tc := range []struct {
		name, waves string
		installs    []rollout.Install
		want        []string
	}{{
		name:     "a selector that matches no install",
		waves:    "    - selector: {matchLabels: {region: ap}}\n    - rest: true\n",
		installs: fleet(3, "i", eu),
		want:     []string{"channels/stable.yaml:5:17: rollout.waves[0].selector: region=ap selects no install of channel stable (allowEmpty: true lets it)"},
	}, {
		name:     "overlapping waves",
		waves:    "    - {name: eu, selector: {matchLabels: {region: eu}}}\n    - {name: eu-again, selector: {matchExpressions: [{key: region, operator: Exists}]}}\n    - rest: true\n",
		installs: fleet(3, "i", eu),
		want:     []string{"channels/stable.yaml:6:34: rollout.waves[1].selector: overlaps earlier waves: every install region selects is in one already (eu)"},
	}, {
		name:     "installs in no wave",
		waves:    "    - selector: {matchLabels: {region: eu}}\n",
		installs: append(fleet(2, "eu", eu), fleet(12, "us", nil)...),
		want:     []string{"channels/stable.yaml:5:5: rollout.waves: 12 installs are in no wave: us-0, us-1, us-10, us-11, us-2, us-3, us-4, us-5, us-6, us-7 and 2 more; end the waves with rest: true"},
	}, {
		name:     "fewer installs than minHealthy",
		waves:    "    - {percent: 10, minHealthy: 3}\n    - rest: true\n",
		installs: fleet(10, "i", nil),
		want:     []string{"channels/stable.yaml:5:33: rollout.waves[0].minHealthy: is 3, but wave wave-1 has 2 installs: it could never pass"},
	}, {
		name:     "an install twice",
		waves:    "    - rest: true\n",
		installs: append(fleet(2, "i", nil), rollout.Install{ID: "i-1"}),
		want:     []string{"channels/stable.yaml:1:1: install i-1 is listed twice"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rollout.Assign(policy(t, tc.waves), tc.installs)
			var got []string
			if ps, ok := err.(schemas.Problems); ok {
				for _, p := range ps {
					got = append(got, p.String())
				}
			} else if err != nil {
				t.Fatalf("error %T: %v", err, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFleetUnknownChannel(t *testing.T) {
	_, err := rollout.Fleet(map[string]*rollout.Policy{"stable": nil}, []rollout.FleetInstall{
		{Install: rollout.Install{ID: "acme"}, Channel: "stable"},
		{Install: rollout.Install{ID: "globex"}, Channel: "nightly"},
	})
	if err == nil || err.Error() != "installs/globex.yaml: channel: channel nightly does not exist" {
		t.Errorf("Fleet: %v", err)
	}
}

// TestAssignStableUnderAdding checks the package doc's promise on random
// fleets and policies: adding installs moves no install to an earlier
// wave; pure selector waves and installs a percent wave took by hash do
// not move at all.
func TestAssignStableUnderAdding(t *testing.T) {
	shares := []string{"{count: 1}", "{count: 3}", "{percent: 1}", "{percent: 5}", "{percent: 20}",
		"{selector: {matchLabels: {ring: early}}}", "{count: 2, selector: {matchLabels: {region: eu}}}",
		"{percent: 30, selector: {matchExpressions: [{key: region, operator: In, values: [us, ap]}]}}",
		"{selector: {matchLabels: {region: ap}}, allowEmpty: true}"}
	regions := []string{"eu", "us", "ap"}
	labels := func(r *rand.Rand) map[string]string {
		l := map[string]string{"region": regions[r.IntN(len(regions))]}
		if r.IntN(10) == 0 {
			l["ring"] = "early"
		}
		return l
	}
	checked := 0
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 1))
		var b strings.Builder
		percent := 0
		for range 1 + r.IntN(5) {
			s := shares[r.IntN(len(shares))]
			if strings.HasPrefix(s, "{percent: 20") {
				if percent+20 > 80 {
					continue
				}
				percent += 20
			}
			fmt.Fprintf(&b, "    - %s\n", s)
		}
		b.WriteString("    - {rest: true}\n")
		p, err := rollout.Parse("channels/stable.yaml", []byte(pins+"rollout:\n  waves:\n"+b.String()))
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		n := 1 + r.IntN(60)
		before := make([]rollout.Install, n)
		for i := range before {
			before[i] = rollout.Install{ID: fmt.Sprintf("i%d-%d", seed, i), Labels: labels(r)}
		}
		after := append([]rollout.Install(nil), before...)
		for i := range 1 + r.IntN(60) {
			after = append(after, rollout.Install{ID: fmt.Sprintf("new%d-%d", seed, i), Labels: labels(r)})
		}
		w1, err1 := rollout.Assign(p, before)
		w2, err2 := rollout.Assign(p, after)
		if err1 != nil || err2 != nil {
			continue // a selector that matches nothing yet: not a placement
		}
		checked++
		checkPartition(t, w2, after)
		for _, in := range before {
			n1, _ := w1.Of(in.ID)
			n2, _ := w2.Of(in.ID)
			if n2 < n1 {
				t.Errorf("seed %d, policy\n%s%s moved from wave %d to wave %d", seed, b.String(), in.ID, n1, n2)
			}
			spec := p.Waves[n1-1]
			if spec.Selector != nil && spec.Count == 0 && spec.Percent == 0 && n2 != n1 {
				t.Errorf("seed %d: %s left selector wave %d for %d", seed, in.ID, n1, n2)
			}
			if spec.Selector == nil && spec.Percent > 0 && byHash(p, n1, in.ID) && n2 != n1 {
				t.Errorf("seed %d: %s left percent wave %d for %d", seed, in.ID, n1, n2)
			}
		}
	}
	if checked < 200 {
		t.Errorf("only %d of 300 random fleets placed without a problem", checked)
	}
}

// byHash reports whether id's hash lies below the cumulative percent of
// the share-only percent waves up to wave number n.
func byHash(p *rollout.Policy, n int, id string) bool {
	percent := 0
	for _, s := range p.Waves[:n] {
		if s.Selector == nil {
			percent += s.Percent
		}
	}
	return float64(rollout.Hash(p.Channel, id)) < float64(percent)/100*(1<<64)
}

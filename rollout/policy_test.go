package rollout_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

const pins = "components:\n  api: 2.4.0\n"

func TestParse(t *testing.T) {
	p, err := rollout.Parse("channels/stable.yaml", []byte(pins+`rollout:
  waves:
    - name: canary
      selector:
        matchLabels: {ring: canary}
        matchExpressions:
          - {key: region, operator: NotIn, values: [ap-south-1]}
      bake: 1h
    - count: 1
      minHealthy: 1
    - percent: 10
      failureBudget: 2
      onFailure: rollback
    - rest: true
  deferred:
    wait: 2h
    then: halt
`))
	if err != nil {
		t.Fatal(err)
	}
	type wave struct {
		Name, Selector     string
		Count, Percent     int
		Rest               bool
		Bake               time.Duration
		MinHealthy, Budget int
		OnFailure          string
	}
	var got []wave
	for _, w := range p.Waves {
		sel := ""
		if w.Selector != nil {
			sel = w.Selector.String()
		}
		got = append(got, wave{w.Name, sel, w.Count, w.Percent, w.Rest, w.Bake, w.MinHealthy, w.FailureBudget, w.OnFailure})
	}
	want := []wave{
		{Name: "canary", Selector: "region notin (ap-south-1),ring=canary", Bake: time.Hour, MinHealthy: 1, OnFailure: "halt"},
		{Name: "wave-2", Count: 1, MinHealthy: 1, OnFailure: "halt"},
		{Name: "wave-3", Percent: 10, MinHealthy: 1, Budget: 2, OnFailure: "rollback"},
		{Name: "wave-4", Rest: true, MinHealthy: 1, OnFailure: "halt"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("waves (-want +got):\n%s", diff)
	}
	if p.Channel != "stable" || p.DeferredWait != 2*time.Hour || p.DeferredThen != "halt" {
		t.Errorf("channel %q, deferred %s then %s", p.Channel, p.DeferredWait, p.DeferredThen)
	}
}

func TestParseWithoutRollout(t *testing.T) {
	p, err := rollout.Parse("channels/beta.yaml", []byte(pins))
	if err != nil || p != nil {
		t.Errorf("Parse = %v, %v; want nil, nil", p, err)
	}
}

func TestParseDefaults(t *testing.T) {
	p, err := rollout.Parse("channels/beta.yaml", []byte(pins+"rollout:\n  waves:\n    - rest: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.DeferredWait != rollout.DefaultDeferredWait || p.DeferredThen != rollout.DefaultDeferredThen {
		t.Errorf("deferred %s then %s", p.DeferredWait, p.DeferredThen)
	}
	w := p.Waves[0]
	if w.Name != "wave-1" || w.MinHealthy != 1 || w.FailureBudget != 0 || w.OnFailure != rollout.Halt || w.Bake != 0 {
		t.Errorf("wave defaults: %+v", w)
	}
}

// TestParseProblems: each bad policy is refused with its file, line and
// field.
func TestParseProblems(t *testing.T) {
	for _, tc := range []struct {
		name, rollout string
		want          []string
	}{{
		name:    "percents over 100",
		rollout: "  waves:\n    - percent: 60\n    - percent: 50\n    - rest: true\n",
		want:    []string{"channels/stable.yaml:7:16: rollout.waves[1].percent: the percent waves up to here add up to 110 %, more than 100 %"},
	}, {
		name:    "rest not last",
		rollout: "  waves:\n    - rest: true\n    - count: 1\n",
		want:    []string{"channels/stable.yaml:6:13: rollout.waves[0].rest: rest: true takes every install left, so it is for the last wave only"},
	}, {
		name:    "rest after 100 percent",
		rollout: "  waves:\n    - percent: 40\n    - percent: 60\n    - rest: true\n",
		want:    []string{"channels/stable.yaml:8:13: rollout.waves[2].rest: the percent waves before it add up to 100 %, so rest would always be empty"},
	}, {
		name:    "two shares",
		rollout: "  waves:\n    - count: 1\n      percent: 5\n",
		want:    []string{"channels/stable.yaml:6:7: rollout.waves[0]: count, percent and rest each give the wave's share; set one"},
	}, {
		name:    "no share and no selector",
		rollout: "  waves:\n    - bake: 1h\n",
		want:    []string{"channels/stable.yaml:6:7: rollout.waves[0]: a wave needs a selector, a share (count, percent or rest: true), or both"},
	}, {
		name:    "rest with a selector",
		rollout: "  waves:\n    - rest: true\n      selector: {matchLabels: {ring: a}}\n",
		want:    []string{"channels/stable.yaml:7:17: rollout.waves[0].selector: rest: true takes every install left; it takes no selector"},
	}, {
		name:    "In without values",
		rollout: "  waves:\n    - selector:\n        matchExpressions: [{key: ring, operator: In}]\n",
		want:    []string{"channels/stable.yaml:7:28: rollout.waves[0].selector.matchExpressions[0]: for 'in', 'notin' operators, values set can't be empty"},
	}, {
		name:    "Exists with values",
		rollout: "  waves:\n    - selector:\n        matchExpressions: [{key: ring, operator: Exists, values: [a]}]\n",
		want:    []string{"channels/stable.yaml:7:28: rollout.waves[0].selector.matchExpressions[0]: values set must be empty for exists and does not exist"},
	}, {
		name:    "unknown operator",
		rollout: "  waves:\n    - selector:\n        matchExpressions: [{key: ring, operator: Equals, values: [a]}]\n",
		want:    []string{`channels/stable.yaml:7:50: rollout.waves[0].selector.matchExpressions[0].operator: must be one of In, NotIn, Exists or DoesNotExist, not "Equals"`},
	}, {
		name:    "bad label key",
		rollout: "  waves:\n    - selector: {matchLabels: {-ring: a}}\n",
		want:    []string{`channels/stable.yaml:6:32: rollout.waves[0].selector.matchLabels.-ring: key "-ring" is not a Kubernetes label key (an optional DNS prefix and /, then a name of letters, digits, -, _ and ., at most 63 characters, starting and ending with a letter or digit)`},
	}, {
		name:    "empty selector",
		rollout: "  waves:\n    - selector: {matchLabels: {}}\n",
		want:    []string{"channels/stable.yaml:6:17: rollout.waves[0].selector: selects every install; give matchLabels or matchExpressions, or use rest: true"},
	}, {
		name:    "minHealthy above count",
		rollout: "  waves:\n    - count: 2\n      minHealthy: 3\n    - rest: true\n",
		want:    []string{"channels/stable.yaml:7:19: rollout.waves[0].minHealthy: is 3, more than the wave's 2 installs: it could never pass"},
	}, {
		name:    "duplicate names",
		rollout: "  waves:\n    - {name: a, count: 1}\n    - {name: a, rest: true}\n",
		want:    []string{`channels/stable.yaml:7:14: rollout.waves[1].name: wave name "a" is taken by waves[0]`},
	}, {
		name:    "unknown onFailure",
		rollout: "  waves:\n    - {rest: true, onFailure: retry}\n",
		want:    []string{`channels/stable.yaml:6:31: rollout.waves[0].onFailure: must be one of halt or rollback, not "retry"`},
	}, {
		name:    "zero percent",
		rollout: "  waves:\n    - {percent: 0}\n",
		want:    []string{"channels/stable.yaml:6:17: rollout.waves[0].percent: must be at least 1, not 0"},
	}, {
		name:    "no waves",
		rollout: "  waves: []\n",
		want:    []string{"channels/stable.yaml:5:10: rollout.waves: must list at least one item"},
	}, {
		name:    "bad deferred",
		rollout: "  waves:\n    - rest: true\n  deferred: {wait: soon, then: wait}\n",
		want: []string{
			`channels/stable.yaml:7:20: rollout.deferred.wait: "soon" is not a duration such as 90s, 10m or 1h30m`,
			`channels/stable.yaml:7:32: rollout.deferred.then: must be one of proceed or halt, not "wait"`,
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rollout.Parse("channels/stable.yaml", []byte(pins+"# the rollout\nrollout:\n"+tc.rollout))
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

func TestNewWithoutFile(t *testing.T) {
	_, err := rollout.New("channels/x.yaml", &schemas.Rollout{Waves: []schemas.RolloutWave{{Rest: true}, {Count: 1}}})
	if err == nil || !strings.HasPrefix(err.Error(), "channels/x.yaml: rollout.waves[0].rest: ") {
		t.Errorf("New: %v", err)
	}
}

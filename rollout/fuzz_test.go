package rollout_test

import (
	"errors"
	"os"
	"testing"

	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

// FuzzParse feeds channel files to Parse and the policies it accepts to
// Assign: neither may panic, problems are schemas.Problems with the file
// named, and an accepted policy places every install at most once.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("testdata/stable.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	for _, s := range []string{
		pins,
		pins + "rollout:\n  waves:\n    - rest: true\n",
		pins + "rollout:\n  waves:\n    - {count: 1}\n    - {percent: 10}\n    - {percent: 90}\n",
		pins + "rollout:\n  waves:\n    - {selector: {matchExpressions: [{key: a/b, operator: DoesNotExist}]}}\n    - {rest: true}\n",
		pins + "rollout:\n  waves:\n    - {percent: 60}\n    - {percent: 60}\n",
		pins + "rollout:\n  waves:\n    - {rest: true, count: 2, selector: {}}\n  deferred: {wait: -1s}\n",
		pins + "rollout: {waves: [{name: A, bake: 1y}]}\n",
		"rollout: &a {waves: *a}\n",
		"",
	} {
		f.Add([]byte(s))
	}
	labels := []map[string]string{nil, {"ring": "canary"}, {"region": "eu", "a/b": "x"}, {"ring": "early", "region": "us"}}
	ins := make([]rollout.Install, 40)
	for i := range ins {
		ins[i] = rollout.Install{ID: string(rune('a'+i%26)) + string(rune('0'+i/26)), Labels: labels[i%len(labels)]}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := rollout.Parse("channels/stable.yaml", data)
		if err != nil {
			var ps schemas.Problems
			if !errors.As(err, &ps) || len(ps) == 0 || ps[0].File != "channels/stable.yaml" {
				t.Fatalf("error %T is not problems of the file: %v", err, err)
			}
			return
		}
		w, err := rollout.Assign(p, ins)
		if err != nil {
			var ps schemas.Problems
			if !errors.As(err, &ps) {
				t.Fatalf("Assign error %T: %v", err, err)
			}
			return
		}
		seen := map[string]bool{}
		for _, wave := range w.Waves {
			for _, id := range wave.Installs {
				if seen[id] {
					t.Fatalf("%s is in two waves", id)
				}
				seen[id] = true
			}
		}
		if len(seen) != len(ins) {
			t.Fatalf("%d of %d installs placed", len(seen), len(ins))
		}
	})
}

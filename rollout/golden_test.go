package rollout_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/rollout"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestGolden assigns testdata/stable.yaml's waves over a fleet of 200
// installs: a change to Hash or to the placement rules moves installs
// between waves of every tenant's channels, so it shows here first.
func TestGolden(t *testing.T) {
	data, err := os.ReadFile("testdata/stable.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := rollout.Parse("channels/stable.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	regions := []string{"us-east-1", "eu-west-1", "eu-central-1", "ap-south-1"}
	ins := fleet(200, "install", func(i int) map[string]string {
		l := map[string]string{"region": regions[i%len(regions)]}
		if i%50 == 7 {
			l["ring"] = "canary"
		}
		return l
	})
	w, err := rollout.Assign(p, ins)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(w, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	golden := filepath.Join("testdata", "stable.waves.golden.json")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("read golden file (run with -update to write it): %v", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got); run with -update if the change is intended:\n%s", golden, diff)
	}
	for _, wave := range w.Waves {
		t.Logf("%s", fmt.Sprintf("wave %d %s: %d installs", wave.Number, wave.Name, len(wave.Installs)))
	}
}

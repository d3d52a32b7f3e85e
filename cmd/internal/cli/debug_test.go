package cli

import (
	"strings"
	"testing"

	"nuon.dev/nuon/schemas"
)

// TestCheckDebugCommand: nuon debug refuses what the agent would refuse
// before it files anything, listing what is allowed, or saying what is
// wrong with an allowed command's arguments.
func TestCheckDebugCommand(t *testing.T) {
	for _, tc := range []struct {
		name   string
		plugin string
		words  []string
		want   []string // substrings of the error; none: allowed
		not    []string
	}{
		{name: "a shell", words: []string{"sh", "-c", "id"},
			want: []string{`"sh -c id" is not an allowed debug command`, "nothing was filed", "helm", "manifests", "terraform", "get KIND", "state list", "status RELEASE"}},
		{name: "kubectl's exec", words: []string{"exec", "api-7d9f", "--", "id"},
			want: []string{`"exec api-7d9f -- id" is not an allowed debug command`, "logs POD"}},
		{name: "an allowed command of some plugin", words: []string{"get", "pods", "-n", "shop"}},
		{name: "terraform state", words: []string{"state", "list"}},
		{name: "a known command with a bad argument", words: []string{"logs", "api", "--tail", "many"},
			want: []string{`--tail "many" is not a number of lines`, "nothing was filed"}, not: []string{"Allowed"}},
		{name: "another plugin's command", plugin: schemas.TypeTerraform, words: []string{"get", "pods"},
			want: []string{`"get pods" is not an allowed debug command for a terraform component`, "terraform  state list | state show ADDRESS"},
			not:  []string{"manifests"}},
		{name: "the plugin's own command", plugin: schemas.TypeHelm, words: []string{"history", "api"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkDebugCommand(tc.plugin, tc.words)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("allowed, want refused naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(err.Error(), n) {
					t.Errorf("error %q says %q", err, n)
				}
			}
		})
	}
}

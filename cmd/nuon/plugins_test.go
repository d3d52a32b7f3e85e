package main

import (
	"maps"
	"slices"
	"testing"

	"nuon.dev/nuon/cmd/internal/cli"
)

// The agent binary names the plugin types without linking the plugins:
// the names must be the ones `nuon job run` has.
func TestJobPluginsMatch(t *testing.T) {
	got := slices.Sorted(maps.Keys(plugins("", "")))
	want := slices.Sorted(slices.Values(cli.JobPlugins))
	if !slices.Equal(got, want) {
		t.Errorf("nuon job run has plugins %v; the agent declares %v", got, want)
	}
}

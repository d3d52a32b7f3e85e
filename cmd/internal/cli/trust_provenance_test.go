package cli

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTrustProvenanceCommands: allow-source and require-builders write
// the root's provenance rules into the next version, say what they let
// and stop, refuse bad patterns and more builders than the role has keys,
// and verify lists the rules once signed.
func TestTrustProvenanceCommands(t *testing.T) {
	keys, repo := t.TempDir(), t.TempDir()
	for _, k := range []string{"alice", "render", "ci-1", "ci-2"} {
		writeTestKey(t, keys, k)
	}
	run := trustRunner(repo, time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	k := func(name string) string { return filepath.Join(keys, name) }
	for _, step := range []struct {
		args []string
		want string
		fail bool
	}{
		{args: []string{"init", "--root-key", "alice=" + k("alice.pub"), "--render-key", "render=" + k("render.pub")}, want: "wrote trust/root/1.json"},
		{args: []string{"sign", "--key", k("alice")}, want: "ready: version 1"},
		{args: []string{"add-key", "builders", "ci-1", k("ci-1.pub")}, want: "lets: ci-1 sign for builders"},
		{args: []string{"require-builders", "beta", "1"}, want: "stops: every artifact of agents given no --provenance-source, since the root names no source"},
		{args: []string{"allow-source", "api", "git+https://x/shop", "refs/tags/v*"},
			want: "stops: every artifact whose provenance names no source the root allows for its component"},
		{args: []string{"allow-source", "api[", "git+https://x/shop", "refs/tags/v*"}, want: "pattern \"api[\"", fail: true},
		{args: []string{"allow-source", "api", "git+https://x/shop", "refs/tags/v*"}, want: "already allowed", fail: true},
		{args: []string{"require-builders", "stable", "2"}, want: "channels [stable] require 2 distinct builders, but the builders role has 1 keys", fail: true},
		{args: []string{"add-key", "builders", "ci-2", k("ci-2.pub")}, want: "lets: ci-2 sign for builders"},
		{args: []string{"require-builders", "stable", "2"}, want: "stops: artifacts for channel stable with provenance from fewer than 2 distinct builders (was 1)"},
		{args: []string{"require-builders", "stable", "x"}, want: "want a number", fail: true},
		{args: []string{"sign", "--key", k("alice")}, want: "ready: version 2"},
		{args: []string{"verify"}, want: "source           api from git+https://x/shop at refs/tags/v*\n  builders         1 distinct for channels [beta]\n  builders         2 distinct for channels [stable]"},
		{args: []string{"require-builders", "stable", "1"}, want: "lets: artifacts for channel stable with provenance from 1 distinct builders (was 2)"},
	} {
		out, err := run(step.args...)
		if (err != nil) != step.fail {
			t.Fatalf("%v: err %v\n%s", step.args, err, out)
		}
		if err != nil {
			out += err.Error()
		}
		if !strings.Contains(out, step.want) {
			t.Fatalf("%v:\n%s\nwant %q", step.args, out, step.want)
		}
	}
}

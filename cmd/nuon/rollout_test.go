package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

// writeRollout records s as the next commit of channel's rollout ref of
// the repository at dir, signed with the fixture key named key.
func writeRollout(t *testing.T, dir, key string, s *schemas.RolloutState) plumbing.Hash {
	t.Helper()
	signer, err := signature.LoadSigner(filepath.Join(repoRoot(), "fixtures", "keys", key))
	if err != nil {
		t.Fatal(err)
	}
	repo, err := gitrepo.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ref := plumbing.ReferenceName(schemas.RolloutRef(s.Channel))
	old, err := repo.Ref(ref)
	if err != nil {
		t.Fatal(err)
	}
	b := gitobj.NewBatch()
	h, err := rollout.Commit(b, old, s, signer, object.Signature{Name: "nuon server", Email: "server@nuon.invalid", When: s.Decision.At})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(repo.Storer()); err != nil {
		t.Fatal(err)
	}
	if err := repo.Apply(context.Background(), []gitrepo.Update{{Name: ref, Old: old, New: h}}); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestRolloutStatus shows a halted rollout of stable, in text (golden)
// and JSON, and refuses an unknown channel, a channel without rollout
// and a rollout ref another key signed.
func TestRolloutStatus(t *testing.T) {
	rt := localRenderTenant(t)
	rt.edit(t, "installs/acme.yaml", "channel: stable\n", "channel: stable\nlabels:\n  ring: canary\n")
	rt.edit(t, "channels/stable.yaml", "  dashboards: 1.1.0\n", "  dashboards: 1.1.0\n"+stableRollout)
	trust := filepath.Join(t.TempDir(), "render_signers")
	pub, err := os.ReadFile(filepath.Join(repoRoot(), "fixtures", "keys", "render.pub"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(trust, []byte("nuon-render "+string(pub)), 0o644); err != nil {
		t.Fatal(err)
	}
	status := func(args ...string) (string, string, error) {
		return runNuon(t, append([]string{"rollout", "status", "--repo", rt.dir, "--trust", trust, "--cache-dir", rt.cache}, args...)...)
	}
	out, _, err := status()
	if err != nil || !strings.Contains(out, "channel stable: no rollout yet") {
		t.Fatalf("before any decision: %v\n%s", err, out)
	}

	p, err := rollout.Parse("channels/stable.yaml", []byte("components: {database: 1.0.0}\n"+stableRollout))
	if err != nil {
		t.Fatal(err)
	}
	w, err := rollout.Assign(p, []rollout.Install{{ID: "acme", Labels: map[string]string{"ring": "canary"}}, {ID: "initech"}})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	from, to := map[string]string{"database": "1.0.0"}, map[string]string{"database": "1.1.0"}
	base, _ := rollout.Decide(rollout.Input{Policy: p, Waves: w, Pins: from, Now: at})
	writeRollout(t, rt.dir, "render", base)
	started, _ := rollout.Decide(rollout.Input{Policy: p, Waves: w, State: base, Pins: to, Now: at.Add(time.Minute)})
	writeRollout(t, rt.dir, "render", started)
	halted, _ := rollout.Decide(rollout.Input{Policy: p, Waves: w, State: started, Pins: to, Now: at.Add(5 * time.Minute),
		Reports: map[string]rollout.Report{"acme": {Commit: strings.Repeat("a", 40), At: at.Add(4 * time.Minute), Current: "d", CurrentPins: to,
			Status: &schemas.Status{Install: "acme", Desired: "d", Applied: "d", Phase: schemas.InstallDegraded,
				Components: map[string]schemas.ComponentStatus{"database": {Phase: schemas.PhaseFailed, Error: "engine 1.1.0 not available"}}}}}})
	if halted == nil || halted.Decision.Kind != schemas.DecisionHalted {
		t.Fatalf("no halt: %+v", halted)
	}
	writeRollout(t, rt.dir, "render", halted)

	out, _, err = status("stable")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "rollout-status-halted.txt", out)
	out, _, err = status("-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got []rolloutStatus
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].State.Phase != schemas.RolloutHalted || len(got[0].History) != 3 || got[0].History[0].Evidence[0].Install != "acme" {
		t.Fatalf("json: %s", out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nosuch"}, "unknown channel nosuch: refs/heads/main has no channels/nosuch.yaml"},
		{[]string{"beta"}, "channel beta declares no rollout in channels/beta.yaml"},
		{[]string{"-o", "yaml"}, "--output must be text or json"},
	} {
		if _, _, err := status(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	// An operator aborts it: status says who, with the key and request.
	ref := schemas.RolloutRequestRef{ID: "r-1", Principal: "support", Key: "op" + strings.Repeat("1", 40), Commit: strings.Repeat("b", 40),
		Signed: schemas.SignedRequest{File: "{}", Commit: "tree 0"}}
	aborted, err := rollout.Control(halted, schemas.RolloutAbort, "engine 1.1.0 is withdrawn", ref, at.Add(6*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	writeRollout(t, rt.dir, "render", aborted)
	out, _, err = status("stable", "--history", "2")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "rollout-status-aborted.txt", out)

	writeRollout(t, rt.dir, "acme", halted)
	if _, _, err := status(); err == nil || !strings.Contains(err.Error(), "refs/heads/nuon/rollouts/stable: commit") || !strings.Contains(err.Error(), "not signed by the tenant server's key") {
		t.Errorf("a rollout ref an install's key signed: %v", err)
	}
}

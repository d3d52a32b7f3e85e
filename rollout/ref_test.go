package rollout_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/rollout"
)

func fixtureSigner(tb testing.TB, name string) *signature.Signer {
	tb.Helper()
	s, err := signature.LoadSigner(filepath.Join("..", "fixtures", "keys", name))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func trustOf(s *signature.Signer) *signature.AllowedSigners {
	return &signature.AllowedSigners{Signers: []signature.AllowedSigner{{Principals: []string{"nuon-render"}, Key: s.PublicKey()}}}
}

// TestRefRoundTrip writes decisions as signed commits and reads them
// back; a commit signed by another key (an install's, an operator's) or
// by none is refused, naming the ref and the commit.
func TestRefRoundTrip(t *testing.T) {
	p, w := waveFleet(t, 20)
	base, _ := rollout.Decide(rollout.Input{Policy: p, Waves: w, Pins: v1, Source: src1, Now: t0})
	started, _ := rollout.Decide(rollout.Input{Policy: p, Waves: w, State: base, Pins: v2, Source: src1, Now: t0})
	server, install := fixtureSigner(t, "render"), fixtureSigner(t, "acme")
	who := object.Signature{Name: "nuon server", Email: "server@nuon.invalid", When: t0}
	st := memory.NewStorage()
	b := gitobj.NewBatch()
	first, err := rollout.Commit(b, plumbing.ZeroHash, base, server, who)
	if err != nil {
		t.Fatal(err)
	}
	second, err := rollout.Commit(b, first, started, server, who)
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := rollout.Commit(b, second, started, install, who)
	unsigned, _ := rollout.Commit(b, second, started, nil, who)
	if err := b.Flush(st); err != nil {
		t.Fatal(err)
	}
	got, err := rollout.Read(st, "stable", second, trustOf(server))
	if err != nil {
		t.Fatal(err)
	}
	if got.Decision.Kind != started.Decision.Kind || rollout.Opened(got) != 1 || got.To["api"] != "2.0.0" {
		t.Fatalf("read back %+v", got)
	}
	c, _ := gitobj.ReadCommit(st, second)
	if c.ParentHashes[0] != first || !strings.Contains(c.Message, "Nuon-Rollout: stable 1 started 1") {
		t.Fatalf("commit %s", c.Message)
	}
	for name, h := range map[string]plumbing.Hash{"install key": forged, "unsigned": unsigned} {
		_, err := rollout.Read(st, "stable", h, trustOf(server))
		if !errors.Is(err, rollout.ErrUnsigned) || !strings.Contains(err.Error(), "refs/heads/nuon/rollouts/stable: commit "+h.String()) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := rollout.Read(st, "beta", second, trustOf(server)); err == nil || !strings.Contains(err.Error(), `on the rollout ref of channel "beta"`) {
		t.Errorf("state of stable read as beta's: %v", err)
	}
}

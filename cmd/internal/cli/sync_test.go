package cli

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"nuon.dev/nuon/trust"
)

// TestSyncerFlags: without --vendor-key there is no Syncer (the agent
// then refuses every artifact unless told otherwise), and the key and the
// insecure flag together are a contradiction, not a silent choice.
func TestSyncerFlags(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, s := range []syncOptions{{}, {insecure: true}} {
		if sy, err := s.syncer(log, nil, func() *trust.Root { return nil }); sy != nil || err != nil {
			t.Errorf("%+v: syncer %v, %v", s, sy, err)
		}
	}
	_, err := (&syncOptions{vendorKey: "cosign.pub", insecure: true}).syncer(log, nil, func() *trust.Root { return nil })
	if err == nil || !strings.Contains(err.Error(), "contradict") {
		t.Errorf("--vendor-key with --insecure-skip-artifact-verification: %v", err)
	}
}

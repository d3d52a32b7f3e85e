package cli

import (
	"io"
	"log/slog"
	"strings"
	"testing"
)

// TestSyncerFlags: without --vendor-key there is no Syncer (the agent
// then refuses every artifact unless told otherwise), and the key and the
// insecure flag together are a contradiction, not a silent choice.
func TestSyncerFlags(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, s := range []syncOptions{{}, {insecure: true}} {
		if sy, err := s.syncer(log); sy != nil || err != nil {
			t.Errorf("%+v: syncer %v, %v", s, sy, err)
		}
	}
	_, err := (&syncOptions{vendorKey: "cosign.pub", insecure: true}).syncer(log)
	if err == nil || !strings.Contains(err.Error(), "contradict") {
		t.Errorf("--vendor-key with --insecure-skip-artifact-verification: %v", err)
	}
}

package schemas_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/schemas"
)

// TestRenderedPaths pins the rendered tree's layout: the shard of an id is
// the first byte of its SHA-256 in hex (sha256sum agrees), the same for
// its folder and its issued record.
func TestRenderedPaths(t *testing.T) {
	for _, tc := range []struct{ id, shard string }{
		{"acme", "82"},
		{"globex", "5b"},
		{"initech", "4c"},
		{"i00000", "d7"},
	} {
		got := []string{schemas.Shard(tc.id), schemas.RenderedInstallPath(tc.id), schemas.IssuedPath(tc.id)}
		want := []string{tc.shard, fmt.Sprintf("installs/%s/%s", tc.shard, tc.id), fmt.Sprintf("issued/%s/%s", tc.shard, tc.id)}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.id, diff)
		}
	}
	shards := map[string]bool{}
	for i := range 10000 {
		shards[schemas.Shard(fmt.Sprintf("i%05d", i))] = true
	}
	if len(shards) != schemas.Shards {
		t.Errorf("10,000 ids fall in %d shards, want all %d", len(shards), schemas.Shards)
	}
	if !schemas.FlatLayout(2) || !schemas.FlatLayout(0) || schemas.FlatLayout(schemas.ShardedFormat) {
		t.Error("FlatLayout: formats before ShardedFormat are flat, it and later ones are not")
	}
}

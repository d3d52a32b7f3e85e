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

// TestArchiveRefs pins the archive's names: generation 1 keeps the names
// from before generations, later ones a folder each, and ParseArchiveRef
// reads back exactly what ArchiveGenRef writes.
func TestArchiveRefs(t *testing.T) {
	type parsed struct {
		ID   string
		Gen  int
		Live string
		OK   bool
	}
	for _, tc := range []struct {
		id, live string
		gen      int
		name     string
	}{
		{"acme", schemas.InstallRef("acme"), 1, "refs/nuon/archive/acme/installs"},
		{"acme", schemas.StatusRef("acme"), 1, "refs/nuon/archive/acme/status"},
		{"acme", schemas.StatusRef("acme"), 2, "refs/nuon/archive/acme/2/status"},
		{"i00042", schemas.InstallRef("i00042"), 17, "refs/nuon/archive/i00042/17/installs"},
	} {
		if got := schemas.ArchiveGenRef(tc.id, tc.gen, tc.live); got != tc.name {
			t.Errorf("ArchiveGenRef(%q, %d, %q) = %q, want %q", tc.id, tc.gen, tc.live, got, tc.name)
		}
		var p parsed
		p.ID, p.Gen, p.Live, p.OK = schemas.ParseArchiveRef(tc.name)
		if d := cmp.Diff(parsed{tc.id, tc.gen, tc.live, true}, p); d != "" {
			t.Errorf("ParseArchiveRef(%q) (-want +got):\n%s", tc.name, d)
		}
	}
	if got := schemas.ArchiveGenRef("acme", 1, schemas.StatusRef("acme")); got != "refs/nuon/archive/acme/status" {
		t.Errorf("ArchiveGenRef(acme, 1, status) = %q, want generation 1's name", got)
	}
	for _, name := range []string{
		"refs/nuon/archive/acme/other", "refs/nuon/archive/status", "refs/nuon/archive//status",
		"refs/nuon/archive/acme/1/status", "refs/nuon/archive/acme/02/status", "refs/nuon/archive/acme/-2/status",
		"refs/nuon/archive/acme/+2/status", "refs/nuon/archive/acme/x/status", "refs/nuon/archive/acme/2/3/status",
		"refs/nuon/archive/acme/99999999999999999999/status", "refs/heads/nuon/status/acme",
	} {
		if id, gen, live, ok := schemas.ParseArchiveRef(name); ok {
			t.Errorf("ParseArchiveRef(%q) = %q, %d, %q: want no archived ref", name, id, gen, live)
		}
	}
}

// FuzzParseArchiveRef parses fuzzed ref names: never a panic, and a name
// it takes is exactly the one ArchiveGenRef writes for what it read.
func FuzzParseArchiveRef(f *testing.F) {
	for _, seed := range []string{"", "refs/nuon/archive/acme/installs", "refs/nuon/archive/acme/status",
		"refs/nuon/archive/acme/2/status", "refs/nuon/archive/acme/02/installs", "refs/nuon/archive/a/b/c/status",
		"refs/nuon/archive/acme/1/status", "refs/nuon/archive//2/status"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		id, gen, live, ok := schemas.ParseArchiveRef(name)
		if !ok {
			return
		}
		if gen < 1 || gen > schemas.MaxArchiveGen || (live != schemas.InstallRef(id) && live != schemas.StatusRef(id)) {
			t.Fatalf("%q: id %q, generation %d, live %q", name, id, gen, live)
		}
		if back := schemas.ArchiveGenRef(id, gen, live); back != name {
			t.Fatalf("%q read as %q %d %q, written back as %q", name, id, gen, live, back)
		}
	})
}

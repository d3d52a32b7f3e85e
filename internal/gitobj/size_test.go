package gitobj_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gittest"
)

// TestSizeOfLargeObject sizes a 50 MB blob, loose and packed (whole, and
// as a delta of another), from its header, and ReadBlob refuses it from
// its size: reading it would allocate its 50 MB, sizing it allocates a
// few kilobytes. The bound leaves a wide
// margin on both sides, so it cannot flake.
func TestSizeOfLargeObject(t *testing.T) {
	const size = 50 << 20
	dir := newRepo(t)
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("nuon ", size/5)), 0o644); err != nil {
		t.Fatal(err)
	}
	blob := plumbing.NewHash(gittest.Git(t, dir, "hash-object", "-w", big))
	if err := os.WriteFile(big, []byte(strings.Repeat("nuon ", size/5-1)+"nuon!"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := plumbing.NewHash(gittest.Git(t, dir, "hash-object", "-w", big))
	check := func(name string) {
		t.Helper()
		st := gitobj.NewStore(open(t, dir))
		for _, h := range []plumbing.Hash{blob, other} {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			got, err := st.EncodedObjectSize(h)
			runtime.ReadMemStats(&after)
			if err != nil || got != size {
				t.Errorf("%s: size of %s: %d, %v; want %d", name, h, got, err, size)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
				t.Errorf("%s: sizing %s allocated %d bytes", name, h, alloc)
			}
			runtime.ReadMemStats(&before)
			_, err = gitobj.ReadBlob(st, h, 1<<20)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, gitobj.ErrTooLarge) {
				t.Errorf("%s: read %s with a 1 MiB limit: %v, want ErrTooLarge", name, h, err)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
				t.Errorf("%s: refusing %s allocated %d bytes", name, h, alloc)
			}
		}
	}
	check("loose")
	pack := exec.Command("git", "pack-objects", "--quiet", "--window=2", "--depth=1", ".git/objects/pack/pack")
	pack.Dir = dir
	pack.Stdin = strings.NewReader(blob.String() + "\n" + other.String() + "\n")
	if out, err := pack.CombinedOutput(); err != nil {
		t.Fatalf("git pack-objects: %v: %s", err, out)
	}
	gittest.Git(t, dir, "prune-packed")
	deltas := 0
	for _, line := range strings.Split(gittest.Git(t, dir, "verify-pack", "-v", mustGlob(t, filepath.Join(dir, ".git/objects/pack/*.idx"))), "\n") {
		if f := strings.Fields(line); len(f) == 7 && f[1] == "blob" {
			deltas++
		}
	}
	if deltas != 1 {
		t.Fatalf("%d of the 2 blobs packed as deltas, want 1", deltas)
	}
	check("packed")
}

func mustGlob(t *testing.T, pattern string) string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil || len(m) != 1 {
		t.Fatalf("glob %s: %v %v", pattern, m, err)
	}
	return m[0]
}

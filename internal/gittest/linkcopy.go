package gittest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// LinkCopy copies the bare repository src into a new directory of tb's
// named name,
// its object files as hard links (git never changes an object file in
// place), and returns the copy's path. A server given the copy cannot
// change src, so large cached repositories are served without a copy of
// their objects; the copy's server must not repack in place (maintenance
// off).
func LinkCopy(tb testing.TB, src, name string) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		flag := "-a"
		if e.Name() == "objects" {
			flag = "-al"
		}
		if out, err := exec.Command("cp", flag, filepath.Join(src, e.Name()), dir).CombinedOutput(); err != nil {
			tb.Fatalf("copy %s: %v: %s", src, err, out)
		}
	}
	return dir
}

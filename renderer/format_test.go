package renderer_test

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/schemas"
)

// TestFormat guards renderer.Format. It renders a frozen copy of a tenant
// (testdata/format/tenant, which does not follow the fixtures) and compares
// a digest of every file with the one recorded for the current Format. A
// change to what the renderer writes for the same source must come with a
// new Format: incremental renders keep the previous state of installs whose
// source did not change only when the Format is the same.
func TestFormat(t *testing.T) {
	src, err := schemas.Load(os.DirFS(filepath.Join("testdata", "format", "tenant")))
	if err != nil {
		t.Fatalf("testdata/format/tenant no longer loads; update it, and bump renderer.Format if what it renders changes:\n%v", err)
	}
	h := sha256.New()
	for _, id := range src.InstallIDs() {
		files, err := renderer.Install(src, id)
		if err != nil {
			t.Fatal(err)
		}
		names := make([]string, 0, len(files))
		for name := range files {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			fmt.Fprintf(h, "%s/%s %d\n", id, name, len(files[name]))
			h.Write(files[name])
		}
	}
	got := fmt.Sprintf("%d sha256:%x\n", renderer.Format, h.Sum(nil))
	file := filepath.Join("testdata", "format", "fingerprint")
	want, err := os.ReadFile(file)
	if err != nil && !*update {
		t.Fatal(err)
	}
	if string(want) == got {
		return
	}
	recorded, _, _ := strings.Cut(string(want), " ")
	if recorded == strconv.Itoa(renderer.Format) {
		t.Fatalf("the renderer writes other files for the same source than Format %d did: bump renderer.Format, then run with -update", renderer.Format)
	}
	if !*update {
		t.Fatalf("%s records Format %s, the renderer is at %d: run with -update", file, recorded, renderer.Format)
	}
	if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
		t.Fatal(err)
	}
}

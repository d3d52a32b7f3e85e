package schemas

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		dir, name string
		mode      fs.FileMode
		kind      EntryKind
		msg       string
	}{
		{".", "nuon.yaml", 0, SourceFile, ""},
		{".", "installs", fs.ModeDir, SourceFolder, ""},
		{".", "modules", fs.ModeDir, NotRead, ""},
		{".", "README.md", 0, NotRead, ""},
		{".", "nuon.yml", 0, BadEntry, "is not read; the app is declared in nuon.yaml (lower case, .yaml)"},
		{".", "nuon.yaml", fs.ModeSymlink, BadEntry, "is a symbolic link; nuon.yaml must be a regular file"},
		{".", "installs", fs.ModeIrregular, BadEntry, "is a submodule or another special entry; installs must be a folder of <name>.yaml files"},
		{".", "..", fs.ModeDir, BadEntry, `an entry named ".."; a git tree made by git has none`},
		{"installs", "acme.yaml", 0, SourceFile, ""},
		{"installs", "README.md", 0, NotRead, ""},
		{"installs", ".gitkeep", 0, NotRead, ""},
		{"installs", "README.md", fs.ModeSymlink, BadEntry, "is a symbolic link; README.md must be a regular file"},
		{"installs", "acme.yaml", fs.ModeSymlink, BadEntry, "is a symbolic link; a source file must be a regular file"},
		{"installs", "acme.yaml", fs.ModeIrregular, BadEntry, "is a submodule or another special entry; a source file must be a regular file"},
		{"installs", "acme.yaml", fs.ModeDir, BadEntry, "is a folder; a source file must be a regular file"},
		{"installs", "acme.YAML", 0, BadEntry, "only lower-case .yaml files are read; rename it to acme.yaml"},
		{"installs", "acme.yml", 0, BadEntry, "only .yaml files are read; rename it to acme.yaml"},
		{"installs", "acme", 0, BadEntry, "is not a source file: installs/ holds only <name>.yaml files, README.md and .gitkeep"},
		{"installs", "acme", fs.ModeDir, BadEntry, "is a folder; installs/ holds only <name>.yaml files, README.md and .gitkeep"},
		{"installs", "", 0, BadEntry, "an entry with an empty name; a git tree made by git has none"},
		{"installs", ".", fs.ModeDir, BadEntry, `an entry named "."; a git tree made by git has none`},
		{"installs", "..", fs.ModeDir, BadEntry, `an entry named ".."; a git tree made by git has none`},
		{"installs", "../x.yaml", 0, BadEntry, "a name with a slash in it; a git tree made by git has none"},
		{"installs", "a\x00.yaml", 0, BadEntry, "a name with a NUL byte in it; a git tree made by git has none"},
		{"installs", "a\n.yaml", 0, BadEntry, "a name with a control or invisible character in it"},
		{"installs", "a\u202e.yaml", 0, BadEntry, "a name with a control or invisible character in it"},
		{"installs", "\xfe.yaml", 0, BadEntry, "a name that is not UTF-8"},
	}
	for _, tc := range tests {
		t.Run(DisplayPath(tc.dir, tc.name), func(t *testing.T) {
			kind, msg := Classify(tc.dir, tc.name, tc.mode)
			if kind != tc.kind || msg != tc.msg {
				t.Errorf("Classify(%q, %q, %v) = %d, %q; want %d, %q", tc.dir, tc.name, tc.mode, kind, msg, tc.kind, tc.msg)
			}
		})
	}
}

func TestDisplayPath(t *testing.T) {
	tests := []struct{ dir, name, want string }{
		{".", "nuon.yaml", "nuon.yaml"},
		{"installs", "acme.yaml", "installs/acme.yaml"},
		{"installs", "../x.yaml", "installs/../x.yaml"},
		{"installs", "..", "installs/.."},
		{"installs", "", `installs/""`},
		{"installs", "a\x00b", `installs/"a\x00b"`},
		{"installs", "a\x1b[31mb", `installs/"a\x1b[31mb"`},
		{"installs", "a b.yaml", "installs/a b.yaml"},
		{"installs", "é.yaml", "installs/é.yaml"},
	}
	for _, tc := range tests {
		if got := DisplayPath(tc.dir, tc.name); got != tc.want {
			t.Errorf("DisplayPath(%q, %q) = %s, want %s", tc.dir, tc.name, got, tc.want)
		}
	}
}

// TestLoadRaisedCap loads a release record larger than the default cap
// once the cap is raised.
func TestLoadRaisedCap(t *testing.T) {
	fsys := tenant(t)
	appendTo("releases/api.yaml", "# "+strings.Repeat("padding ", DefaultMaxFileSize/8)+"\n")(t, fsys)
	if _, err := Load(fsys); err == nil || !strings.Contains(err.Error(), "releases/api.yaml: is 1.0 MiB") {
		t.Fatalf("Load with the default cap: %v, want releases/api.yaml refused", err)
	}
	if _, err := Load(fsys, WithMaxFileSize(2<<20)); err != nil {
		t.Fatalf("Load with a 2 MiB cap: %v", err)
	}
}

// hugeTenant is the test tenant on disk with installs/huge.yaml of 50 MB
// (sparse: it costs no disk).
func hugeTenant(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	if err := os.CopyFS(dir, os.DirFS(testTenant)); err != nil {
		tb.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, "installs", "acme.yaml"), 0); err != nil {
		tb.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, "installs", "acme.yaml"), 50<<20); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// TestLoadHugeFile loads a folder with a 50 MB install file: it is
// refused from its size with a problem naming it, without being read.
// Reading it whole would allocate at least its 50 MB (parsing it, ~700
// MB); the bound below is a fraction of that and several times what
// loading the rest of the tenant allocates, so it cannot flake.
func TestLoadHugeFile(t *testing.T) {
	fsys := os.DirFS(hugeTenant(t))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Load(fsys)
	runtime.ReadMemStats(&after)
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("Load: %v, want problems", err)
	}
	want := []string{"installs/acme.yaml: is 50 MiB, more than the 1 MiB a source file may be"}
	var got []string
	for _, p := range ps {
		got = append(got, p.String())
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 10<<20 {
		t.Errorf("Load allocated %d bytes for a tenant with a 50 MB file, want under 10 MiB", alloc)
	}
}

// BenchmarkLoadHugeFile reports what refusing a 50 MB file costs (B/op).
func BenchmarkLoadHugeFile(b *testing.B) {
	fsys := os.DirFS(hugeTenant(b))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load(fsys); err == nil {
			b.Fatal("Load accepted a 50 MB file")
		}
	}
}

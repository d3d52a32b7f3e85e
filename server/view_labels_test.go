package server

import (
	"encoding/gob"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/internal/gitobj"
)

// utf16le is s in UTF-16, little endian, with its byte order mark.
func utf16le(s string) []byte {
	out := []byte{0xff, 0xfe}
	for _, u := range utf16.Encode([]rune(s)) {
		out = append(out, byte(u), byte(u>>8))
	}
	return out
}

// TestYAMLLabels: the labels of an install's file, whichever way YAML
// spells the key; the fast path skips only files without one.
func TestYAMLLabels(t *testing.T) {
	eu := map[string]string{"region": "eu"}
	for _, tc := range []struct {
		name string
		data []byte
		want map[string]string
		skip bool // mayHoldLabels says no
	}{
		{"block", []byte("channel: stable\nlabels:\n  region: eu\n"), eu, false},
		{"flow", []byte("{channel: stable, labels: {region: eu}}"), eu, false},
		{"none", []byte("channel: stable\nagentKey: ssh-ed25519 AAAA\n"), nil, true},
		{"empty", nil, nil, true},
		{"not yaml", []byte("{[: :"), nil, true},
		{"not yaml with labels", []byte("labels: [: {"), nil, false},
		{"labels empty", []byte("labels: {}\n"), nil, false},
		{"labels not a map", []byte("labels: eu\n"), nil, false},
		{"double-quoted escape", []byte("\"\\x6cabels\": {region: eu}\n"), eu, false},
		{"unicode escape", []byte("\"lab\\u0065ls\": {region: eu}\n"), eu, false},
		{"line continuation", []byte("? \"lab\\\n  els\"\n: {region: eu}\n"), eu, false},
		{"anchored key", []byte("a: &k labels\n*k : {region: eu}\n"), eu, false},
		{"utf-8 bom", append([]byte{0xef, 0xbb, 0xbf}, "labels: {region: eu}\n"...), eu, false},
		{"utf-16", utf16le("labels: {region: eu}\n"), eu, false},
		{"utf-16 none", utf16le("channel: stable\n"), nil, false},
		{"nul", []byte("channel: stable\x00"), nil, false},
		{"folded key is another key", []byte("? lab\n  els\n: {region: eu}\n"), nil, true},
		{"labels in a value only", []byte("channel: labels\n"), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := !mayHoldLabels(tc.data); got != tc.skip {
				t.Errorf("skipped %v, want %v", got, tc.skip)
			}
			if got := yamlLabels(tc.data); !maps.Equal(got, tc.want) {
				t.Errorf("labels %v, want %v", got, tc.want)
			}
			if got := parseYAMLLabels(tc.data); !maps.Equal(got, tc.want) {
				t.Errorf("parsed %v, want %v", got, tc.want)
			}
		})
	}
}

// FuzzYAMLLabels: a file the fast path skips has no labels when parsed
// in full, and yamlLabels always agrees with the full parse.
func FuzzYAMLLabels(f *testing.F) {
	for _, s := range []string{
		"channel: stable\nlabels:\n  region: eu\n", "channel: stable\n", "\"\\x6cabels\": {a: b}",
		"\"lab\\u0065ls\": {a: b}", "a: &k labels\n*k : {a: b}\n", "<<: {labels: {a: b}}", "? lab\n  els\n: {a: b}",
		"'lab\n  els': {a: b}", "\"lab\n  els\": {a: b}", "!!str labels : {a: b}", "%YAML 1.1\n---\nlabels: {a: b}",
	} {
		f.Add([]byte(s))
	}
	f.Add(utf16le("labels: {a: b}"))
	f.Add(append([]byte{0xfe, 0xff, 0}, "l"...))
	f.Fuzz(func(t *testing.T, data []byte) {
		full := parseYAMLLabels(data)
		if !mayHoldLabels(data) && full != nil {
			t.Fatalf("skipped %q, which has labels %v", data, full)
		}
		if got := yamlLabels(data); !maps.Equal(got, full) {
			t.Fatalf("%q: labels %v, full parse %v", data, got, full)
		}
	})
}

// labelsRepo writes a main commit whose installs/ has files, by install
// id, to st.
func labelsRepo(tb testing.TB, st storer.EncodedObjectStorer, files map[string]string) plumbing.Hash {
	tb.Helper()
	b := gitobj.NewBatch()
	var entries []gitobj.Entry
	for _, id := range slices.Sorted(maps.Keys(files)) {
		entries = append(entries, gitobj.Entry{Name: id + ".yaml", Mode: filemode.Regular, Hash: b.Add(plumbing.BlobObject, []byte(files[id]))})
	}
	who := object.Signature{Name: "nuon", Email: "nuon@nuon.invalid", When: time.Unix(1700000000, 0)}
	main, err := b.Commit(gitobj.Commit{Tree: b.Tree([]gitobj.Entry{{Name: "installs", Mode: filemode.Dir, Hash: b.Tree(entries)}}), Author: who, Message: "fleet\n"}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if err := b.Flush(st); err != nil {
		tb.Fatal(err)
	}
	return main
}

// TestViewLabelsSaved: labels are kept by blob in the saved index; a
// restart parses only the blobs not in it, a new main only its new
// blobs, and equal label sets share one map.
func TestViewLabelsSaved(t *testing.T) {
	st := memory.NewStorage()
	files := map[string]string{
		"acme":    "channel: stable\nlabels: {region: eu}\n",
		"globex":  "channel: beta\nlabels: {region: eu}\n", // another blob, the same labels
		"initech": "channel: stable\n",                     // no labels
		"hooli":   "channel: stable\nlabels: {region: us, tier: gold}\n",
		"broken":  "labels: [: {\n",
	}
	main := labelsRepo(t, st, files)
	var l viewLabels
	moved := l.read(st, main)
	if want := slices.Sorted(maps.Keys(files)); !slices.Equal(slices.Sorted(slices.Values(moved)), want) {
		t.Fatalf("first read moved %v, want %v", moved, want)
	}
	if l.parsed != len(files) {
		t.Fatalf("first read parsed %d blobs, want %d", l.parsed, len(files))
	}
	check := func(l *viewLabels) {
		t.Helper()
		for id, want := range map[string]map[string]string{
			"acme": {"region": "eu"}, "globex": {"region": "eu"}, "hooli": {"region": "us", "tier": "gold"},
			"initech": nil, "broken": nil, "nobody": nil,
		} {
			if got := l.of(id); !maps.Equal(got, want) || (want == nil) != (got == nil) {
				t.Errorf("labels of %s: %v, want %v", id, got, want)
			}
		}
		a, g := l.of("acme"), l.of("globex")
		if a == nil || g == nil {
			return
		}
		a["probe"] = "x"
		if g["probe"] != "x" {
			t.Errorf("equal label sets are two maps")
		}
		delete(a, "probe")
	}
	check(&l)
	if l.read(st, main) != nil || l.parsed != len(files) {
		t.Fatalf("the same main read again: parsed %d", l.parsed)
	}

	// Saved and read back: a restart parses nothing.
	path := filepath.Join(t.TempDir(), viewCacheFile)
	if err := saveViewCache(path, newFleetIndex(), &l); err != nil {
		t.Fatal(err)
	}
	_, saved, err := loadViewCache(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(saved) != len(files) {
		t.Fatalf("saved labels of %d blobs, want %d", len(saved), len(files))
	}
	var r viewLabels
	r.seed(saved)
	if moved := r.read(st, main); len(moved) != len(files) {
		t.Fatalf("restart moved %v, want every install", moved)
	}
	if r.parsed != 0 {
		t.Fatalf("restart parsed %d blobs, want 0", r.parsed)
	}
	check(&r)

	// A new main: one file changed, one removed, one added.
	files["acme"] = "channel: stable\nlabels: {region: ap}\n"
	delete(files, "initech")
	files["umbrella"] = "labels: {region: eu}\n"
	next := labelsRepo(t, st, files)
	moved = r.read(st, next)
	if want := []string{"acme", "initech", "umbrella"}; !slices.Equal(slices.Sorted(slices.Values(moved)), want) {
		t.Fatalf("new main moved %v, want %v", moved, want)
	}
	if r.parsed != 2 {
		t.Fatalf("new main parsed %d blobs, want 2", r.parsed)
	}
	if got := r.of("acme"); got["region"] != "ap" {
		t.Fatalf("acme after the change: %v", got)
	}
	if r.of("initech") != nil || r.of("umbrella")["region"] != "eu" {
		t.Fatalf("removed or added: %v %v", r.of("initech"), r.of("umbrella"))
	}
	if len(r.byBlob) != len(files) {
		t.Fatalf("kept labels of %d blobs, main has %d", len(r.byBlob), len(files))
	}

	// A saved index of the older format is no cache: everything is read.
	old := filepath.Join(t.TempDir(), "old.gob")
	if err := os.WriteFile(old, oldViewCache(t), 0o600); err != nil {
		t.Fatal(err)
	}
	installs, labels, err := loadViewCache(old)
	if err != nil || installs != nil || labels != nil {
		t.Fatalf("an older saved index read: %v %v %v", installs, labels, err)
	}
}

// oldViewCache is a saved index of format 1, which had no labels.
func oldViewCache(tb testing.TB) []byte {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "v1.gob")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	type v1 struct {
		Version  int
		Installs map[string]viewCached
	}
	if err := gobEncode(f, v1{Version: 1, Installs: map[string]viewCached{"acme": {File: plumbing.Hash{1}}}}); err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkViewLabels measures reading the labels of n installs whose
// files all differ (NUON_BENCH_LABELS_INSTALLS, default 100,000), from a
// packed repository on disk: the first start (every blob parsed), a
// restart with the saved labels, and a new main with one file changed.
func BenchmarkViewLabels(b *testing.B) {
	n := 100000
	if s := os.Getenv("NUON_BENCH_LABELS_INSTALLS"); s != "" {
		if _, err := fmt.Sscan(s, &n); err != nil || n <= 0 {
			b.Fatalf("NUON_BENCH_LABELS_INSTALLS: %q is not a number of installs", s)
		}
	}
	dir := b.TempDir()
	st := filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault())
	files := make(map[string]string, n)
	for i := range n {
		id := fmt.Sprintf("install-%07d", i)
		f := fmt.Sprintf("channel: stable\ncloud: {provider: aws, region: eu-west-1}\nsandbox: {name: aws-eks, version: 1.2.0}\nagentKey: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI%07dxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n", i)
		if i%2 == 0 { // half the fleet labelled
			f += fmt.Sprintf("labels: {region: %s, tier: gold}\n", []string{"eu", "us", "ap"}[i%3])
		}
		files[id] = f
	}
	main := labelsRepo(b, st, files)
	path := filepath.Join(dir, viewCacheFile)
	for b.Loop() {
		var l viewLabels
		t0 := time.Now()
		l.read(st, main)
		first := time.Since(t0)
		if err := saveViewCache(path, newFleetIndex(), &l); err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		_, saved, err := loadViewCache(path)
		if err != nil {
			b.Fatal(err)
		}
		var r viewLabels
		r.seed(saved)
		r.read(st, main)
		restart := time.Since(t0)
		if r.parsed != 0 || !maps.Equal(r.of("install-0000000"), map[string]string{"region": "eu", "tier": "gold"}) {
			b.Fatalf("restart parsed %d, labels %v", r.parsed, r.of("install-0000000"))
		}
		b.ReportMetric(first.Seconds(), "first-s")
		b.ReportMetric(restart.Seconds(), "restart-s")
		b.ReportMetric(float64(l.parsed), "parsed-first")
	}
}

func gobEncode(w io.Writer, v any) error { return gob.NewEncoder(w).Encode(v) }

// BenchmarkYAMLLabels: an installs file without labels, through the fast
// path and through the full parse.
func BenchmarkYAMLLabels(b *testing.B) {
	data := []byte("channel: stable\ncloud: {provider: aws, region: eu-west-1}\nsandbox: {name: aws-eks, version: 1.2.0}\nagentKey: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n")
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			if yamlLabels(data) != nil {
				b.Fatal("labels")
			}
		}
	})
	b.Run("parse", func(b *testing.B) {
		for b.Loop() {
			if parseYAMLLabels(data) != nil {
				b.Fatal("labels")
			}
		}
	})
}

package server

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkContactRecord is what a poll pays for liveness: one contact
// recorded for one of 100,000 known installs, from every core at once.
func BenchmarkContactRecord(b *testing.B) {
	l := newLiveness()
	ids := make([]string, 100000)
	for i := range ids {
		ids[i] = fmt.Sprintf("i%06d", i)
		l.record(ids[i], contactPoll, time.Unix(1, 0))
	}
	base := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			l.record(ids[i%len(ids)], contactPoll, base.Add(time.Duration(i)))
		}
	})
}

// TestLivenessTable: a later contact wins, an earlier one changes
// nothing; a watched install revives once; the file keeps the table, and
// a damaged file is refused rather than half read.
func TestLivenessTable(t *testing.T) {
	l := newLiveness()
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	l.record("acme", contactPoll, t0)
	l.record("acme", contactPush, t0.Add(-time.Minute))
	if at, kind, ok := l.last("acme"); !ok || !at.Equal(t0) || kind != "poll" {
		t.Fatalf("last = %v %q %v, want the later poll", at, kind, ok)
	}
	if _, _, ok := l.watch("globex"); ok {
		t.Fatal("globex has a contact before any")
	}
	if ids := l.takeRevived(); ids != nil {
		t.Fatalf("revived before a contact: %v", ids)
	}
	l.record("globex", contactPush, t0)
	l.record("globex", contactPoll, t0.Add(time.Second))
	if ids := l.takeRevived(); len(ids) != 1 || ids[0] != "globex" {
		t.Fatalf("revived = %v, want [globex] once", ids)
	}
	if ids := l.takeRevived(); ids != nil {
		t.Fatalf("revived twice: %v", ids)
	}

	path := filepath.Join(t.TempDir(), livenessFile)
	if err := l.save(path); err != nil {
		t.Fatal(err)
	}
	back := newLiveness()
	if err := back.load(path); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"acme", "globex"} {
		want, wk, _ := l.last(id)
		if got, gk, ok := back.last(id); !ok || !got.Equal(want) || gk != wk {
			t.Errorf("%s read back as %v %q, want %v %q", id, got, gk, want, wk)
		}
	}
	for _, bad := range []string{`{"version":2,"contacts":[]}`, `{"version":1,"contacts":[{"install":"acme","at":`} {
		if err := writeFile(path, bad); err != nil {
			t.Fatal(err)
		}
		if err := newLiveness().load(path); err == nil {
			t.Errorf("load of %q: no error", bad)
		}
	}
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }

// FuzzLivenessFile: whatever the liveness file holds (a damaged disk, an
// older server), loading it does not panic, and what it takes is only
// contacts with an install and a time.
func FuzzLivenessFile(f *testing.F) {
	f.Add([]byte(`{"version":1,"contacts":[{"install":"acme","at":"2026-11-27T00:00:00Z","kind":"poll"}]}`))
	f.Add([]byte(`{"version":1,"contacts":[{"install":"","at":"2026-11-27T00:00:00Z"},{"install":"x","at":"0001-01-01T00:00:00Z","kind":"push"}]}`))
	f.Add([]byte(`{"version":2}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, livenessFile)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		l := newLiveness()
		if err := l.load(path); err != nil {
			return
		}
		for _, r := range l.since(0) {
			if r.Install == "" || r.At.IsZero() {
				t.Fatalf("loaded %+v from %q", r, data)
			}
		}
	})
}

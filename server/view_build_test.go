package server

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/fleet"
)

// TestFleetViewBuilding: while the first index is built, a page waits
// at most its wait, then answers 503 with how far the build is and the
// states of the installs read so far; once built, the page itself.
func TestFleetViewBuilding(t *testing.T) {
	now := time.Now()
	s := &Server{cfg: Config{Now: func() time.Time { return now.Add(-42 * time.Second) }, ViewStaleAfter: time.Hour}}
	v, err := newView(s, "t")
	if err != nil {
		t.Fatal(err)
	}
	v.build.wait = 10 * time.Millisecond
	v.build.total.Store(100000)
	for _, st := range []string{"Ready", "Ready", "Degraded", "<b>odd</b>"} {
		v.build.counted(st)
	}
	served := 0
	h := v.indexed(func(w http.ResponseWriter, r *http.Request) { served++ })
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest("GET", "/fleet", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || served != 0 {
		t.Fatalf("during the build: %d, Retry-After %q, page served %d times", rec.Code, rec.Header().Get("Retry-After"), served)
	}
	for _, want := range []string{
		`building the fleet index: 4 of 100000 installs read and verified, 42s since the server started`,
		`<tr data-state="Degraded"><td><span class="phase phase-degraded">Degraded</span></td><td class="n">1</td></tr>`,
		`<tr data-state="Ready"><td><span class="phase phase-ready">Ready</span></td><td class="n">2</td></tr>`,
		`&lt;b&gt;odd&lt;/b&gt;`,
		`<meta http-equiv="refresh" content="5">`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("building page lacks %s\n%s", want, body)
		}
	}
	if strings.Index(body, `data-state="Degraded"`) > strings.Index(body, `data-state="Ready"`) {
		t.Error("building page lists Ready before Degraded")
	}
	close(v.build.ready)
	rec = httptest.NewRecorder()
	h(rec, httptest.NewRequest("GET", "/fleet", nil))
	if served != 1 || rec.Code != http.StatusOK {
		t.Errorf("after the build: %d, page served %d times", rec.Code, served)
	}
}

// TestFleetViewCacheKeyed: a saved install is taken only when its
// desired commit, status commit and install file are all the ones read
// now, and never when its status was read with no key in force.
func TestFleetViewCacheKeyed(t *testing.T) {
	d, st := plumbing.NewHash("1111111111111111111111111111111111111111"), plumbing.NewHash("2222222222222222222222222222222222222222")
	other := plumbing.NewHash("3333333333333333333333333333333333333333")
	file, file2 := plumbing.NewHash("4444444444444444444444444444444444444444"), plumbing.NewHash("5555555555555555555555555555555555555555")
	v := &view{cache: map[string]viewCached{
		"acme":    {DesiredH: d, StatusH: st, File: file, Status: &fleet.Install{Verified: true}},
		"keyless": {DesiredH: d, StatusH: st, File: file, Keyless: true, Status: &fleet.Install{}},
		"fresh":   {DesiredH: d, File: file, Keyless: true},
	}}
	for _, c := range []struct {
		name        string
		id          string
		d, st, file plumbing.Hash
		wantSaved   bool
	}{
		{"same", "acme", d, st, file, true},
		{"other file", "acme", d, st, file2, false},
		{"no file now", "acme", d, st, plumbing.ZeroHash, false},
		{"status moved", "acme", d, other, file, false},
		{"status gone", "acme", d, plumbing.ZeroHash, file, false},
		{"desired moved", "acme", other, st, file, false},
		{"other install", "globex", d, st, file, false},
		{"status read without a key", "keyless", d, st, file, false},
		{"no status, no key needed", "fresh", d, plumbing.ZeroHash, file, true},
	} {
		if got := v.cached(c.id, c.d, c.st, c.file); (got != nil) != c.wantSaved {
			t.Errorf("%s: saved install taken %v, want %v", c.name, got != nil, c.wantSaved)
		}
	}
}

// FuzzViewCache: a saved index of any bytes is read or refused, never a
// panic; what it reads saves and reads again the same.
func FuzzViewCache(f *testing.F) {
	dir := f.TempDir()
	x := newFleetIndex()
	d := plumbing.NewHash("1111111111111111111111111111111111111111")
	x.entries["acme"] = &viewEntry{in: &viewInstall{ID: "acme", desiredH: d, file: d, Status: &fleet.Install{Install: "acme", Verified: true}}}
	path := filepath.Join(dir, "seed.gob")
	if err := saveViewCache(path, x, nil); err != nil {
		f.Fatal(err)
	}
	seed, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("not a saved index"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "in.gob")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		got, _, err := loadViewCache(p)
		if err != nil || got == nil {
			return
		}
		y := newFleetIndex()
		for id, c := range got {
			y.entries[id] = &viewEntry{in: &viewInstall{ID: id, desiredH: c.DesiredH, statsH: c.StatusH, file: c.File, keyless: c.Keyless, Desired: c.Desired, Status: c.Status, Err: c.Err}}
		}
		if err := saveViewCache(p, y, nil); err != nil {
			t.Fatal(err)
		}
		again, _, err := loadViewCache(p)
		if err != nil || len(again) != len(got) {
			t.Fatalf("saved again: %d installs, %v; read %d", len(again), err, len(got))
		}
	})
}

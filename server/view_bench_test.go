package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// viewFleetKinds are the statuses of a benchmark fleet, one install in
// twenty of each but the last, which the rest share: every state the view
// counts, and drift found and corrected.
var viewFleetKinds = []string{"failed", "unreachable", "drifted", "held", "stale", "corrected", "waiting", "ready"}

// viewFleetRepo makes a bare repository of n installs as the fleet view
// meets them: on main, each install's file with its agentKey and a
// region label; four rendered desired states (two channels, versions
// that differ); a status per install, signed by key, in one of
// viewFleetKinds, reporting on its desired state (one install in ten on
// the previous generation). Installs share their commits, so 100,000 are
// written in seconds; the server reads each install's refs as if they
// were its own.
func viewFleetRepo(tb testing.TB, n int, key *signature.Signer, now time.Time) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "fleet.git")
	gittest.InitBare(tb, dir)
	st := filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault())
	b := gitobj.NewBatch()
	who := object.Signature{Name: "nuon", Email: "nuon@nuon.invalid", When: now.Add(-time.Hour)}

	yaml := func(region string) plumbing.Hash {
		return b.Add(plumbing.BlobObject, []byte("channel: stable\ncloud: {provider: local}\nsandbox: {name: local}\nlabels: {region: "+region+"}\nagentKey: "+key.AuthorizedKey()+"\n"))
	}
	eu, us := yaml("eu"), yaml("us")
	entries := make([]gitobj.Entry, n)
	for i := range n {
		entries[i] = gitobj.Entry{Name: benchInstall(i) + ".yaml", Mode: filemode.Regular, Hash: eu}
		if i%3 == 0 {
			entries[i].Hash = us
		}
	}
	main, err := b.Commit(gitobj.Commit{Tree: b.Tree([]gitobj.Entry{{Name: "installs", Mode: filemode.Dir, Hash: b.Tree(entries)}}), Author: who, Message: "fleet\n"}, nil)
	if err != nil {
		tb.Fatal(err)
	}

	components := []string{"api", "database", "web"}
	type desired struct {
		commit plumbing.Hash
		gen    int64
	}
	var desireds []desired
	for d := range 4 {
		channel := []string{"stable", "beta"}[d%2]
		state, _ := json.Marshal(schemas.InstallState{APIVersion: schemas.APIVersion, Kind: schemas.KindInstallState, Channel: channel, Components: components})
		var files []gitobj.Entry
		for j, c := range components {
			cs, _ := json.Marshal(schemas.ComponentState{APIVersion: schemas.APIVersion, Kind: "ComponentState", Name: c, Version: fmt.Sprintf("%d.%d.0", j+1, d)})
			files = append(files, gitobj.Entry{Name: c + ".json", Mode: filemode.Regular, Hash: b.Add(plumbing.BlobObject, cs)})
		}
		tree := b.Tree([]gitobj.Entry{
			{Name: schemas.InstallStateFile, Mode: filemode.Regular, Hash: b.Add(plumbing.BlobObject, state)},
			{Name: schemas.ComponentsDir, Mode: filemode.Dir, Hash: b.Tree(files)},
		})
		gen := int64(d + 1)
		h, err := b.Commit(gitobj.Commit{Tree: tree, Author: who, Message: fmt.Sprintf("render\n\n%s: %d\n", schemas.TrailerGeneration, gen)}, nil)
		if err != nil {
			tb.Fatal(err)
		}
		desireds = append(desireds, desired{h, gen})
	}

	// statuses[d][k][behind]: the status of kind k on desired state d.
	statuses := make([][][2]plumbing.Hash, len(desireds))
	expires := now.Add(-30 * time.Minute)
	until := now.Add(6 * time.Hour)
	for d, ds := range desireds {
		statuses[d] = make([][2]plumbing.Hash, len(viewFleetKinds))
		for k, kind := range viewFleetKinds {
			for behind := range 2 {
				s := schemas.Status{APIVersion: schemas.APIVersion, Kind: schemas.KindStatus, Desired: ds.commit.String(), Applied: ds.commit.String(),
					Generation: ds.gen, Phase: schemas.InstallReady, HeartbeatEvery: "10m0s", Components: map[string]schemas.ComponentStatus{}}
				if behind == 1 {
					s.Desired, s.Generation = strings.Repeat("0", 40), ds.gen-1
				}
				for j, c := range components {
					s.Components[c] = schemas.ComponentStatus{Phase: schemas.PhaseApplied, Version: fmt.Sprintf("%d.%d.0", j+1, d)}
				}
				when := now.Add(-time.Minute)
				switch kind {
				case "failed":
					s.Phase = schemas.InstallDegraded
					s.Components["database"] = schemas.ComponentStatus{Phase: schemas.PhaseFailed, Error: "terraform apply: Error: creating RDS instance: AccessDenied: not authorized to perform rds:CreateDBInstance " + strings.Repeat("(detail) ", 60)}
				case "unreachable":
					when = now.Add(-time.Hour)
				case "drifted", "corrected":
					cs := s.Components["web"]
					cs.Drift = []schemas.ResourceDrift{{Kind: "Deployment", Name: "web", Action: "update"}}
					cs.Corrected = kind == "corrected"
					s.Components["web"] = cs
				case "held":
					s.Deferred = &schemas.Deferred{Reason: schemas.DeferredHold, Message: "held by the customer: change freeze", Since: now.Add(-time.Hour), Commit: ds.commit.String()}
				case "waiting":
					s.Deferred = &schemas.Deferred{Reason: schemas.DeferredWindow, Message: "outside every allow window", Since: now.Add(-time.Hour), Until: &until, Commit: ds.commit.String()}
				case "stale":
					s.Stale, s.Expires = true, &expires
				}
				body, _ := json.Marshal(s)
				tree := b.Tree([]gitobj.Entry{{Name: schemas.StatusFile, Mode: filemode.Regular, Hash: b.Add(plumbing.BlobObject, body)}})
				agent := object.Signature{Name: "nuon agent", Email: "agent@nuon.invalid", When: when}
				h, err := b.Commit(gitobj.Commit{Tree: tree, Author: agent, Message: fmt.Sprintf("status %s\n\n%s: %s\n", kind, schemas.TrailerPhase, s.Phase)}, key)
				if err != nil {
					tb.Fatal(err)
				}
				statuses[d][k][behind] = h
			}
		}
	}
	if err := b.Flush(st); err != nil {
		tb.Fatal(err)
	}

	refs := make([]string, 0, 2*n+1)
	for i := range n {
		d := i % len(desireds)
		k := (i / len(desireds)) % 20
		if k >= len(viewFleetKinds) {
			k = len(viewFleetKinds) - 1
		}
		behind := 0
		if (i/len(desireds))%10 == 9 {
			behind = 1
		}
		refs = append(refs, desireds[d].commit.String()+" "+schemas.InstallRef(benchInstall(i)),
			statuses[d][k][behind].String()+" "+schemas.StatusRef(benchInstall(i)))
	}
	refs = append(refs, main.String()+" "+schemas.MainRef)
	slices.SortFunc(refs, func(a, b string) int { return strings.Compare(a[41:], b[41:]) })
	if err := os.WriteFile(filepath.Join(dir, "packed-refs"), []byte("# pack-refs with: peeled fully-peeled sorted \n"+strings.Join(refs, "\n")+"\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// viewPages are the pages an operator opens, with the sizes of
// NUON_BENCH_VIEW_INSTALLS: the summary with the first page, pages deep
// in the list, filters that walk the whole fleet, a search by id prefix
// and by label, and one install's page.
func viewPages(n int) []string {
	last := (n + 99) / 100
	return []string{
		"/fleet",
		"/fleet?page=" + strconv.Itoa(last/2),
		"/fleet?page=" + strconv.Itoa(last),
		"/fleet?sort=id&page=" + strconv.Itoa(last/2),
		"/fleet?state=Degraded&page=2",
		"/fleet?state=Unreachable",
		"/fleet?is=drifted&channel=beta",
		"/fleet?component=database&phase=Failed",
		"/fleet?component=api&version=1.2.0&page=3",
		"/fleet?q=" + benchInstall(n / 2)[:len(benchInstall(n/2))-2],
		"/fleet?q=region%3Dus&sort=id&page=5",
		"/fleet?q=nobody",
		"/fleet/installs/" + benchInstall(n/2),
	}
}

// BenchmarkFleetView measures the fleet view's pages at 1,000 and 100,000
// installs (NUON_BENCH_VIEW_INSTALLS lists others) through a real HTTP
// server: each iteration opens every page of viewPages once, and a page
// once more after an install's status moved (the index takes in the one
// install). It reports the largest page in bytes and the slowest in
// milliseconds; the time from the server's start to its index built
// (read and verified every install, in the background) is timed apart
// (ready-s), polling /fleet, which shows the building page until then.
func BenchmarkFleetView(b *testing.B) {
	sizes := []int{1000, 100000}
	if s := os.Getenv("NUON_BENCH_VIEW_INSTALLS"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("NUON_BENCH_VIEW_INSTALLS: %q is not a number of installs", f)
			}
			sizes = append(sizes, n)
		}
	}
	key, _ := loadKey(b, "acme")
	for _, n := range sizes {
		b.Run(fmt.Sprintf("installs=%d", n), func(b *testing.B) {
			now := time.Now()
			dir := viewFleetRepo(b, n, key, now)
			started := time.Now()
			srv, err := server.New(context.Background(), server.Config{Dir: dir, ViewToken: viewToken, PollInterval: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			hs := httptest.NewServer(srv)
			closed := false
			defer func() {
				if !closed {
					hs.Close()
					srv.Close()
				}
			}()
			get := func(path string) (int, time.Duration) {
				req, _ := http.NewRequest(http.MethodGet, hs.URL+path, nil)
				req.Header.Set("Authorization", "Bearer "+viewToken)
				start := time.Now()
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				took := time.Since(start)
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("GET %s: %d %v\n%.300s", path, resp.StatusCode, err, body)
				}
				return len(body), took
			}
			// The index is built in the background from the start: a
			// request meanwhile waits at most a few seconds, then gets
			// the building page (503) with the progress.
			var building, buildingSize int
			var buildingSlowest time.Duration
			for {
				req, _ := http.NewRequest(http.MethodGet, hs.URL+"/fleet", nil)
				req.Header.Set("Authorization", "Bearer "+viewToken)
				t0 := time.Now()
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
				if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "building the fleet index: ") {
					b.Fatalf("GET /fleet while building: %d\n%.300s", resp.StatusCode, body)
				}
				building++
				buildingSize, buildingSlowest = max(buildingSize, len(body)), max(buildingSlowest, time.Since(t0))
				if building == 1 {
					_, p, _ := strings.Cut(string(body), `<p id="progress">`)
					p, _, _ = strings.Cut(p, "</p>")
					b.Logf("first building page: %s", p)
				}
			}
			first := time.Since(started)
			b.Logf("start to ready %.1f s", first.Seconds())
			if building > 0 {
				b.Logf("%d building pages, at most %d bytes, the slowest %.1f ms (a page waits up to 5 s for the index first)", building, buildingSize, float64(buildingSlowest.Microseconds())/1e3)
			}

			pages := viewPages(n)
			size := make([]int, len(pages))
			slowest := make([]time.Duration, len(pages))
			var moved time.Duration
			agent := newStatusAgent(benchInstall(1), hs.URL+"/tenant.git", key, statusRef(b, dir, benchInstall(1)))
			copyCommit(b, dir, agent)
			for b.Loop() {
				for i, p := range pages {
					bytes, took := get(p)
					size[i], slowest[i] = max(size[i], bytes), max(slowest[i], took)
				}
				b.StopTimer()
				if err := agent.push(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				_, took := get("/fleet")
				moved = max(moved, took)
			}
			maxSize, maxTime := 0, time.Duration(0)
			for i, p := range pages {
				b.Logf("%-48s %8d bytes %8.1f ms", p, size[i], float64(slowest[i].Microseconds())/1e3)
				maxSize, maxTime = max(maxSize, size[i]), max(maxTime, slowest[i])
			}
			b.Logf("%-48s %8s       %8.1f ms", "/fleet after one status moved", "", float64(moved.Microseconds())/1e3)
			b.ReportMetric(float64(maxSize), "max-B/page")
			b.ReportMetric(float64(maxTime.Microseconds())/1e3, "max-ms/page")
			b.ReportMetric(float64(moved.Microseconds())/1e3, "moved-ms/page")
			b.ReportMetric(first.Seconds(), "ready-s")

			// A restart takes the installs from the index the first
			// start saved, but for the one whose status moved.
			hs.Close()
			srv.Close()
			closed = true
			b.StopTimer()
			restarted := time.Now()
			srv2, err := server.New(context.Background(), server.Config{Dir: dir, ViewToken: viewToken, PollInterval: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			defer srv2.Close()
			hs2 := httptest.NewServer(srv2)
			defer hs2.Close()
			for {
				req, _ := http.NewRequest(http.MethodGet, hs2.URL+"/fleet", nil)
				req.Header.Set("Authorization", "Bearer "+viewToken)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			again := time.Since(restarted)
			b.Logf("restart to ready %.1f s", again.Seconds())
			b.ReportMetric(again.Seconds(), "restart-ready-s")
		})
	}
}

// statusRef is an install's status ref in the packed-refs of dir.
func statusRef(tb testing.TB, dir, id string) plumbing.Hash {
	tb.Helper()
	return plumbing.NewHash(gittest.Git(tb, dir, "rev-parse", schemas.StatusRef(id)))
}

// copyCommit gives the agent's own storage its head commit with its tree
// and files, as an agent has its status history.
func copyCommit(tb testing.TB, dir string, a *statusAgent) {
	tb.Helper()
	st := filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault())
	c, err := object.GetCommit(st, a.head)
	if err != nil {
		tb.Fatal(err)
	}
	hashes := []plumbing.Hash{c.Hash, c.TreeHash}
	t, err := c.Tree()
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range t.Entries {
		hashes = append(hashes, e.Hash)
	}
	for _, h := range hashes {
		o, err := st.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := a.st.SetEncodedObject(o); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestFleetViewPages: a fleet of 250 installs in pages of 100, problems
// first, searched by label and id prefix, each count agreeing with the
// summary.
func TestFleetViewPages(t *testing.T) {
	key, _ := loadKey(t, "acme")
	dir := viewFleetRepo(t, 250, key, time.Now())
	srv, err := server.New(context.Background(), server.Config{Dir: dir, ViewToken: viewToken, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	get := func(path string) string {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+viewToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	// rows are the installs listed, with their states.
	rows := func(page string) (ids, states []string) {
		for _, tr := range strings.Split(page, `<tr class="row-`)[1:] {
			_, rest, _ := strings.Cut(tr, `data-install="`)
			id, rest, _ := strings.Cut(rest, `"`)
			_, rest, _ = strings.Cut(rest, `data-state="`)
			state, _, _ := strings.Cut(rest, `"`)
			ids, states = append(ids, id), append(states, state)
		}
		return ids, states
	}
	for _, tc := range []struct {
		path, count string
		rows        int
		first       string // state of the first row
	}{
		{"/fleet", "250 of 250 installs · page 1 of 3", 100, "Degraded"},
		{"/fleet?page=3", "250 of 250 installs · page 3 of 3", 50, "Ready"},
		{"/fleet?sort=id&page=2", "250 of 250 installs · page 2 of 3", 100, ""},
		{"/fleet?q=region%3Dus", "84 of 250 installs", 84, "Degraded"},
		{"/fleet?q=i00012", "10 of 250 installs", 10, ""},
		{"/fleet?state=Unreachable", "16 of 250 installs", 16, "Unreachable"},
		{"/fleet?component=database&phase=Failed", "16 of 250 installs · component phase Failed", 16, "Degraded"},
		{"/fleet?is=corrected", "12 of 250 installs · corrected", 12, ""},
		{"/fleet?channel=nonesuch", "0 of 250 installs", 0, ""},
	} {
		t.Run(tc.path, func(t *testing.T) {
			page := get(tc.path)
			_, count, _ := strings.Cut(page, `<p class="count" id="count">`)
			count, _, _ = strings.Cut(count, "</p>")
			if count != tc.count {
				t.Errorf("count %q, want %q", count, tc.count)
			}
			ids, states := rows(page)
			if len(ids) != tc.rows {
				t.Errorf("%d rows, want %d", len(ids), tc.rows)
			}
			if tc.first != "" && (len(states) == 0 || states[0] != tc.first) {
				t.Errorf("first row %v, want %s", states[:min(1, len(states))], tc.first)
			}
			if strings.Contains(tc.path, "sort=id") && !slices.IsSorted(ids) {
				t.Errorf("sort=id rows out of order: %v", ids)
			}
		})
	}
	// The summary counts what the list holds: installs take kinds four
	// at a time, so 16 of 250 are Unreachable.
	if page := get("/fleet"); !strings.Contains(page, `<tr data-state="Unreachable"><td><span class="phase phase-unreachable">Unreachable</span></td><td class="n"><a href="/fleet?state=Unreachable">16</a>`) {
		t.Errorf("summary does not count 16 Unreachable:\n%.3000s", page)
	}
}

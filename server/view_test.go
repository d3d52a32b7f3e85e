package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/fleet"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

const viewToken = "operator-token-for-tests"

// pushStatus pushes (with the objects of mem, which keeps its earlier
// commits) a signed status commit for install id through the
// server, as the agent does, on top of parent; it returns the commit.
func pushStatus(t *testing.T, mem *memory.Storage, url, id string, key *signature.Signer, parent plumbing.Hash, st schemas.Status, when time.Time, msg string) plumbing.Hash {
	t.Helper()
	st.APIVersion, st.Kind, st.Install = "nuon.dev/v1", schemas.KindStatus, id
	body, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	bt := gitobj.NewBatch()
	blob := bt.Add(plumbing.BlobObject, body)
	tree := bt.Tree([]gitobj.Entry{{Name: schemas.StatusFile, Hash: blob, Mode: 0o100644}})
	var parents []plumbing.Hash
	if !parent.IsZero() {
		parents = []plumbing.Hash{parent}
	}
	who := object.Signature{Name: "nuon agent " + id, Email: id + "@nuon.invalid", When: when}
	h, err := bt.Commit(gitobj.Commit{Tree: tree, Parents: parents, Author: who, Message: fmt.Sprintf("%s\n\n%s: %s\n%s: %d\n%s: %s\n",
		msg, schemas.TrailerInstall, id, schemas.TrailerGeneration, st.Generation, schemas.TrailerPhase, st.Phase)}, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := bt.Flush(mem); err != nil {
		t.Fatal(err)
	}
	ref := plumbing.ReferenceName(schemas.StatusRef(id))
	r := agent.NewRemote(url, agent.WithRequestSigner(&request.Signer{Install: id, Key: key}))
	if err := r.Push(context.Background(), mem, ref, parent, h); err != nil {
		t.Fatalf("push status of %s: %v", id, err)
	}
	return h
}

// injected is in a failing component's error: the page must show it as
// text, never run it.
const injected = `<script>document.title="pwned"</script>`

// fixtureFleet serves the fixture tenant (acme and initech on stable,
// globex on beta) with the fleet view on: acme reports Ready twice,
// globex reports its database failing, initech has not reported.
func fixtureFleet(t *testing.T) (*env, *httptest.Server) {
	t.Helper()
	e, hs, _ := fixtureFleetServer(t)
	return e, hs
}

// fixtureFleetServer is fixtureFleet with its server, for a test that
// makes it read main again (Sync).
func fixtureFleetServer(t *testing.T) (*env, *httptest.Server, *server.Server) {
	t.Helper()
	e := newEnv(t)
	srv, err := server.New(context.Background(), server.Config{
		Dir: e.dir, PollInterval: time.Hour,
		ViewToken: viewToken, Logger: slog.New(slog.NewTextHandler(e.log, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := srv.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	url := hs.URL + "/tenant.git"

	repo, err := gitrepo.Open(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	desired := func(id string) fleet.Desired {
		h, err := repo.Ref(plumbing.ReferenceName(schemas.InstallRef(id)))
		if err != nil {
			t.Fatal(err)
		}
		d, err := fleet.ReadDesired(repo.Storer(), h)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	now := time.Now()
	status := func(d fleet.Desired, fail string) schemas.Status {
		st := schemas.Status{Desired: d.Commit, Applied: d.Commit, Generation: d.Generation, Phase: schemas.InstallReady, Components: map[string]schemas.ComponentStatus{}}
		for name, v := range d.Versions {
			cs := schemas.ComponentStatus{Phase: schemas.PhaseApplied, Version: v}
			if name == fail {
				cs = schemas.ComponentStatus{Phase: "Failed", Version: "", Error: "terraform apply: Error: creating RDS instance: AccessDenied " + injected}
				st.Phase, st.Applied = "Failed", ""
			}
			st.Components[name] = cs
		}
		return st
	}
	acme := desired("acme")
	acmeSt := memory.NewStorage()
	first := pushStatus(t, acmeSt, url, "acme", e.keys["acme"], plumbing.ZeroHash, status(acme, ""), now.Add(-3*time.Minute), "acme: applying generation 1")
	pushStatus(t, acmeSt, url, "acme", e.keys["acme"], first, status(acme, ""), now.Add(-time.Minute), "acme: ready at generation 1")
	globex := desired("globex")
	if _, ok := globex.Versions["database"]; !ok {
		t.Fatalf("globex has no database component: %v", globex.Versions)
	}
	pushStatus(t, memory.NewStorage(), url, "globex", e.keys["globex"], plumbing.ZeroHash, status(globex, "database"), now.Add(-20*time.Minute), "globex: database failed")
	return e, hs, srv
}

// fixtureVersions is what the summary's "versions running" must say of
// fixtureFleet: every component acme runs at its desired version, and
// globex's besides its failed database, which runs none.
func fixtureVersions(t *testing.T) map[string]map[string]string {
	t.Helper()
	e := newEnv(t)
	repo, err := gitrepo.Open(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]map[string]int{}
	for _, id := range []string{"acme", "globex"} {
		h, err := repo.Ref(plumbing.ReferenceName(schemas.InstallRef(id)))
		if err != nil {
			t.Fatal(err)
		}
		d, err := fleet.ReadDesired(repo.Storer(), h)
		if err != nil {
			t.Fatal(err)
		}
		for c, v := range d.Versions {
			if id == "globex" && c == "database" {
				continue
			}
			if n[c] == nil {
				n[c] = map[string]int{}
			}
			n[c][v]++
		}
	}
	out := map[string]map[string]string{}
	for c, m := range n {
		out[c] = map[string]string{}
		for v, k := range m {
			out[c][v] = fmt.Sprint(k)
		}
	}
	return out
}

// chromium finds Debian's chromium; without it the test is skipped, or
// fails under CI.
func chromium(t *testing.T) string {
	t.Helper()
	for _, n := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
		t.Fatalf("chromium is not installed (CI=%s): run `make chromium`", ci)
	}
	t.Skip("chromium is not installed; `make chromium` installs it")
	return ""
}

// TestFleetViewInChromium drives headless Chromium through the fleet view
// as an operator would: sign in, read the fleet table, see the failing
// component's error, filter by channel, open an install's audit log.
func TestFleetViewInChromium(t *testing.T) {
	_, hs := fixtureFleet(t)
	ctx := browser(t)
	var loginTitle, title, count string
	var rows []string
	var states, failing, traits map[string]string
	var versions map[string]map[string]string
	var png []byte
	var errorVisible bool
	err := chromedp.Do(ctx,
		chromedp.Navigate(hs.URL+"/fleet"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
		into(&loginTitle, chromedp.Evaluate[string](`document.title`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), viewToken),
		chromedp.Submit(chromedp.CSS(`input[name=token]`)),
		waitURL("/fleet"),
		chromedp.WaitVisible(chromedp.CSS(`#fleet`)),
		into(&title, chromedp.Evaluate[string](`document.title`)),
		into(&count, chromedp.Text(chromedp.CSS(`#count`))),
		into(&rows, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#fleet tbody tr")].map(r => r.innerText.replace(/\s+/g, " ").trim())`)),
		into(&states, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll("#states tr[data-state]")].map(r => [r.dataset.state, r.querySelector(".n").innerText]))`)),
		into(&traits, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll("#traits tr[data-trait]")].map(r => [r.dataset.trait, r.querySelector(".n").innerText]))`)),
		into(&failing, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll("#failing tr[data-component]")].map(r => [r.dataset.component, r.querySelector(".n").innerText]))`)),
		into(&versions, chromedp.Evaluate[map[string]map[string]string](`Object.fromEntries([...document.querySelectorAll("#versions .component")].map(c => [c.dataset.component, Object.fromEntries([...c.querySelectorAll("tr[data-version]")].map(r => [r.dataset.version, r.querySelector(".n").innerText]))]))`)),
		into(&errorVisible, chromedp.Evaluate[bool](`(() => { const e = document.querySelector("#fleet .error"); if (!e) return false; const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 && getComputedStyle(e).visibility === "visible"; })()`)),
		into(&png, chromedp.FullScreenshot(100)),
	)
	if err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(shotDir(t), "fleet.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
	if !strings.Contains(loginTitle, "Sign in") {
		t.Errorf("first page %q, want the sign-in page", loginTitle)
	}
	if title == "pwned" || !strings.Contains(title, "Fleet") {
		t.Fatalf("title %q", title)
	}
	if count != "3 of 3 installs" {
		t.Errorf("count %q", count)
	}
	// The summary, as a release manager reads it: one install in each
	// state, globex's database failing, the versions acme runs (globex's
	// failed database runs none).
	if diff := cmp.Diff(map[string]string{"Ready": "1", "Failed": "1", "Unreported": "1"}, states); diff != "" {
		t.Errorf("installs by state (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"database": "1"}, failing); diff != "" {
		t.Errorf("failing components (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"out-of-sync": "0", "drifted": "0", "corrected": "0", "unverified": "0", "awaiting-approval": "0"}, traits); diff != "" {
		t.Errorf("traits (-want +got):\n%s", diff)
	}
	if want := fixtureVersions(t); !cmp.Equal(want, versions) {
		t.Errorf("versions running (-want +got):\n%s", cmp.Diff(want, versions))
	}
	find := func(rows []string, words ...string) string {
		for _, r := range rows {
			ok := true
			for _, w := range words {
				ok = ok && strings.Contains(r, w)
			}
			if ok {
				return r
			}
		}
		return ""
	}
	if find(rows, "acme", "stable", "Ready", "verified") == "" {
		t.Errorf("no Ready, verified acme row on stable in\n%s", strings.Join(rows, "\n"))
	}
	failed := find(rows, "database", "Failed", "AccessDenied")
	if failed == "" || !strings.Contains(failed, injected) {
		t.Errorf("globex's failing database with its error (escaped, as text) not shown in\n%s", strings.Join(rows, "\n"))
	}
	if find(rows, "globex", "beta", "Failed", "quiet") == "" {
		t.Errorf("globex's 20-minute-old status not marked quiet in\n%s", strings.Join(rows, "\n"))
	}
	if find(rows, "stale") != "" || find(rows, "Stale") != "" {
		t.Errorf("no desired state expired, yet a row says stale:\n%s", strings.Join(rows, "\n"))
	}
	if find(rows, "acme", "yes", "gen 1 of 1") == "" {
		t.Errorf("acme not in sync at generation 1 of 1 in\n%s", strings.Join(rows, "\n"))
	}
	// Problems first: the failing install leads, Ready follows it.
	if len(rows) != 3 || !strings.HasPrefix(rows[0], "globex") || !strings.HasPrefix(rows[2], "acme") {
		t.Errorf("rows not problems first:\n%s", strings.Join(rows, "\n"))
	}
	if find(rows, "initech", "Unreported", "never") == "" {
		t.Errorf("initech (no status yet) not shown as Unreported in\n%s", strings.Join(rows, "\n"))
	}
	if !errorVisible {
		t.Error("the failing component's error is not visible")
	}

	// Filter by channel as a person does: pick beta, press Filter.
	var url string
	var filtered []string
	err = chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS(`select[name=channel]`), "beta"),
		chromedp.Click(chromedp.CSS(`.filters button`)),
		waitURL("channel=beta"),
		chromedp.WaitVisible(chromedp.CSS(`#fleet`)),
		into(&url, chromedp.Location()),
		into(&count, chromedp.Text(chromedp.CSS(`#count`))),
		into(&filtered, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#fleet tbody tr")].map(r => r.innerText.replace(/\s+/g, " ").trim())`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(url, "channel=beta") || count != "1 of 3 installs" || len(filtered) >= len(rows) ||
		find(filtered, "acme") != "" || find(filtered, "globex") == "" {
		t.Errorf("filter channel=beta: url %s, %q, rows\n%s", url, count, strings.Join(filtered, "\n"))
	}
	// The shared URL filters by state too.
	err = chromedp.Do(ctx,
		chromedp.Navigate(hs.URL+"/fleet?state=Failed"),
		chromedp.WaitVisible(chromedp.CSS(`#fleet`)),
		into(&filtered, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#fleet tbody tr")].map(r => r.innerText.replace(/\s+/g, " ").trim())`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	if find(filtered, "acme") != "" || find(filtered, "database", "Failed") == "" {
		t.Errorf("state=Failed rows\n%s", strings.Join(filtered, "\n"))
	}
	// The summary's failing count links to the installs where the
	// component failed.
	err = chromedp.Do(ctx,
		chromedp.Navigate(hs.URL+"/fleet"),
		chromedp.WaitVisible(chromedp.CSS(`#failing`)),
		chromedp.Click(chromedp.CSS(`#failing tr[data-component=database] a`)),
		waitURL("phase=Failed"),
		chromedp.WaitVisible(chromedp.CSS(`#fleet`)),
		into(&count, chromedp.Text(chromedp.CSS(`#count`))),
		into(&filtered, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#fleet tbody tr")].map(r => r.innerText.replace(/\s+/g, " ").trim())`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	if len(filtered) != 1 || find(filtered, "globex") == "" || !strings.HasPrefix(count, "1 of 3 installs") {
		t.Errorf("database failing: %q, rows\n%s", count, strings.Join(filtered, "\n"))
	}

	// acme's page: the audit log lists both status commits, signed by
	// acme's key and verified, and the rendered diff of its generation.
	var audit []string
	var diff string
	err = chromedp.Do(ctx,
		chromedp.Navigate(hs.URL+"/fleet"),
		chromedp.WaitVisible(chromedp.CSS(`#fleet`)),
		chromedp.Click(chromedp.CSS(`a[href="/fleet/installs/acme"]`)),
		waitURL("/fleet/installs/acme"),
		chromedp.WaitVisible(chromedp.CSS(`#audit`)),
		into(&audit, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#audit tbody tr")].map(r => r.innerText.replace(/\s+/g, " ").trim())`)),
		into(&diff, chromedp.Text(chromedp.CSS(`details.generation[open] pre.diff`))),
		into(&png, chromedp.FullScreenshot(100)),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shotDir(t), "install.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	if len(audit) != 2 || find(audit, "acme: ready at generation 1", "acme (SHA256:", "verified", "Ready") == "" ||
		find(audit, "acme: applying generation 1") == "" || !strings.Contains(audit[0], "ready") {
		t.Errorf("acme's audit log, newest first, both verified:\n%s", strings.Join(audit, "\n"))
	}
	if !strings.Contains(diff, "+++ b/"+schemas.InstallStateFile) {
		t.Errorf("generation diff does not add %s:\n%.500s", schemas.InstallStateFile, diff)
	}
}

// TestFleetViewAuth: the view opens only with the operator token; an
// install's signed request, a wrong token or none are refused, and a
// server without a token serves no view.
func TestFleetViewAuth(t *testing.T) {
	e, hs := fixtureFleet(t)
	get := func(base string, mod func(*http.Request)) int {
		req, _ := http.NewRequest("GET", base+"/fleet", nil)
		if mod != nil {
			mod(req)
		}
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	signed := func(r *http.Request) {
		if err := (&request.Signer{Install: "acme", Key: e.keys["acme"]}).Sign(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		mod  func(*http.Request)
		want int
	}{
		{"no token", nil, http.StatusUnauthorized},
		{"wrong token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer nope") }, http.StatusUnauthorized},
		{"install signature", signed, http.StatusUnauthorized},
		{"browser without session", func(r *http.Request) { r.Header.Set("Accept", "text/html") }, http.StatusSeeOther},
		{"operator token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+viewToken) }, http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := get(hs.URL, c.mod); got != c.want {
				t.Errorf("GET /fleet: %d, want %d", got, c.want)
			}
		})
	}
	// newEnv's server has no view token: no view at all.
	if got := get(e.http.URL, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+viewToken) }); got != http.StatusNotFound {
		t.Errorf("server without a view token: GET /fleet %d, want 404", got)
	}
}

// into makes an action that stores a's value in dst.
func into[T any](dst *T, a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		v, err := a(ctx, t)
		*dst = v
		return chromedp.Void{}, err
	}
}

// browser starts headless Chromium for one test and returns a context
// that drives it, with a deadline of 3 minutes; it is stopped at the
// test's end.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin := chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	// The first action starts the browser, on a context without a
	// deadline (a deadline there would stop the browser); the rest run
	// under one.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancelCtx()
		cancelAlloc()
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancel(); cancelCtx(); cancelAlloc() })
	return ctx
}

// waitURL waits until the page's address contains s and the page is
// loaded: a click's navigation is over.
func waitURL(s string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		for {
			ok, err := chromedp.Evaluate[bool](fmt.Sprintf("location.href.includes(%q) && document.readyState === 'complete'", s))(ctx, t)
			if err == nil && ok {
				return chromedp.Void{}, nil
			}
			select {
			case <-ctx.Done():
				return chromedp.Void{}, fmt.Errorf("wait for an address with %q: %w", s, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// shotDir is where screenshots go: the test's temporary directory, or
// NUON_SCREENSHOT_DIR to keep them.
func shotDir(t *testing.T) string {
	if d := os.Getenv("NUON_SCREENSHOT_DIR"); d != "" {
		return d
	}
	return t.TempDir()
}

// TestFleetMetrics: installs by state and the status age histogram come
// from the fleet snapshot, and move when a status is pushed.
func TestFleetMetrics(t *testing.T) {
	e, hs := fixtureFleet(t)
	m := scrape(t, hs.URL+"/metrics")
	for s, want := range map[string]float64{
		`nuon_server_installs{state="Ready"}`:             1,
		`nuon_server_installs{state="Failed"}`:            1,
		`nuon_server_installs{state="Unreported"}`:        1,
		`nuon_server_installs_status_quiet`:               2, // globex (20m) and initech (never)
		`nuon_server_status_age_seconds_count`:            2,
		`nuon_server_status_age_seconds_bucket{le="120"}`: 1,
	} {
		if m[s] != want {
			t.Errorf("%s = %v, want %v", s, m[s], want)
		}
	}
	pushStatus(t, memory.NewStorage(), hs.URL+"/tenant.git", "initech", e.keys["initech"], plumbing.ZeroHash,
		schemas.Status{Phase: schemas.InstallReady, Generation: 1}, time.Now(), "initech: ready")
	m = scrape(t, hs.URL+"/metrics")
	if m[`nuon_server_installs{state="Ready"}`] != 2 || m[`nuon_server_installs{state="Unreported"}`] != 0 || m[`nuon_server_status_age_seconds_count`] != 3 {
		t.Errorf("after initech's first status: Ready %v, Unreported %v, ages %v", m[`nuon_server_installs{state="Ready"}`], m[`nuon_server_installs{state="Unreported"}`], m[`nuon_server_status_age_seconds_count`])
	}
}

// TestFleetViewLabels: a label added to an install's file on main is
// searchable once the server has the new main, and moves no count.
func TestFleetViewLabels(t *testing.T) {
	e, hs, srv := fixtureFleetServer(t)
	get := func(path string) string {
		req, _ := http.NewRequest("GET", hs.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+viewToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	count := func(page string) string {
		_, c, _ := strings.Cut(page, `id="count">`)
		c, _, _ = strings.Cut(c, "</p>")
		return c
	}
	if got := count(get("/fleet?q=region%3Deu")); got != "0 of 3 installs" {
		t.Fatalf("before the label: %q", got)
	}
	work := filepath.Join(t.TempDir(), "work")
	e.mustGit("", "clone", "--quiet", "--no-local", "--branch", "main", e.upstream, work)
	f := filepath.Join(work, "installs", "acme.yaml")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, append(b, "labels:\n  region: eu\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	e.mustGit(work, "commit", "--quiet", "-am", "label acme")
	e.mustGit(work, "push", "--quiet", "origin", "main")
	// The view's server has no upstream: its main is the one in its
	// repository, read again on Sync.
	e.mustGit(work, "push", "--quiet", e.dir, "main")
	if err := srv.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	page := get("/fleet?q=region%3Deu")
	if count(page) != "1 of 3 installs" || !strings.Contains(page, `data-install="acme"`) || !strings.Contains(page, `<span class="label">region=eu</span>`) {
		t.Fatalf("acme labelled region=eu not found: %q\n%.2000s", count(page), page)
	}
	if !strings.Contains(get("/fleet"), `<a href="/fleet?state=Ready">1</a>`) {
		t.Error("a label moved the count of Ready installs")
	}
	if got := count(get("/fleet?is=unverified")); !strings.HasPrefix(got, "0 of 3 installs") {
		t.Fatalf("before the new key: %q unverified", got)
	}
	// The operator re-keys acme on main: its status, signed by its old
	// key, is checked again and is not signed by the key in force.
	b, err = os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	old, _, _ := strings.Cut(string(b)[strings.Index(string(b), "agentKey: ")+len("agentKey: "):], "\n")
	ci, err := os.ReadFile(filepath.Join(fixtureKeys, "ci.pub"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte(strings.Replace(string(b), old, strings.TrimSpace(string(ci)), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	e.mustGit(work, "commit", "--quiet", "-am", "re-key acme")
	e.mustGit(work, "push", "--quiet", e.dir, "main")
	if err := srv.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	page = get("/fleet?is=unverified")
	if !strings.HasPrefix(count(page), "1 of 3 installs") || !strings.Contains(page, `data-install="acme"`) {
		t.Fatalf("acme re-keyed is not unverified: %q\n%.2000s", count(page), page)
	}
	if got := count(get("/fleet?q=region%3Deu")); got != "1 of 3 installs" {
		t.Errorf("after the new key: %q labelled region=eu", got)
	}
}

// TestFleetViewRowsDesired: a row shows each component's desired version
// beside what the install applied, read for the rows of the page (the
// index keeps no desired versions): initech, which has not reported,
// lists every component of its desired state; globex its failed
// database's desired version.
func TestFleetViewRowsDesired(t *testing.T) {
	e, hs := fixtureFleet(t)
	repo, err := gitrepo.Open(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ id, only string }{{"initech", ""}, {"globex", "database"}} {
		h, err := repo.Ref(plumbing.ReferenceName(schemas.InstallRef(c.id)))
		if err != nil {
			t.Fatal(err)
		}
		d, err := fleet.ReadDesired(repo.Storer(), h)
		if err != nil || len(d.Versions) == 0 {
			t.Fatalf("%s's desired state: %v, %v", c.id, d.Versions, err)
		}
		for i := range 2 { // the second from what the first page read
			body := page(t, hs, "/fleet?q="+c.id)
			for name, v := range d.Versions {
				if c.only != "" && name != c.only {
					continue
				}
				if want := "<div>" + name + " –" + " / " + v + "</div>"; !strings.Contains(body, want) {
					t.Errorf("page %d: %s's row lacks %q\n%s", i+1, c.id, want, body)
				}
			}
		}
	}
}

package server_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/fleet"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/schemas"
)

// planHash is the hash of initech's waiting plan in fixtureApproval.
const planHash = "sha256:3f1c0000000000000000000000000000000000000000000000000000000000aa"

// fixtureApproval is fixtureFleet with initech reporting its database's
// plan waiting for approval, the plan's diff holding injected.
func fixtureApproval(t *testing.T) *httptest.Server {
	t.Helper()
	e, hs, _ := fixtureFleetServer(t)
	repo, err := gitrepo.Open(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	h, err := repo.Ref(plumbing.ReferenceName(schemas.InstallRef("initech")))
	if err != nil {
		t.Fatal(err)
	}
	d, err := fleet.ReadDesired(repo.Storer(), h)
	if err != nil {
		t.Fatal(err)
	}
	st := schemas.Status{Desired: d.Commit, Generation: d.Generation, Phase: schemas.InstallAwaitingApproval, Components: map[string]schemas.ComponentStatus{}}
	for name, v := range d.Versions {
		cs := schemas.ComponentStatus{Phase: schemas.PhaseApplied, Version: v}
		if name == "database" {
			cs = schemas.ComponentStatus{Phase: schemas.PhaseAwaitingApproval, Plan: &schemas.PlanRecord{
				Component: "database", Hash: planHash, Size: 2048, Job: "plan-1",
				Summary: schemas.PlanSummary{Replace: []string{"aws_db_instance.main"}, Counts: map[string]int{"replace": 1}},
				Diff:    "# aws_db_instance.main must be replaced\n-/+ engine_version = \"15\" -> \"16\" " + injected + "\n",
				Needs:   "replace needs approval",
			}}
		}
		st.Components[name] = cs
	}
	pushStatus(t, memory.NewStorage(), hs.URL+"/tenant.git", "initech", e.keys["initech"], plumbing.ZeroHash, st, time.Now().Add(-time.Minute), "initech: database plan awaits approval")
	return hs
}

// page gets path with the operator token and returns the page.
func page(t *testing.T, hs *httptest.Server, path string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", hs.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+viewToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return string(b)
}

func TestFleetViewApprovals(t *testing.T) {
	hs := fixtureApproval(t)

	fl := page(t, hs, "/fleet")
	for _, want := range []string{
		`<tr data-trait="awaiting-approval"><td>plans awaiting approval</td><td class="n"><a href="/fleet?is=awaiting-approval">1</a>`,
		`<a href="/fleet?state=AwaitingApproval">1</a>`,
	} {
		if !strings.Contains(fl, want) {
			t.Errorf("/fleet lacks %s", want)
		}
	}
	list := page(t, hs, "/fleet?is=awaiting-approval")
	if !strings.Contains(list, `data-install="initech"`) || strings.Contains(list, `data-install="acme"`) || strings.Contains(list, `data-install="globex"`) {
		t.Errorf("?is=awaiting-approval does not list initech alone")
	}
	if !strings.Contains(list, "1 of 3 installs") {
		t.Errorf("?is=awaiting-approval: count is not 1 of 3")
	}

	in := page(t, hs, "/fleet/installs/initech")
	for _, want := range []string{
		`<section class="plan" id="plan-database" data-component="database" data-phase="AwaitingApproval">`,
		`<code class="hash">` + planHash + `</code> · 2048 bytes · job plan-1`,
		`<dd class="needs">replace needs approval</dd>`,
		`<div>± replace aws_db_instance.main</div>`,
		`<pre class="approve">nuon approve initech database --plan ` + planHash + ` --key ~/.ssh/approver</pre>`,
		`&lt;script&gt;document.title=&#34;pwned&#34;&lt;/script&gt;`,
	} {
		if !strings.Contains(in, want) {
			t.Errorf("initech's page lacks %s", want)
		}
	}
	if strings.Contains(in, injected) {
		t.Errorf("initech's page holds the plan diff's script unescaped")
	}
	if other := page(t, hs, "/fleet/installs/acme"); strings.Contains(other, `class="plan"`) || strings.Contains(other, "nuon approve") {
		t.Errorf("acme's page shows a plan it has none of")
	}
}

// TestFleetViewApprovalInChromium: an operator opens initech's page in
// headless Chromium; the plan diff's script shows as text and never
// runs, and no script element reaches the page.
func TestFleetViewApprovalInChromium(t *testing.T) {
	hs := fixtureApproval(t)
	ctx := browser(t)
	var title, diff, approve string
	var scripts int
	err := chromedp.Do(ctx,
		chromedp.Navigate(hs.URL+"/fleet/installs/initech"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), viewToken),
		chromedp.Submit(chromedp.CSS(`input[name=token]`)),
		waitURL("/fleet/installs/initech"),
		chromedp.WaitVisible(chromedp.CSS(`#plan-database .plan-diff`)),
		into(&title, chromedp.Evaluate[string](`document.title`)),
		into(&diff, chromedp.Text(chromedp.CSS(`#plan-database .plan-diff`))),
		into(&approve, chromedp.Text(chromedp.CSS(`#plan-database .approve`))),
		into(&scripts, chromedp.Evaluate[int](`document.querySelectorAll("script").length`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	if title == "pwned" || scripts != 0 {
		t.Fatalf("the plan diff's script ran or reached the page: title %q, %d script elements", title, scripts)
	}
	if !strings.Contains(diff, injected) {
		t.Errorf("the plan diff does not show the script as text: %q", diff)
	}
	if approve != "nuon approve initech database --plan "+planHash+" --key ~/.ssh/approver" {
		t.Errorf("approve command line %q", approve)
	}
}

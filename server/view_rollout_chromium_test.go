package server_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"nuon.dev/nuon/schemas"
)

// TestRolloutPageInChromium: a release manager signs in to the fleet view
// in headless Chromium after the canary of stable failed: the rollout page
// says halted, shows the canary wave stopped with its failed install and
// that install's error as text, and the decisions that led there. The
// screenshot is the README's (NUON_SCREENSHOT_DIR=docs writes
// docs/rollout.png).
func TestRolloutPageInChromium(t *testing.T) {
	e := newViewEnv(t)
	startCanary(t, e, "1h")
	desired := e.serverRef(schemas.InstallRef("acme"))
	status, _ := json.Marshal(schemas.Status{APIVersion: schemas.APIVersion, Kind: "Status", Install: "acme", Desired: desired, Applied: desired,
		Phase: schemas.InstallDegraded, Components: map[string]schemas.ComponentStatus{
			"database": {Phase: schemas.PhaseFailed, Error: "terraform apply: engine version 1.1.0 is not available in this region"}}})
	local := localRepo(t)
	c := e.statusCommit(local, "acme", "", e.keyFiles["acme"], string(status))
	e.mustGit(local, "push", "--quiet", e.proxy("acme", e.keys["acme"]), c+":"+schemas.StatusRef("acme"))
	e.waitDecision(schemas.DecisionHalted)

	ctx := browser(t)
	var heading, failed, title string
	var decisions []string
	var errorVisible bool
	var png []byte
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.http.URL+"/fleet/rollouts/stable"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), viewToken),
		chromedp.Submit(chromedp.CSS(`input[name=token]`)),
		waitURL("/fleet/rollouts/stable"),
		chromedp.WaitVisible(chromedp.CSS(`h1`)),
		into(&title, chromedp.Evaluate[string](`document.title`)),
		into(&heading, chromedp.Text(chromedp.CSS(`h1`))),
		into(&failed, chromedp.Text(chromedp.CSS(`tr[data-install="acme"]`))),
		into(&decisions, chromedp.Evaluate[[]string](`[...document.querySelectorAll("body")].map(b => b.innerText).join("\n").split("\n").filter(l => l.includes("nuon: rollout stable:"))`)),
		into(&errorVisible, chromedp.Evaluate[bool](`(() => { const r = document.querySelector('tr[data-install="acme"]').getBoundingClientRect(); return r.width > 0 && r.height > 0; })()`)),
		into(&png, chromedp.FullScreenshot(100)),
	)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(heading, "Rollout of stable") || !strings.Contains(heading, "halted") {
		t.Errorf("heading %q", heading)
	}
	if !strings.Contains(failed, "failed") || !strings.Contains(failed, "engine version 1.1.0 is not available") || !errorVisible {
		t.Errorf("acme's row %q (visible %v)", failed, errorVisible)
	}
	if !strings.Contains(title, "stable") {
		t.Errorf("title %q", title)
	}
	for _, want := range []string{"halted wave 1 (canary)", "started wave 1 (canary)", "baseline"} {
		if !strings.Contains(strings.Join(decisions, "\n"), want) {
			t.Errorf("the decisions shown %q lack %q", decisions, want)
		}
	}
	if err := os.WriteFile(filepath.Join(shotDir(t), "rollout.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

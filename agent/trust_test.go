package agent_test

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/fleet"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

const (
	acmeStatus  = "refs/heads/nuon/status/acme"
	acmeDesired = "refs/heads/nuon/installs/acme"
)

// forgeStatus writes a status commit for acme on top of parent (none when
// empty) that claims nothing was ever applied (generation 0), signed with
// signKey (unsigned when empty), and points the server's status ref at it.
func (tn *tenant) forgeStatus(t *testing.T, parent, signKey string) string {
	t.Helper()
	status := `{"apiVersion": "nuon.dev/v1", "kind": "InstallStatus", "install": "acme", "generation": 0, "phase": "Ready", "components": {}}` + "\n"
	blob, err := gittest.Run(tn.bare, []byte(status), "hash-object", "-w", "--stdin")
	if err != nil {
		t.Fatal(err)
	}
	tree, err := gittest.Run(tn.bare, []byte("100644 blob "+blob+"\tstatus.json\n"), "mktree")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"commit-tree", tree, "-m", "nuon: status acme generation 0: Ready\n\nNuon-Install: acme\nNuon-Generation: 0\nNuon-Desired: none\nNuon-Phase: Ready"}
	if parent != "" {
		args = append(args, "-p", parent)
	}
	if signKey != "" {
		args = append([]string{"-c", "gpg.format=ssh", "-c", "user.signingkey=" + signKey}, append(args, "-S")...)
	}
	forged := tn.git(args...)
	tn.git("update-ref", acmeStatus, forged)
	return forged
}

// checkReplaced checks that the server's status tip is acme's own signed
// merge of its verified history (first parent) and the forged commit.
func (tn *tenant) checkReplaced(t *testing.T, own, forged string) {
	t.Helper()
	if got := tn.git("rev-parse", acmeStatus+"^1"); got != own {
		t.Errorf("status tip's first parent %s, want the agent's own verified status %s", got, own)
	}
	if got := tn.git("rev-parse", acmeStatus+"^2"); got != forged {
		t.Errorf("status tip's second parent %s, want the forged commit %s", got, forged)
	}
	msg := tn.git("log", "-1", "--format=%B", acmeStatus)
	if want := "Replaced forged status commit " + forged[:12] + ": not signed by this install's key"; !strings.Contains(msg, want) {
		t.Errorf("status commit message lacks %q:\n%s", want, msg)
	}
	signers := filepath.Join(t.TempDir(), "allowed")
	writeFile(t, signers, "acme "+tn.keys["acme"].AuthorizedKey()+"\n")
	gittest.Git(t, tn.bare, "-c", "gpg.ssh.allowedSignersFile="+signers, "verify-commit", acmeStatus)
	status := tn.git("show", acmeStatus+":status.json")
	if !strings.Contains(status, `"commit": "`+forged+`"`) {
		t.Errorf("status.json does not name the forged commit:\n%s", status)
	}
	if err := schemas.ValidateJSON(schemas.SchemaStatus, []byte(status)); err != nil {
		t.Errorf("status.json does not match its schema: %v", err)
	}
}

// TestForgedStatusFreshWorkdir: someone with write access to the status
// ref puts a status that claims nothing was applied on top of acme's real
// one, and rolls the desired ref back to generation 1. A fresh agent
// workdir must not adopt the forged baseline: it refuses the rollback
// against the highest generation its own key signed, and replaces the
// forged tip.
func TestForgedStatusFreshWorkdir(t *testing.T) {
	for _, tc := range []struct{ name, key string }{
		{"unsigned", ""},
		{"another install's key", filepath.Join(fixtureKeys, "globex")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := newTenant(t)
			first := tn.agent("acme")
			first.reconcile(t)
			gen1 := tn.git("rev-parse", acmeDesired)
			tn.write("installs/acme.yaml", readFile(t, filepath.Join(tn.src, "installs/acme.yaml"))+"versions: {d: 1.1.0}\n")
			tn.commit("acme: d 1.1.0")
			tn.renderMain()
			if st := first.reconcile(t).Status; st.Generation != 2 {
				t.Fatalf("generation %d, want 2", st.Generation)
			}
			own := tn.git("rev-parse", acmeStatus)
			key := ""
			if tc.key != "" {
				key = keyFile(t, tc.key)
			}
			forged := tn.forgeStatus(t, own, key)
			tn.git("update-ref", acmeDesired, gen1)

			fresh := tn.agent("acme")
			rep := fresh.reconcile(t)
			st := rep.Status
			if st.Phase != schemas.InstallRefused || st.Refusal == nil || !strings.Contains(st.Refusal.Reason, "not newer than the applied generation 2") {
				t.Fatalf("phase %s refusal %+v, want the rollback to generation 1 refused against generation 2", st.Phase, st.Refusal)
			}
			if n := len(runs(t, fresh.records)); n != 0 {
				t.Errorf("%d plugin calls on a rolled-back commit", n)
			}
			if st.Forged == nil || st.Forged.Commit != forged || !strings.Contains(st.Forged.Reason, "not signed by this install's key") {
				t.Errorf("status forged = %+v, want commit %s not signed by this install's key", st.Forged, forged)
			}
			if !rep.Pushed || tn.git("rev-parse", acmeStatus) != rep.StatusCommit.String() {
				t.Fatalf("replacement not pushed: pushed %v", rep.Pushed)
			}
			tn.checkReplaced(t, own, forged)
			audit := gittest.Git(t, filepath.Join(fresh.workdir, "work", "repo.git"), "rev-parse", agent.ForgedRef("acme", plumbing.NewHash(forged)).String())
			if audit != forged {
				t.Errorf("audit ref holds %s, want %s", audit, forged)
			}
			// Recovered: the next poll is idle and moves nothing.
			if again := fresh.reconcile(t); !again.Idle || again.StatusCommit != rep.StatusCommit {
				t.Errorf("after the replacement: idle %v, status %s (was %s)", again.Idle, again.StatusCommit, rep.StatusCommit)
			}
		})
	}
}

// TestForgedStatusDoesNotWedge: a forged commit on the status ref of a
// running agent must not make every later push fail as non-fast-forward.
func TestForgedStatusDoesNotWedge(t *testing.T) {
	tn := newTenant(t)
	a := tn.agent("acme")
	a.reconcile(t)
	own := tn.git("rev-parse", acmeStatus)
	forged := tn.forgeStatus(t, "", keyFile(t, filepath.Join(fixtureKeys, "globex")))
	tn.write("channels/stable.yaml", "components: {a: 1.0.0, b: 1.0.0, c: 1.0.0, d: 1.1.0}\n")
	tn.commit("promote d")
	tn.renderMain()

	before := len(runs(t, a.records))
	rep := a.reconcile(t)
	if got := runs(t, a.records)[before:]; strings.Join(got, " ") != "acme_d_1.1.0_update acme_d_1.1.0_done" {
		t.Errorf("jobs after the forgery: %v", got)
	}
	if rep.Status.Forged == nil || rep.Status.Forged.Commit != forged || rep.Status.Generation != 2 {
		t.Errorf("status: forged %+v generation %d", rep.Status.Forged, rep.Status.Generation)
	}
	if !rep.Pushed {
		t.Fatal("status not pushed over the forged commit")
	}
	tn.checkReplaced(t, own, forged)
	if again := a.reconcile(t); !again.Idle || !again.Pushed {
		t.Errorf("after the replacement: idle %v pushed %v", again.Idle, again.Pushed)
	}
}

// clock is a settable clock for Config.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// resign writes a commit with tree's content on top of parent, signed by
// the render key, for acme at generation gen, expiring at expires: what a
// renderer that bounds freshness writes.
func (tn *tenant) resign(t *testing.T, tree, parent string, gen int, expires time.Time) string {
	t.Helper()
	msg := tn.git("log", "-1", "--format=%B", parent)
	msg = strings.TrimRight(bumpGeneration(msg, gen), "\n") + "\n" + schemas.TrailerExpires + ": " + expires.UTC().Format(time.RFC3339)
	key := keyFile(t, filepath.Join(fixtureKeys, "render"))
	c := tn.git("-c", "gpg.format=ssh", "-c", "user.signingkey="+key, "commit-tree", "-S", tree, "-p", parent, "-m", msg)
	tn.git("update-ref", acmeDesired, c)
	return c
}

// TestFrozenRefTurnsStale: the desired ref stops moving (a frozen or
// withheld ref) while time passes. The agent keeps the applied state,
// reports Stale once, applies nothing expired, and leaves Stale by itself
// when a fresh commit arrives.
func TestFrozenRefTurnsStale(t *testing.T) {
	tn := newTenant(t)
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &clock{now: base}
	a := tn.agent("acme", func(c *agent.Config) { c.Now = clk.Now })
	gen1 := tn.git("rev-parse", acmeDesired)
	fresh := tn.resign(t, tn.git("rev-parse", gen1+"^{tree}"), gen1, 2, base.Add(time.Hour))

	st := a.reconcile(t).Status
	if st.Phase != schemas.InstallReady || st.Stale || st.Expires == nil || !st.Expires.Equal(base.Add(time.Hour)) || st.Applied != fresh {
		t.Fatalf("first pass: phase %s stale %v expires %v applied %s", st.Phase, st.Stale, st.Expires, st.Applied)
	}
	clk.Set(base.Add(30 * time.Minute))
	if rep := a.reconcile(t); !rep.Idle {
		t.Fatalf("a poll before the expiry was not idle")
	}

	// Time passes the expiry with no new commit: one status commit says Stale.
	clk.Set(base.Add(2 * time.Hour))
	rep := a.reconcile(t)
	if !rep.Status.Stale || rep.Idle || rep.Status.Phase != schemas.InstallReady || rep.Status.Applied != fresh {
		t.Fatalf("after the expiry: stale %v idle %v phase %s applied %s", rep.Status.Stale, rep.Idle, rep.Status.Phase, rep.Status.Applied)
	}
	status := tn.git("show", acmeStatus+":status.json")
	if !strings.Contains(status, `"stale": true`) || !strings.Contains(status, `"expires": "2030-01-01T01:00:00Z"`) {
		t.Errorf("server status does not say stale with the expiry:\n%s", status)
	}
	if err := schemas.ValidateJSON(schemas.SchemaStatus, []byte(status)); err != nil {
		t.Errorf("status.json does not match its schema: %v", err)
	}
	staleCommit := rep.StatusCommit
	if again := a.reconcile(t); !again.Idle || again.StatusCommit != staleCommit {
		t.Errorf("a second stale poll wrote a status commit")
	}
	rows := readFleet(t, tn)
	if len(rows) != 1 || rows[0].State != "Stale" || !rows[0].Stale || rows[0].Expires == nil {
		t.Errorf("fleet view: %+v, want state Stale with the expiry", rows)
	}

	// The renderer re-signs the same state and generation with a later
	// expiry: accepted, no job, no longer stale. Replaying the older
	// signature of that state afterwards is refused.
	refreshed := tn.resign(t, tn.git("rev-parse", fresh+"^{tree}"), fresh, 2, base.Add(3*time.Hour))
	before := len(runs(t, a.records))
	rep = a.reconcile(t)
	if st := rep.Status; st.Stale || st.Refusal != nil || st.Desired != refreshed || st.Applied != refreshed || st.Generation != 2 {
		t.Fatalf("a re-signed commit: stale %v refusal %+v desired %s applied %s generation %d", st.Stale, st.Refusal, st.Desired, st.Applied, st.Generation)
	}
	tn.git("update-ref", acmeDesired, fresh)
	if st := a.reconcile(t).Status; st.Refusal == nil || !strings.Contains(st.Refusal.Reason, "rollback or replay") {
		t.Fatalf("a replay of the older signature: refusal %+v", st.Refusal)
	}
	tn.git("update-ref", acmeDesired, refreshed)
	if st := a.reconcile(t).Status; st.Refusal != nil || st.Stale {
		t.Fatalf("back to the re-signed commit: refusal %+v stale %v", st.Refusal, st.Stale)
	}
	if n := len(runs(t, a.records)) - before; n != 0 {
		t.Errorf("%d plugin calls for a re-signed unchanged state", n)
	}
	clk.Set(base.Add(4 * time.Hour))
	if st := a.reconcile(t).Status; !st.Stale {
		t.Fatalf("the re-signed commit's expiry passed and the status is not stale")
	}

	// A new commit that is already expired is not applied.
	tn.write("channels/stable.yaml", "components: {a: 1.0.0, b: 1.0.0, c: 1.0.0, d: 1.1.0}\n")
	tn.commit("promote d")
	tn.renderMain()
	promoted := tn.git("rev-parse", acmeDesired+"^{tree}")
	before = len(runs(t, a.records))
	expired := tn.resign(t, promoted, refreshed, 4, base.Add(90*time.Minute))
	rep = a.reconcile(t)
	if rep.Outcome != agent.OutcomeStale || !rep.Status.Stale || rep.Status.Applied != refreshed || rep.Status.Desired != expired {
		t.Errorf("an expired commit: outcome %s stale %v applied %s desired %s", rep.Outcome, rep.Status.Stale, rep.Status.Applied, rep.Status.Desired)
	}
	if n := len(runs(t, a.records)) - before; n != 0 {
		t.Errorf("%d plugin calls for an expired commit", n)
	}

	// A freshly signed commit clears Stale and is applied.
	renewed := tn.resign(t, promoted, expired, 5, base.Add(5*time.Hour))
	rep = a.reconcile(t)
	st = rep.Status
	if st.Stale || st.Phase != schemas.InstallReady || st.Applied != renewed || st.Generation != 5 || !st.Expires.Equal(base.Add(5*time.Hour)) {
		t.Errorf("after a fresh commit: stale %v phase %s applied %s generation %d expires %v", st.Stale, st.Phase, st.Applied, st.Generation, st.Expires)
	}
	if got := runs(t, a.records)[before:]; strings.Join(got, " ") != "acme_d_1.1.0_update acme_d_1.1.0_done" {
		t.Errorf("jobs after the fresh commit: %v", got)
	}
	if rows := readFleet(t, tn); rows[0].State != schemas.InstallReady || rows[0].Stale {
		t.Errorf("fleet view after a fresh commit: state %s stale %v", rows[0].State, rows[0].Stale)
	}
}

func readFleet(t *testing.T, tn *tenant) []fleet.Install {
	t.Helper()
	repo, err := gitrepo.Open(tn.bare)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := fleet.Read(repo, map[string]string{"acme": tn.keys["acme"].AuthorizedKey()}, "acme")
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestFrozenRefWithRenderer: the same with the renderer's own freshness
// bound (nuon.yaml freshness.validFor): the ref is frozen while time
// passes, the status turns Stale, and the renderer's next run (which
// re-signs the unchanged state with a new expiry) clears it, with no job.
func TestFrozenRefWithRenderer(t *testing.T) {
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &clock{now: base}
	tn := newTenant(t, func(tn *tenant) { tn.now = clk.Now })
	tn.write("nuon.yaml", readFile(t, filepath.Join(tn.src, "nuon.yaml"))+"freshness: {validFor: 1h}\n")
	tn.commit("state is fresh for an hour")
	tn.renderMain()
	a := tn.agent("acme", func(c *agent.Config) { c.Now = clk.Now })
	st := a.reconcile(t).Status
	if st.Phase != schemas.InstallReady || st.Stale || st.Expires == nil || !st.Expires.After(base) {
		t.Fatalf("first pass: phase %s stale %v expires %v", st.Phase, st.Stale, st.Expires)
	}
	applied := st.Applied

	clk.Set(base.Add(2 * time.Hour)) // nobody renders: the ref is frozen
	if st := a.reconcile(t).Status; !st.Stale || st.Applied != applied {
		t.Fatalf("two hours later: stale %v applied %s", st.Stale, st.Applied)
	}
	before := len(runs(t, a.records))
	tn.renderMain() // the renderer is back: it re-signs acme's state
	st = a.reconcile(t).Status
	if st.Stale || st.Phase != schemas.InstallReady || st.Applied == applied || !st.Expires.After(clk.Now()) {
		t.Errorf("after the re-sign: stale %v phase %s applied %s expires %v", st.Stale, st.Phase, st.Applied, st.Expires)
	}
	if n := len(runs(t, a.records)) - before; n != 0 {
		t.Errorf("%d plugin calls for a re-signed unchanged state", n)
	}
}

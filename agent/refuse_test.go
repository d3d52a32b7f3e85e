package agent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// TestRefusals puts a bad commit on acme's desired ref, one case at a time,
// and checks that the agent applies nothing, records the refusal in its
// status and converges again once the ref is good.
func TestRefusals(t *testing.T) {
	tn := newTenant(t)
	a := tn.agent("acme")
	first := a.reconcile(t).Status
	gen1 := tn.git("rev-parse", "refs/heads/nuon/installs/acme")
	// A second generation, so a rollback to the first is possible.
	tn.write("installs/acme.yaml", readFile(t, filepath.Join(tn.src, "installs/acme.yaml"))+"versions: {d: 1.1.0}\n")
	tn.commit("acme: d 1.1.0")
	tn.renderMain()
	good := a.reconcile(t).Status
	gen2 := tn.git("rev-parse", "refs/heads/nuon/installs/acme")
	if good.Generation != 2 || first.Generation != 1 {
		t.Fatalf("generations %d then %d", first.Generation, good.Generation)
	}
	tree := tn.git("rev-parse", gen2+"^{tree}")
	msg := tn.git("log", "-1", "--format=%B", gen2)
	untrusted := keyFile(t, filepath.Join(fixtureKeys, "globex"))

	cases := []struct {
		name   string
		commit func() string
		reason string
	}{
		{"unsigned", func() string {
			return tn.git("commit-tree", tree, "-p", gen2, "-m", bumpGeneration(msg, 3))
		}, "commit is not signed"},
		{"untrusted key", func() string {
			return tn.git("-c", "gpg.format=ssh", "-c", "user.signingkey="+untrusted, "commit-tree", "-S", tree, "-p", gen2, "-m", bumpGeneration(msg, 3))
		}, "not trusted"},
		{"tampered tree", func() string {
			// The signed commit, re-pointed at another tree.
			raw := tn.git("cat-file", "commit", gen2)
			other := tn.git("rev-parse", gen1+"^{tree}")
			raw = strings.Replace(raw, "tree "+tree, "tree "+other, 1)
			out, err := gittest.Run(tn.bare, []byte(raw+"\n"), "hash-object", "-t", "commit", "-w", "--stdin")
			if err != nil {
				t.Fatal(err)
			}
			return out
		}, "signature does not match"},
		{"another install's state", func() string {
			return tn.git("rev-parse", "refs/heads/nuon/installs/globex")
		}, `for install "globex"`},
		{"rollback", func() string { return gen1 }, "not newer than the applied generation 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bad := tc.commit()
			tn.git("update-ref", "refs/heads/nuon/installs/acme", bad)
			before := len(runs(t, a.records))
			rep := a.reconcile(t)
			st := rep.Status
			if st.Phase != schemas.InstallRefused || st.Refusal == nil {
				t.Fatalf("phase %s refusal %+v, want Refused", st.Phase, st.Refusal)
			}
			if st.Refusal.Commit != bad || !strings.Contains(st.Refusal.Reason, tc.reason) {
				t.Errorf("refusal %+v, want commit %s and a reason with %q", st.Refusal, bad, tc.reason)
			}
			if n := len(runs(t, a.records)) - before; n != 0 {
				t.Errorf("%d plugin calls on a refused commit", n)
			}
			if st.Desired != gen2 || st.Generation != 2 || st.Components["d"].Version != "1.1.0" {
				t.Errorf("the applied state changed: desired %s generation %d", st.Desired, st.Generation)
			}
			// The tenant sees the refusal.
			status := tn.git("show", "refs/heads/nuon/status/acme:status.json")
			if !strings.Contains(status, `"phase": "Refused"`) || !strings.Contains(status, bad) {
				t.Errorf("server status does not show the refusal:\n%s", status)
			}
			// Refusing the same commit again writes nothing new.
			if again := a.reconcile(t); again.StatusCommit != rep.StatusCommit {
				t.Errorf("a second poll of the same refused commit wrote a new status")
			}
			// Back to the good state: accepted again, no job (nothing changed).
			tn.git("update-ref", "refs/heads/nuon/installs/acme", gen2)
			st = a.reconcile(t).Status
			if st.Phase != schemas.InstallReady || st.Refusal != nil {
				t.Errorf("after restoring the good commit: phase %s refusal %+v", st.Phase, st.Refusal)
			}
			if n := len(runs(t, a.records)) - before; n != 0 {
				t.Errorf("%d plugin calls after restoring the applied commit", n)
			}
		})
	}
}

// bumpGeneration rewrites the generation trailer of a commit message.
func bumpGeneration(msg string, gen int) string {
	var out []string
	for _, line := range strings.Split(msg, "\n") {
		if strings.HasPrefix(line, schemas.TrailerGeneration+": ") {
			line = fmt.Sprintf("%s: %d", schemas.TrailerGeneration, gen)
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// keyFile copies a private key to a file only its owner can read, as
// ssh-keygen requires.
func keyFile(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.WriteFile(dst, []byte(readFile(t, src)), 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nuon.dev/nuon/cmd/internal/cli"
	"nuon.dev/nuon/internal/gittest"
)

// verifyRun runs `nuon verify` in process and decodes its JSON report.
func verifyRun(t *testing.T, rt *renderTenant, trust string) (map[string]any, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	g := &cli.Globals{LogFormat: "text", LogLevel: "info", Stdout: &stdout, Stderr: &stderr}
	cmd := cli.NewVerifyCmd(g)
	cmd.SetArgs([]string{"--repo", rt.location, "--install", "acme", "--trust", trust, "-o", "json", "--cache-dir", rt.cache})
	cmd.SetOut(&stderr)
	cmd.SetErr(&stderr)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.ExecuteContext(context.Background())
	code := 0
	var exit cli.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.Code
	case err != nil:
		t.Fatalf("nuon verify: %v\n%s", err, stderr.String())
	}
	var rep map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("nuon verify -o json: %v\n%s", err, stdout.String())
	}
	return rep, code
}

// TestVerifyRollbackAgainstVerifiedStatus: `nuon verify` runs the agent's
// rollback check against the status the install's own key signed, and
// ignores a forged status that claims nothing was applied.
func TestVerifyRollbackAgainstVerifiedStatus(t *testing.T) {
	rt := localRenderTenant(t)
	rt.mustRun(t, nil)
	gen1 := gittest.Git(t, rt.dir, "rev-parse", "refs/heads/nuon/installs/acme")
	rt.edit(t, "installs/acme.yaml", "domain: acme.shop.example", "domain: acme2.shop.example")
	rt.mustRun(t, nil)
	gen2 := gittest.Git(t, rt.dir, "rev-parse", "refs/heads/nuon/installs/acme")
	trust := allowedSigners(t, "renderer", "render")

	// acme's agent applied generation 2 and said so, signed with its key.
	empty, _ := gittest.Run(rt.dir, nil, "mktree")
	key := filepath.Join(t.TempDir(), "acme")
	copyKey(t, filepath.Join(repoRoot(), "fixtures", "keys", "acme"), key)
	own := gittest.Git(t, rt.dir, "-c", "gpg.format=ssh", "-c", "user.signingkey="+key, "commit-tree", "-S", empty,
		"-m", "nuon: status acme generation 2: Ready\n\nNuon-Install: acme\nNuon-Generation: 2\nNuon-Desired: "+gen2+"\nNuon-Phase: Ready")
	gittest.Git(t, rt.dir, "update-ref", "refs/heads/nuon/status/acme", own)

	if rep, code := verifyRun(t, rt, trust); code != 0 || rep["verified"] != true || rep["appliedGeneration"] != 2.0 {
		t.Fatalf("the applied commit: exit %d, %v", code, rep)
	}
	gittest.Git(t, rt.dir, "update-ref", "refs/heads/nuon/installs/acme", gen1)
	rep, code := verifyRun(t, rt, trust)
	if code != 1 || rep["verified"] != false || !strings.Contains(rep["reason"].(string), "not newer than the applied generation 2") {
		t.Fatalf("a rollback to generation 1: exit %d, %v", code, rep)
	}

	// A forged status on top, claiming generation 0, changes nothing.
	forged := gittest.Git(t, rt.dir, "commit-tree", empty, "-p", own,
		"-m", "nuon: status acme generation 0: Ready\n\nNuon-Install: acme\nNuon-Generation: 0\nNuon-Desired: none\nNuon-Phase: Ready")
	gittest.Git(t, rt.dir, "update-ref", "refs/heads/nuon/status/acme", forged)
	rep, code = verifyRun(t, rt, trust)
	if code != 1 || !strings.Contains(rep["reason"].(string), "not newer than the applied generation 2") || rep["appliedStatus"] != own {
		t.Fatalf("a rollback under a forged status: exit %d, %v", code, rep)
	}
	if f, _ := rep["forgedStatus"].(map[string]any); f == nil || f["commit"] != forged {
		t.Errorf("the report does not name the forged status %s: %v", forged, rep)
	}
}

// copyKey copies a private key to a file only its owner can read, as
// ssh-keygen requires.
func copyKey(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

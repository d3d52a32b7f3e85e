package cli

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/trust"
)

// writeTestKey writes an ed25519 key pair made from name as name and
// name.pub in dir and returns the key's fingerprint.
func writeTestKey(t *testing.T, dir, name string) string {
	t.Helper()
	seed := sha256.Sum256([]byte("nuon trust cli test " + name))
	priv := ed25519.NewKeyFromSeed(seed[:])
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".pub"), ssh.MarshalAuthorizedKey(pub), 0o644); err != nil {
		t.Fatal(err)
	}
	return ssh.FingerprintSHA256(pub)
}

// trustRunner runs nuon trust with args on the checkout repo at now and
// returns what it printed.
func trustRunner(repo string, now time.Time) func(args ...string) (string, error) {
	return func(args ...string) (string, error) {
		var out bytes.Buffer
		g := &Globals{Stdout: &out, Stderr: &out}
		cmd := newTrustCmd(g, func() time.Time { return now })
		cmd.SetArgs(append(args, "--dir", repo))
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		err := cmd.Execute()
		return out.String(), err
	}
}

// TestTrustCommands runs a rotation through the commands: init, two
// signatures, a new operator key and a revocation in version 2, signed by
// one and then both root keys, verified after each step.
func TestTrustCommands(t *testing.T) {
	keys, repo := t.TempDir(), t.TempDir()
	for _, k := range []string{"alice", "bob", "render", "render2", "ops"} {
		writeTestKey(t, keys, k)
	}
	renderFP := writeTestKey(t, keys, "render")
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	run := trustRunner(repo, now)
	k := func(name string) string { return filepath.Join(keys, name) }
	for _, step := range []struct {
		args []string
		want string
		exit bool
	}{
		{args: []string{"init", "--root-key", "alice=" + k("alice.pub"), "--root-key", "bob=" + k("bob.pub"), "--threshold", "2", "--render-key", "render-2026=" + k("render.pub")},
			want: "lets: render-2026 sign rendered state for every install"},
		{args: []string{"verify"}, want: "trust root 1 (trust/root/1.json): too few root signatures: 0 of its own root keys signed, 2 needed", exit: true},
		{args: []string{"sign", "--key", k("alice")}, want: "not yet trusted"},
		{args: []string{"sign", "--key", k("bob")}, want: "ready: version 1 verifies"},
		{args: []string{"verify"}, want: "trusted: version 1"},
		{args: []string{"add-key", "operators", "ops-eu", k("ops.pub"), "--not-after", "2027-06-01T00:00:00Z"},
			want: "lets: ops-eu sign for operators from now until 2027-06-01T00:00:00Z"},
		{args: []string{"revoke", renderFP, "--reason", "leaked"}, want: "every render key is revoked"},
		{args: []string{"add-key", "render", "render-2027", k("render2.pub")}, want: "lets: render-2027 sign for render from now until revoked"},
		{args: []string{"revoke", renderFP, "--reason", "leaked", "--at", "2026-11-26T09:00:00Z"},
			want: "stops: signatures by " + renderFP + " (render) made at or after 2026-11-26T09:00:00Z"},
		{args: []string{"sign", "--key", k("alice")}, want: "too few root signatures: 1 of version 1's root keys signed, 2 needed"},
		{args: []string{"verify"}, want: "trust root 1 -> 2", exit: true},
		{args: []string{"sign", "--key", k("bob")}, want: "ready: version 2 verifies"},
		{args: []string{"verify"}, want: "revoked          " + renderFP},
	} {
		out, err := run(step.args...)
		if step.want == "every render key is revoked" {
			if err == nil || !strings.Contains(err.Error(), step.want) {
				t.Fatalf("nuon trust %s: %v, want it refused", strings.Join(step.args, " "), err)
			}
			continue
		}
		var ee ExitError
		if step.exit != errors.As(err, &ee) || !step.exit && err != nil {
			t.Fatalf("nuon trust %s: %v\n%s", strings.Join(step.args, " "), err, out)
		}
		if !strings.Contains(out, step.want) {
			t.Fatalf("nuon trust %s:\n%s\nwant %q", strings.Join(step.args, " "), out, step.want)
		}
	}
}

// TestProvenanceSourceFlags: --provenance-source needs the trust root
// (which names the builders) and REPO=REF with a valid pattern.
func TestProvenanceSourceFlags(t *testing.T) {
	none := func() *trust.Root { return nil }
	some := func() *trust.Root { return &trust.Root{} }
	if pc, err := provenanceConfig(nil, none); pc != nil || err != nil {
		t.Errorf("no flags: %v, %v; want no policy", pc, err)
	}
	if pc, err := provenanceConfig(nil, some); pc == nil || !pc.RootOnly || len(pc.Sources) != 0 || err != nil {
		t.Errorf("no flags, a root: %+v, %v; want the root's rules only", pc, err)
	}
	for _, tc := range []struct {
		flags []string
		root  func() *trust.Root
		want  string
	}{
		{[]string{"git+https://x/shop=refs/tags/v*"}, none, "give --trust-root"},
		{[]string{"git+https://x/shop"}, some, "want REPO=REF"},
		{[]string{"git+https://x/shop=refs/tags/[v"}, some, "syntax error in pattern"},
	} {
		if _, err := provenanceConfig(tc.flags, tc.root); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.flags, err, tc.want)
		}
	}
	pc, err := provenanceConfig([]string{"git+https://x/shop=refs/tags/v*", "git+https://x/ops=refs/heads/main"}, some)
	if err != nil || len(pc.Sources) != 2 || pc.Sources[1].Ref != "refs/heads/main" {
		t.Errorf("two sources: %+v, %v", pc, err)
	}
}

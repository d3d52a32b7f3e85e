package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/policy"
	"nuon.dev/nuon/trust"
)

// TestTrustMigrate moves every old form into roles of the next version:
// each key it lets is said, a key the root revoked and a key type the
// root does not take are said to stop and left out; after signing, the
// one reader (trust.MainKeys) takes the roles and ignores the files; a
// second run changes nothing.
func TestTrustMigrate(t *testing.T) {
	keys, repo := t.TempDir(), t.TempDir()
	for _, k := range []string{"alice", "render", "ops", "ci", "leaked", "agent-render", "approver"} {
		writeTestKey(t, keys, k)
	}
	leakedFP := writeTestKey(t, keys, "leaked")
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	run := trustRunner(repo, now)
	must := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return out
	}
	k := func(name string) string { return filepath.Join(keys, name) }
	pub := func(name string) string {
		b, err := os.ReadFile(k(name + ".pub"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	write := func(name, data string) {
		t.Helper()
		p := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	if out, err := run("migrate"); err == nil || !strings.Contains(err.Error(), "nothing to migrate") {
		t.Fatalf("migrate with no root and nothing: %v\n%s", err, out)
	}
	must("init", "--root-key", "alice="+k("alice.pub"), "--render-key", "render-2026="+k("render.pub"))
	must("sign", "--key", k("alice"))
	must("revoke", leakedFP, "--reason", "leaked", "--at", "2026-11-20T00:00:00Z")
	must("sign", "--key", k("alice"))

	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaPub, _ := ssh.NewPublicKey(&rsaKey.PublicKey)
	write("trust/requests", "support "+pub("ops")+"\nold-laptop "+strings.TrimSpace(string(ssh.MarshalAuthorizedKey(rsaPub)))+"\n")
	write("trust/builds", "vendor-ci "+pub("ci")+"\nvendor-ci "+pub("leaked")+"\n")
	write("trust/approvals", "apiVersion: nuon.dev/v1\nkind: Approvers\nthreshold: 1\nscope:\n  channels: [stable]\nkeys:\n  - name: release-manager\n    key: "+pub("approver")+"\n    notAfter: \"2036-01-01T00:00:00Z\"\n")
	write("agent-trust", "nuon-render "+pub("agent-render")+"\nnuon-render "+pub("render")+"\n")
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	write("cosign.pub", string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})))

	out := must("migrate", "--agent-trust", filepath.Join(repo, "agent-trust"), "--vendor-key", filepath.Join(repo, "cosign.pub"))
	for _, want := range []string{
		"wrote trust/root/3.json: version 3 (draft)",
		`lets: "support" (` + ssh.FingerprintSHA256(mustPub(t, pub("ops"))) + `) sign for operators from now until revoked, as trust/requests let it (every install)`,
		`stops: operators key "old-laptop"`, "is ssh-rsa, which the root does not take",
		`lets: "release-manager"`, "until 2036-01-01T00:00:00Z, as trust/approvals let it (channels stable)",
		"keeps: approvers threshold 1 and scope of trust/approvals",
		`lets: "vendor-ci"`,
		`stops: build-requesters key "vendor-ci-2" (` + leakedFP + `) from trust/builds: the root revoked it at 2026-11-20T00:00:00Z (leaked)`,
		`lets: "nuon-render" (`, "sign for render",
		`keeps: render key "nuon-render-2"`, `is already the root's "render-2026"`,
		`lets: "vendor-cosign"`, "sign for vendor-artifacts",
		"then: once version 3 is on main, readers ignore trust/requests",
		"not yet trusted",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("migrate output lacks %q:\n%s", want, out)
		}
	}
	if os.Getenv("NUON_SHOW_MIGRATE") != "" {
		t.Log(out)
	}
	must("sign", "--key", k("alice"))
	if out := must("verify"); !strings.Contains(out, "build-requesters 1 of vendor-ci") || !strings.Contains(out, "vendor-artifacts 1 of vendor-cosign") {
		t.Errorf("verify:\n%s", out)
	}

	// The one reader now takes the roles from the root and ignores the files.
	files := trust.Files{}
	for _, name := range []string{"trust/requests", "trust/builds", "trust/approvals", trust.FileName(1), trust.FileName(2), trust.FileName(3)} {
		b, err := os.ReadFile(filepath.Join(repo, name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	for role, want := range map[trust.Role]string{
		trust.RoleOperators:       "support " + pub("ops") + "\n",
		trust.RoleBuildRequesters: "vendor-ci " + pub("ci") + "\n",
	} {
		keys, err := trust.MainKeys(files, role, now)
		if err != nil {
			t.Fatal(err)
		}
		if keys.From != trust.FileName(3) || string(keys.Data) != want {
			t.Errorf("%s: from %s:\n%s\nwant\n%s", role, keys.From, keys.Data, want)
		}
		if len(keys.Warnings) != 1 || !strings.Contains(keys.Warnings[0], "is ignored") {
			t.Errorf("%s: warnings %q", role, keys.Warnings)
		}
	}
	ap, err := trust.MainKeys(files, trust.RoleApprovers, now)
	if err != nil || !strings.Contains(string(ap.Data), "release-manager") || !strings.Contains(string(ap.Data), "stable") {
		t.Errorf("approvers: %v\n%s", err, ap.Data)
	}
	// The approvers' verifier reads the role as it read trust/approvals.
	if as, err := policy.ParseApprovers(ap.From, ap.Data); err != nil || as.Threshold != 1 {
		t.Errorf("approvers from the root do not parse as an approvers file: %v\n%s", err, ap.Data)
	}

	out = must("migrate", "--agent-trust", filepath.Join(repo, "agent-trust"), "--vendor-key", filepath.Join(repo, "cosign.pub"))
	if !strings.Contains(out, "nothing to change") {
		t.Errorf("second migrate:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(repo, trust.FileName(4))); err == nil {
		t.Error("second migrate wrote version 4")
	}
}

func mustPub(t *testing.T, line string) ssh.PublicKey {
	t.Helper()
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

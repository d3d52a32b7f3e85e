package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/signature"
)

// TestLoadApprovers: --approval-trust reads trust/approvals, and a render
// or request key listed there by mistake (or by an attacker's pull
// request) never counts as an approver's.
func TestLoadApprovers(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	keys := filepath.Join(root, "fixtures", "keys")
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(keys, name+".pub"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if as, err := loadApprovers("", nil, nil, nil); as != nil || err != nil {
		t.Fatalf("no file: %v, %v; want none and no error", as, err)
	}
	approvals, err := os.ReadFile(filepath.Join(root, "fixtures", "tenant", "trust", "approvals"))
	if err != nil {
		t.Fatal(err)
	}
	// The render and operator keys smuggled into the list.
	file := filepath.Join(t.TempDir(), "approvals")
	extra := "  - name: renderer\n    key: " + read("render") + "\n  - name: ops\n    key: " + read("operator") + "\n"
	if err := os.WriteFile(file, append(approvals, extra...), 0o644); err != nil {
		t.Fatal(err)
	}
	render, err := signature.ParseAllowedSigners([]byte("render@nuon " + read("render") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	requests, err := signature.ParseAllowedSigners([]byte("ops " + read("operator") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	as, err := loadApprovers(file, render, nil, requests)
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := as.Name(mustKey(t, read("approver"))); !ok || name != "release-manager" {
		t.Errorf("the approver's key: %q, %v; want release-manager", name, ok)
	}
	for _, k := range []string{"render", "operator"} {
		if name, ok := as.Name(mustKey(t, read(k))); ok {
			t.Errorf("the %s key counts as approver %q", k, name)
		}
	}
	// A file that does not parse names itself.
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, []byte("kind: Approvers\nthreshold: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadApprovers(bad, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "--approval-trust") || !strings.Contains(err.Error(), bad) {
		t.Errorf("a bad file: %v; want an error naming --approval-trust and the file", err)
	}
}

func mustKey(t *testing.T, authorized string) ssh.PublicKey {
	t.Helper()
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(authorized))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

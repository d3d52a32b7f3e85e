package trust

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/hiddeco/sshsig"
)

// TestSSHKeygenAgrees checks a root signature with OpenSSH's own
// verifier: the canonical bytes and the armored signature are all
// `ssh-keygen -Y verify -n nuon-trust-root` needs, and another namespace
// fails there too.
func TestSSHKeygenAgrees(t *testing.T) {
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Skip("no ssh-keygen")
	}
	r := signedRoot(t, content(t, 1, 1, "A"), "A")
	dir := t.TempDir()
	allowed := filepath.Join(dir, "allowed_signers")
	sig := filepath.Join(dir, "root.sig")
	if err := os.WriteFile(allowed, []byte("root-a "+authorized(testKey(t, "A"))+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sig, sshsig.Armor(r.Signatures[0].sig), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ns string
		ok bool
	}{{Namespace, true}, {"git", false}} {
		cmd := exec.Command("ssh-keygen", "-Y", "verify", "-f", allowed, "-I", "root-a", "-n", tc.ns, "-s", sig)
		cmd.Stdin = bytes.NewReader(r.Signed())
		out, err := cmd.CombinedOutput()
		if (err == nil) != tc.ok {
			t.Errorf("ssh-keygen -Y verify -n %s: %v\n%s", tc.ns, err, out)
		}
	}
}

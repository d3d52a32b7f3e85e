package exchange

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServiceEnviron: the kubelet's API server variables go, everything
// else stays, a name that only starts alike too.
func TestServiceEnviron(t *testing.T) {
	for _, tt := range []struct {
		kv   string
		want bool
	}{
		{"KUBERNETES_SERVICE_HOST=10.96.0.1", true},
		{"KUBERNETES_SERVICE_PORT=443", true},
		{"KUBERNETES_SERVICE_PORT_HTTPS=443", true},
		{"KUBERNETES_PORT=tcp://10.96.0.1:443", true},
		{"KUBERNETES_PORT_443_TCP_ADDR=10.96.0.1", true},
		{"KUBERNETES_PORTAL=x", false},
		{"NUON_ZONE_DIR=/tmp", false},
		{"HOME=/tmp", false},
		{"KUBECONFIG=/x", false},
	} {
		if got := ServiceEnviron(tt.kv); got != tt.want {
			t.Errorf("ServiceEnviron(%q) = %v, want %v", tt.kv, got, tt.want)
		}
	}
}

// TestExecEnviron runs env(1) as the plugin: it sees the container's
// environment but the API server's address.
func TestExecEnviron(t *testing.T) {
	env := "/usr/bin/env"
	if _, err := os.Stat(env); err != nil {
		t.Skip("no /usr/bin/env")
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
	t.Setenv("KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443")
	t.Setenv("NUON_ZONE_DIR", "/tmp/zones")
	in, out := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(in, Request), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := &Exec{In: in, Out: out, Argv: []string{env}}
	if err := e.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(out, Response))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), "NUON_ZONE_DIR=/tmp/zones") {
		t.Fatalf("the plugin's environment lacks the control variable:\n%s", got)
	}
	if strings.Contains(string(got), "KUBERNETES_") || strings.Contains(string(got), "10.96.0.1") {
		t.Errorf("the plugin sees the API server:\n%s", got)
	}
}

// TestCopySelf copies the running binary, executable by anyone, and
// refuses to write over a file already there.
func TestCopySelf(t *testing.T) {
	dir := t.TempDir()
	if err := CopySelf(dir); err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	want, _ := os.ReadFile(self)
	got, err := os.ReadFile(filepath.Join(dir, ExecutorName))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the copy: %v, %d bytes of %d", err, len(got), len(want))
	}
	if fi, _ := os.Stat(filepath.Join(dir, ExecutorName)); fi.Mode().Perm() != 0o555 {
		t.Errorf("mode %v, want 0555", fi.Mode().Perm())
	}
	if err := CopySelf(dir); err == nil {
		t.Error("a second copy over the first succeeded")
	}
}

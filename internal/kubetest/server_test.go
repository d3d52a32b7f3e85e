package kubetest

import (
	"os/exec"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMain(m *testing.M) { Main(m) }

// TestServer checks that the shared server answers with the built version,
// through its client config and through kubectl with its kubeconfig.
func TestServer(t *testing.T) {
	srv := Shared(t)
	cs := srv.Clientset(t)
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != Version {
		t.Errorf("server version = %s, want %s (the build's ldflags)", v.GitVersion, Version)
	}
	ns := srv.Namespace(t)
	got, err := cs.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != ns {
		t.Errorf("namespace = %s, want %s", got.Name, ns)
	}
	kubectl := Kubectl(t)
	out, err := exec.CommandContext(t.Context(), kubectl, "--kubeconfig", srv.Kubeconfig, "get", "namespace", ns, "-o", "name").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "namespace/"+ns) {
		t.Errorf("kubectl get namespace = %q", out)
	}
}

func TestDNSLabel(t *testing.T) {
	tests := map[string]string{
		"TestApply/re-apply_no-op": "testapply-re-apply-no-op",
		"__":                       "test",
		"A_B":                      "a-b",
	}
	for in, want := range tests {
		if got := dnsLabel(in, 50); got != want {
			t.Errorf("dnsLabel(%q) = %q, want %q", in, got, want)
		}
	}
	if got := dnsLabel(strings.Repeat("x", 80), 50); len(got) != 50 {
		t.Errorf("len(dnsLabel(80 x)) = %d, want 50", len(got))
	}
}

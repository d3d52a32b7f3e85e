package cli

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPodCommand(t *testing.T) {
	local := []string{"/usr/local/bin/nuon", "job", "run", "--artifacts", "", "--kubeconfig", "/home/me/.kube/config", "--plugin-key", "/etc/nuon/trust/cosign.pub",
		"--registry-ca", "/etc/nuon/registry-ca.pem", "--registry", "registry.internal:5000", "--registry-username", "puller", "--log-format", "json"}
	want := []string{"nuon", "job", "run", "--artifacts", "", "--registry", "registry.internal:5000", "--registry-username", "puller", "--log-format", "json", "--pod"}
	if diff := cmp.Diff(want, podCommand(local, false)); diff != "" {
		t.Errorf("podCommand (-want +got):\n%s", diff)
	}
	// With --job-registry-secret, the CA comes from the Secret's mount.
	want = append(want[:len(want)-1], "--registry-ca", podRegistryDir+"/ca.crt", "--pod")
	if diff := cmp.Diff(want, podCommand(local, true)); diff != "" {
		t.Errorf("podCommand with the CA in the Secret (-want +got):\n%s", diff)
	}
}

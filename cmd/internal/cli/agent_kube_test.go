package cli

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPodCommand(t *testing.T) {
	local := []string{"/usr/local/bin/nuon", "job", "run", "--artifacts", "", "--kubeconfig", "/home/me/.kube/config", "--plugin-key", "/etc/nuon/trust/cosign.pub", "--log-format", "json"}
	want := []string{"nuon", "job", "run", "--artifacts", "", "--log-format", "json", "--pod"}
	if diff := cmp.Diff(want, podCommand(local)); diff != "" {
		t.Errorf("podCommand (-want +got):\n%s", diff)
	}
}

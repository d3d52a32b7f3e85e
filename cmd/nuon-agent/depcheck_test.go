package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The agent binary must stay small: none of the plugins' or the builder's
// libraries may be linked into it, nor client-go's full clientset and its
// scheme, which register every API group (the Kubernetes Job runner needs
// two).
func TestAgentLinksNoPlugins(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"helm.sh/helm", "github.com/sigstore/cosign", "github.com/fluxcd/pkg/ssa", "github.com/hashicorp/terraform-exec", "nuon.dev/nuon/reconciler/", "nuon.dev/nuon/builder", "nuon.dev/nuon/renderer", "k8s.io/client-go/kubernetes", "k8s.io/client-go/kubernetes/scheme"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("nuon-agent links %s", dep)
			}
		}
	}
}

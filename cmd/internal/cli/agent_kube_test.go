package cli

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"nuon.dev/nuon/agent/jobs"
)

func TestPodCommand(t *testing.T) {
	local := []string{"/usr/local/bin/nuon", "job", "run", "--artifacts", "", "--kubeconfig", "/home/me/.kube/config", "--plugin-key", "/etc/nuon/trust/cosign.pub",
		"--registry-ca", "/etc/nuon/registry-ca.pem", "--registry", "registry.internal:5000", "--registry-username", "puller", "--log-format", "json"}
	want := []string{"nuon", "job", "run", "--artifacts", "", "--registry", "registry.internal:5000", "--registry-username", "puller", "--log-format", "json", "--pod"}
	if diff := cmp.Diff(want, podCommand(local, false)); diff != "" {
		t.Errorf("podCommand (-want +got):\n%s", diff)
	}
	// A vendor's plugin's pod reads no registry: none of its flags.
	if diff := cmp.Diff([]string{"nuon", "job", "run", "--artifacts", "", "--log-format", "json", "--pod"}, withoutRegistry(podCommand(append(slices.Clone(local), "--ecr"), true))); diff != "" {
		t.Errorf("withoutRegistry (-want +got):\n%s", diff)
	}
	// With --job-registry-secret, the CA comes from the Secret's mount.
	want = append(want[:len(want)-1], "--registry-ca", podRegistryDir+"/ca.crt", "--pod")
	if diff := cmp.Diff(want, podCommand(local, true)); diff != "" {
		t.Errorf("podCommand with the CA in the Secret (-want +got):\n%s", diff)
	}
}

// TestKubeRunnerPullSecret: --job-image-pull-secret, repeated, becomes the
// pods' imagePullSecrets, in order, and nothing else of the runner.
func TestKubeRunnerPullSecret(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var k kubeJobOptions
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	k.flags(fs)
	if err := fs.Parse([]string{"--job-runner=kube", "--job-image=registry.example/nuon:1", "--kubeconfig=" + kubeconfig,
		"--job-image-pull-secret=pull-a", "--job-image-pull-secret=pull-b"}); err != nil {
		t.Fatal(err)
	}
	r := k.runner(&jobs.Local{Command: []string{"nuon", "job", "run"}}, &syncOptions{}, "/var/lib/nuon", slog.New(slog.DiscardHandler))
	if k.err != nil {
		t.Fatal(k.err)
	}
	kr, ok := r.(*jobs.Kube)
	if !ok {
		t.Fatalf("runner %T, want *jobs.Kube", r)
	}
	want := []corev1.LocalObjectReference{{Name: "pull-a"}, {Name: "pull-b"}}
	if !slices.Equal(kr.ImagePullSecrets, want) {
		t.Errorf("ImagePullSecrets = %v, want %v", kr.ImagePullSecrets, want)
	}
	if len(kr.RegistryEnv) != 0 || len(kr.RegistryVolumes) != 0 {
		t.Errorf("a pull secret gave the containers %v %v", kr.RegistryEnv, kr.RegistryVolumes)
	}
}

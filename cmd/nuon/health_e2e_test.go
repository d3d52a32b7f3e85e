package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/testenv"
	"nuon.dev/nuon/schemas"
)

// TestHealthWhenClusterGoesE2E: the cluster a manifests component was
// applied to goes away under a running agent binary (its kube-apiserver and
// etcd stopped: what a destroyed local sandbox leaves). Within one
// --health-interval the status stops saying Ready: the component is
// Failed with the reason, the install Degraded, in a status commit. When
// a new, empty cluster takes its place (the sandbox made again), the
// failed component is re-applied and the install is Ready again, its
// ConfigMap in the new cluster.
func TestHealthWhenClusterGoesE2E(t *testing.T) {
	tf := testenv.TerraformConfig(t)
	assets, err := kubetest.Assets()
	if err != nil {
		testenv.Missing(t, "the kube binaries: %v", err)
	}
	ctx := context.Background()
	startKube := func() *kubetest.Server {
		t.Helper()
		s, err := kubetest.Start(ctx, assets, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Stop() })
		return s
	}
	work := t.TempDir()
	// The agent's kubeconfig: the sandbox's path, whose content a new
	// sandbox replaces.
	kubeconfig := filepath.Join(work, "kubeconfig")
	useKube := func(s *kubetest.Server) {
		t.Helper()
		b, err := os.ReadFile(s.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(kubeconfig, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kube1 := startKube()
	useKube(kube1)

	art := t.TempDir()
	writeFiles(t, art, map[string]string{
		"settings/objects.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  greeting: hello\n",
	})
	layoutDir := filepath.Join(t.TempDir(), "layout")
	lp, err := layout.Write(layoutDir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	img, err := oci.Package(oci.Manifests, filepath.Join(art, "settings"))
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	root := repoRoot()
	srv := gittest.NewServer(t)
	bare := srv.InitBare(t, "tenant.git")
	src := t.TempDir()
	acme, err := os.ReadFile(filepath.Join(root, "fixtures", "tenant", "installs", "acme.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, src, map[string]string{
		"nuon.yaml": `name: health
components:
  - name: settings
    type: manifests
    repository: registry.test/health/settings
    manifests: {namespace: default}
`,
		"channels/stable.yaml":   "components: {settings: 1.0.0}\n",
		"releases/settings.yaml": fmt.Sprintf("component: settings\nversions:\n  - version: 1.0.0\n    artifacts:\n      manifests:\n        digest: %s\n", digest),
		"installs/acme.yaml":     string(acme),
	})
	gittest.CommitDir(t, bare, "main", src, "one ConfigMap")
	url := srv.URL("tenant.git")
	keys := filepath.Join(root, "fixtures", "keys")
	trust := filepath.Join(work, "allowed_signers")
	pub, _ := os.ReadFile(filepath.Join(keys, "render.pub"))
	if err := os.WriteFile(trust, []byte("renderer "+string(pub)), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"TF_CLI_CONFIG_FILE=" + tf, "CHECKPOINT_DISABLE=1", "KUBECONFIG=" + kubeconfig}
	nuon(t, env, 0, "render", "--repo", url, "--key", filepath.Join(keys, "render"))
	const healthEvery = 2 * time.Second
	// A running agent, polling every 500ms, retrying a failed component
	// at most 2s later.
	_, agentLog := startProcess(t, env, nuonBinary(t), "agent", "--repo", url, "--install", "acme", "--trust", trust,
		"--key", filepath.Join(keys, "acme"), "--workdir", filepath.Join(work, "acme"), "--artifacts", layoutDir,
		"--insecure-skip-artifact-verification", "--interval", "500ms", "--max-backoff", "2s",
		"--health-interval", healthEvery.String())
	status := func() schemas.Status {
		var st schemas.Status
		out, err := gittest.Run(bare, nil, "show", schemas.StatusRef("acme")+":"+schemas.StatusFile)
		if err == nil {
			_ = json.Unmarshal([]byte(out), &st)
		}
		return st
	}
	ready := func() bool {
		st := status()
		return st.Phase == schemas.InstallReady && st.Components["settings"].Phase == schemas.PhaseApplied
	}
	configMap := func(s *kubetest.Server) error {
		cs, err := kubernetes.NewForConfig(s.Config())
		if err != nil {
			return err
		}
		_, err = cs.CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{})
		return err
	}
	waitFor(t, "the first apply", 3*time.Minute, agentLog.String, ready)
	if err := configMap(kube1); err != nil {
		t.Fatal(err)
	}
	before := gittest.Git(t, bare, "rev-parse", schemas.StatusRef("acme"))

	// The cluster goes: within one health interval (and the pass that
	// notices, and its push) the status stops saying Ready.
	if err := kube1.Stop(); err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	waitFor(t, "the status to stop saying Ready", time.Minute, agentLog.String, func() bool { return !ready() })
	t.Logf("not Ready %v after the cluster went (health interval %v)", time.Since(gone).Round(time.Millisecond), healthEvery)
	if d := time.Since(gone); d > healthEvery+5*time.Second {
		t.Errorf("the status said Ready %v after the cluster went; health interval %v", d, healthEvery)
	}
	st := status()
	settings := st.Components["settings"]
	if st.Phase != schemas.InstallDegraded || settings.Phase != schemas.PhaseFailed || !strings.Contains(settings.Error, "health check failed") {
		t.Fatalf("after the cluster went: install %s, settings %+v", st.Phase, settings)
	}
	if after := gittest.Git(t, bare, "rev-parse", schemas.StatusRef("acme")); after == before {
		t.Error("no status commit says the install is not Ready")
	}
	if text := nuon(t, env, 0, "status", "--repo", url, "--install", "acme"); strings.Contains(text, "Ready") || !strings.Contains(text, "settings(Failed") {
		t.Errorf("nuon status after the cluster went:\n%s", text)
	}

	// A new, empty cluster in its place: the component is applied again.
	kube2 := startKube()
	useKube(kube2)
	waitFor(t, "the install to be Ready again", 3*time.Minute, agentLog.String, ready)
	if err := configMap(kube2); err != nil {
		t.Errorf("the ConfigMap in the new cluster: %v", err)
	}
}

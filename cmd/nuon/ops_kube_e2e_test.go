package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/testenv"
	"nuon.dev/nuon/schemas"
)

// TestConfigMapDriftE2E: a ConfigMap a manifests component applied is
// edited by hand in a real kube-apiserver; the agent binary's scheduled
// drift check (server-side apply dry-run against the inventory) finds it,
// reports the object, and corrects it by re-applying the applied spec.
func TestConfigMapDriftE2E(t *testing.T) {
	tf := testenv.TerraformConfig(t)
	kube := kubetest.Shared(t)
	ns := kube.Namespace(t)
	root := repoRoot()
	art := t.TempDir()
	writeFiles(t, art, map[string]string{
		"settings/objects.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  greeting: hello\n",
	})
	// The manifests as an OCI image layout, as a registry would hold them.
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
	srv := gittest.NewServer(t)
	bare := srv.InitBare(t, "tenant.git")
	src := t.TempDir()
	acme, err := os.ReadFile(filepath.Join(root, "fixtures", "tenant", "installs", "acme.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, src, map[string]string{
		"nuon.yaml": fmt.Sprintf(`name: drift
components:
  - name: settings
    type: manifests
    repository: registry.test/drift/settings
    manifests: {namespace: %s}
    drift: {mode: correct, schedule: 1s}
`, ns),
		"channels/stable.yaml":   "components: {settings: 1.0.0}\n",
		"releases/settings.yaml": fmt.Sprintf("component: settings\nversions:\n  - version: 1.0.0\n    artifacts:\n      manifests:\n        digest: %s\n", digest),
		"installs/acme.yaml":     string(acme),
	})
	gittest.CommitDir(t, bare, "main", src, "one ConfigMap")
	url := srv.URL("tenant.git")
	keys := filepath.Join(root, "fixtures", "keys")
	work := t.TempDir()
	trust := filepath.Join(work, "allowed_signers")
	pub, _ := os.ReadFile(filepath.Join(keys, "render.pub"))
	if err := os.WriteFile(trust, []byte("renderer "+string(pub)), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"TF_CLI_CONFIG_FILE=" + tf, "CHECKPOINT_DISABLE=1", "KUBECONFIG=" + kube.Kubeconfig}
	nuon(t, env, 0, "render", "--repo", url, "--key", filepath.Join(keys, "render"))
	agent := func() schemas.Status {
		var rep struct {
			Status schemas.Status `json:"status"`
		}
		out := nuon(t, env, 0, "agent", "--once", "--repo", url, "--install", "acme", "--trust", trust,
			"--key", filepath.Join(keys, "acme"), "--workdir", filepath.Join(work, "acme"), "--artifacts", layoutDir, "--insecure-skip-artifact-verification", "-o", "json")
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		return rep.Status
	}
	if st := agent(); st.Components["settings"].Phase != schemas.PhaseApplied {
		t.Fatalf("settings: %+v", st.Components["settings"])
	}
	cms := kube.Clientset(t).CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(t.Context(), "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["greeting"] = "edited by hand"
	if _, err := cms.Update(t.Context(), cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	st := agent()
	cs := st.Components["settings"]
	if len(cs.Drift) != 1 || cs.Drift[0].Kind != "ConfigMap" || cs.Drift[0].Name != "settings" || !cs.Corrected {
		t.Fatalf("settings drift: %+v", cs)
	}
	cm, err = cms.Get(t.Context(), "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["greeting"] != "hello" {
		t.Errorf("the ConfigMap was not corrected: %v", cm.Data)
	}
	// The next check finds nothing: one commit clears the drift, and the
	// one after writes none.
	time.Sleep(1100 * time.Millisecond)
	if st := agent(); len(st.Components["settings"].Drift) != 0 {
		t.Errorf("drift after the correction: %+v", st.Components["settings"])
	}
	before := gittest.Git(t, bare, "rev-parse", schemas.StatusRef("acme"))
	time.Sleep(1100 * time.Millisecond)
	agent()
	if after := gittest.Git(t, bare, "rev-parse", schemas.StatusRef("acme")); after != before {
		t.Errorf("a clean drift check wrote a status commit")
	}
}

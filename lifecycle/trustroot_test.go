package lifecycle

import (
	"context"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/internal/trusttest"
)

// TestKeysKeepTheTrustRoot: create's keys phase copies the trust root's
// version 1 into the install's directory, once it is signed by a
// threshold of its own root keys, and refuses one that is not; the agent
// is then started with --trust-root rather than --trust.
func TestKeysKeepTheTrustRoot(t *testing.T) {
	v1 := trusttest.Version{Version: 1, Expires: time.Now().AddDate(1, 0, 0), RootKeys: []string{"root-1", "root-2"}, Threshold: 2,
		Render: []trusttest.RenderKey{{Name: "render-a"}}}
	for _, tc := range []struct {
		name    string
		signers []string
		want    string
	}{
		{"signed by its threshold", []string{"root-1", "root-2"}, ""},
		{"below its threshold", []string{"root-1"}, "too few root signatures"},
		{"unsigned", nil, "too few root signatures"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := dir + "/1.json"
			data := v1.File(t, tc.signers...)
			if err := os.WriteFile(file, data, 0o644); err != nil {
				t.Fatal(err)
			}
			o := &Options{ID: "acme", Dir: dir + "/acme", TrustRoot: file}
			result, _, err := keys(context.Background(), o, &state{})
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("keys: %v, want an error with %q", err, tc.want)
				}
				if _, err := os.Stat(o.path(TrustRootFile)); err == nil {
					t.Errorf("%s written for a refused root", TrustRootFile)
				}
				return
			}
			if err != nil || result != Done {
				t.Fatalf("keys: %s, %v", result, err)
			}
			if got, _ := os.ReadFile(o.path(TrustRootFile)); string(got) != string(data) {
				t.Errorf("%s holds\n%s\nwant the given file", TrustRootFile, got)
			}
			if _, err := os.Stat(o.path(TrustFile)); err == nil {
				t.Errorf("an allowed_signers trust file was written beside the trust root")
			}
			if result, _, err := keys(context.Background(), o, &state{}); err != nil || result != Unchanged {
				t.Errorf("keys again: %s, %v; want unchanged", result, err)
			}
		})
	}
}

// TestAgentPhaseKubernetesTrustRoot: an install created with the trust
// root and run in Kubernetes agent mode gets the root, not an
// allowed_signers file: trust-root.json in the ConfigMap nuon-agent-trust
// and --trust-root in place of --trust, on a real API server. An install
// bootstrapped before the root moves to it by applying again: the
// allowed_signers key and --trust are gone, and a third apply changes
// nothing.
func TestAgentPhaseKubernetesTrustRoot(t *testing.T) {
	srv := kubetest.Shared(t)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(srv.Config())
	root := trusttest.Version{Version: 1, Expires: time.Now().AddDate(1, 0, 0), RootKeys: []string{"root-1"}, Threshold: 1,
		Render: []trusttest.RenderKey{{Name: "render-a"}}}.File(t, "root-1")
	dir := t.TempDir()
	writeFile(t, dir+"/1.json", string(root))

	check := func(t *testing.T, wantRoot bool) {
		t.Helper()
		cm, err := cs.CoreV1().ConfigMaps(AgentNamespace).Get(ctx, "nuon-agent-trust", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d, err := cs.AppsV1().Deployments(AgentNamespace).Get(ctx, "nuon-agent", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		args := d.Spec.Template.Spec.Containers[0].Args
		_, hasSigners := cm.Data["allowed_signers"]
		if wantRoot {
			if cm.Data[trustRootKey] != string(root) || hasSigners {
				t.Errorf("nuon-agent-trust holds %v; want only %s, the given root", slices.Sorted(maps.Keys(cm.Data)), trustRootKey)
			}
			if !slices.Contains(args, trustRootArg) || slices.Contains(args, trustArg) {
				t.Errorf("agent args %v; want %s and no %s", args, trustRootArg, trustArg)
			}
			return
		}
		if !hasSigners || cm.Data[trustRootKey] != "" || !slices.Contains(args, trustArg) || slices.Contains(args, trustRootArg) {
			t.Errorf("before the root: ConfigMap %v, args %v", slices.Sorted(maps.Keys(cm.Data)), args)
		}
	}

	// Before the root: the deprecated allowed_signers file.
	old := Bootstrap{Install: "initech", Repo: "/srv/tenant.git", Key: []byte("k"),
		Trust: []byte("nuon-render ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOI093FQc+72WNrTUNkTxXuw9DMb7Qmo+M7BQq0kk/Gv\n")}
	if _, err := ApplyAgent(ctx, srv.Config(), old); err != nil {
		t.Fatal(err)
	}
	check(t, false)

	o := Options{ID: "initech", Repo: "/srv/tenant.git", Dir: dir + "/initech", Channel: "stable", AgentMode: AgentKubernetes, KubeAssets: "unused", TrustRoot: dir + "/1.json"}
	if err := o.defaults(true); err != nil {
		t.Fatal(err)
	}
	st := &state{}
	if _, _, err := keys(ctx, &o, st); err != nil {
		t.Fatal(err)
	}
	st.outputs = &Outputs{}
	st.outputs.Cluster.Kubeconfig, st.outputs.Cluster.Endpoint = srv.Kubeconfig, srv.URL
	st.outputs.Registry.URL = "127.0.0.1:5000"
	if res, detail, err := startAgent(ctx, &o, st); err != nil || res != Done {
		t.Fatalf("agent phase: %s %s %v", res, detail, err)
	}
	check(t, true)
	if res, detail, err := startAgent(ctx, &o, st); err != nil || res != Unchanged {
		t.Errorf("agent phase again: %s %s %v", res, detail, err)
	}

	if _, err := BootstrapObjects(Bootstrap{Install: "x", Repo: "r", Key: []byte("k")}); err == nil || !strings.Contains(err.Error(), "needs the trust root") {
		t.Errorf("bootstrap with neither trust form: %v", err)
	}
}

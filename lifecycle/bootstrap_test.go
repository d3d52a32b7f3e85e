package lifecycle

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/ssa"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"nuon.dev/nuon/internal/kubetest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// TestApplyAgent bootstraps the agent on a real API server by server-side
// apply: the Deployment points at the install, its key and registry
// password are in Secrets and only there, the trust file and registry CA
// in ConfigMaps; applying again changes nothing.
func TestApplyAgent(t *testing.T) {
	srv := kubetest.Shared(t)
	ctx := context.Background()
	b := Bootstrap{
		Install: "acme", Repo: "https://git.vendor.example/vendor/tenant.git",
		Key:      []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nkey-material-acme\n-----END OPENSSH PRIVATE KEY-----\n"),
		Trust:    []byte("renderer ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOI093FQc+72WNrTUNkTxXuw9DMb7Qmo+M7BQq0kk/Gv\n"),
		Registry: "111111111111.dkr.ecr.us-east-1.amazonaws.com", RegistryUsername: "AWS",
		RegistryPassword: "registry-password-not-for-configmaps", RegistryCA: []byte("-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n"),
		GitToken: "git-token-not-for-configmaps",
	}
	if _, err := ApplyAgent(ctx, srv.Config(), b); err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(srv.Config())
	d, err := cs.AppsV1().Deployments(AgentNamespace).Get(ctx, "nuon-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			env[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		} else {
			env[e.Name] = e.Value
		}
	}
	for k, want := range map[string]string{"NUON_REPO": b.Repo, "NUON_INSTALL": "acme",
		"NUON_REGISTRY_PASSWORD": "secret:nuon-registry/password", "NUON_GIT_TOKEN": "secret:nuon-git/token"} {
		if env[k] != want {
			t.Errorf("env %s = %q, want %q", k, env[k], want)
		}
	}
	for _, a := range []string{"--registry=" + b.Registry, "--registry-username=AWS", "--registry-ca=/etc/nuon/registry/ca.pem"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("args lack %s: %v", a, c.Args)
		}
	}
	for name, want := range map[string]map[string]string{
		"nuon-agent-key": {"agent.key": string(b.Key)},
		"nuon-registry":  {"password": b.RegistryPassword},
		"nuon-git":       {"token": b.GitToken},
	} {
		s, err := cs.CoreV1().Secrets(AgentNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range want {
			if string(s.Data[k]) != v {
				t.Errorf("secret %s[%s] = %q", name, k, s.Data[k])
			}
		}
	}
	trust, err := cs.CoreV1().ConfigMaps(AgentNamespace).Get(ctx, "nuon-agent-trust", metav1.GetOptions{})
	if err != nil || trust.Data["allowed_signers"] != string(b.Trust) {
		t.Errorf("nuon-agent-trust: %v %v", trust.Data, err)
	}
	cms, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		for k, v := range cm.Data {
			for _, secret := range []string{"key-material-acme", b.RegistryPassword, b.GitToken} {
				if strings.Contains(v, secret) {
					t.Errorf("ConfigMap %s/%s[%s] holds a secret", cm.Namespace, cm.Name, k)
				}
			}
		}
	}

	again, err := ApplyAgent(ctx, srv.Config(), b)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range again.Entries {
		if e.Action != ssa.UnchangedAction {
			t.Errorf("second apply: %s %s", e.Subject, e.Action)
		}
	}
}

// TestAgentPhaseKubernetes runs Create's agent phase with AgentMode
// kubernetes against a real API server standing in for the sandbox's
// cluster: the install's own key and trust file and the sandbox's
// registry reach the cluster; a second run has nothing to do.
func TestAgentPhaseKubernetes(t *testing.T) {
	srv := kubetest.Shared(t)
	ctx := context.Background()
	o := Options{ID: "globex", Repo: "/srv/tenant.git", Dir: t.TempDir(), Channel: "beta", AgentMode: AgentKubernetes, KubeAssets: "unused"}
	o.RenderKey = o.Dir + "/render.pub"
	writeFile(t, o.RenderKey, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOI093FQc+72WNrTUNkTxXuw9DMb7Qmo+M7BQq0kk/Gv render\n")
	if err := o.defaults(true); err != nil {
		t.Fatal(err)
	}
	st := &state{}
	if _, _, err := keys(ctx, &o, st); err != nil {
		t.Fatal(err)
	}
	writeFile(t, o.Dir+"/password", "sandbox-registry-password\n")
	writeFile(t, o.Dir+"/ca.pem", "-----BEGIN CERTIFICATE-----\nsandbox-ca\n-----END CERTIFICATE-----\n")
	st.outputs = &Outputs{}
	st.outputs.Cluster.Kubeconfig, st.outputs.Cluster.Endpoint = srv.Kubeconfig, srv.URL
	st.outputs.Registry.URL, st.outputs.Registry.Username = "127.0.0.1:5000", "nuon"
	st.outputs.Registry.PasswordFile, st.outputs.Registry.CAFile = o.Dir+"/password", o.Dir+"/ca.pem"

	res, detail, err := startAgent(ctx, &o, st)
	if err != nil || res != Done {
		t.Fatalf("agent phase: %s %s %v", res, detail, err)
	}
	cs := kubernetes.NewForConfigOrDie(srv.Config())
	key, _ := os.ReadFile(o.path(KeyFile))
	for name, want := range map[string]string{"nuon-agent-key/agent.key": string(key), "nuon-registry/password": "sandbox-registry-password"} {
		secret, k, _ := strings.Cut(name, "/")
		s, err := cs.CoreV1().Secrets(AgentNamespace).Get(ctx, secret, metav1.GetOptions{})
		if err != nil || string(s.Data[k]) != want {
			t.Errorf("%s = %q (%v)", name, s.Data[k], err)
		}
	}
	d, err := cs.AppsV1().Deployments(AgentNamespace).Get(ctx, "nuon-agent", metav1.GetOptions{})
	if err != nil || !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--registry=127.0.0.1:5000") {
		t.Errorf("deployment args: %v (%v)", d.Spec.Template.Spec.Containers[0].Args, err)
	}
	if res, detail, err := startAgent(ctx, &o, st); err != nil || res != Unchanged {
		t.Errorf("agent phase again: %s %s %v", res, detail, err)
	}
}

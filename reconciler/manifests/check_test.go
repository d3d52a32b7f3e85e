package manifests

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"nuon.dev/nuon/internal/debugcmd"
	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/schemas"
)

// TestDrift takes a component through a drift check with nothing to
// find, a hand edit, a hand delete and a dropped object, and an apply
// that corrects them; no drift check sends a PATCH (other than dry-runs)
// or writes the inventory.
func TestDrift(t *testing.T) {
	srv := kubetest.Shared(t)
	ns := srv.Namespace(t)
	p, counts := testPlugin(t, srv)
	dc := dyn(t, srv.Config())
	stateDir := t.TempDir()
	inputs := map[string]any{"domain": "acme.example", "replicas": 1}
	full := map[string]string{"settings.yaml": settingsV1, "web.yaml": web}

	apply := func(t *testing.T, files map[string]string) *schemas.JobResult {
		t.Helper()
		env, log := testEnv(t, stateDir)
		res, err := p.Apply(t.Context(), newJob("dashboards", ns, writeFiles(t, files), inputs), env)
		if err != nil {
			t.Fatalf("%v\nlog:\n%s", err, log)
		}
		return res
	}
	check := func(t *testing.T, files map[string]string) (*schemas.JobResult, map[string]int) {
		t.Helper()
		inv, _ := os.ReadFile(filepath.Join(stateDir, InventoryFile))
		env, log := testEnv(t, stateDir)
		job := newJob("dashboards", ns, writeFiles(t, files), inputs)
		job.Operation = schemas.OpDrift
		counts.reset()
		res, err := p.Drift(t.Context(), job, env)
		sent := counts.reset()
		if err != nil {
			t.Fatalf("%v\nlog:\n%s", err, log)
		}
		t.Logf("requests: %v\n%s", sent, log)
		for method, n := range sent {
			if method != "GET" && method != "PATCH dry-run" {
				t.Errorf("a drift check sent %d %s requests: %v", n, method, sent)
			}
		}
		if after, _ := os.ReadFile(filepath.Join(stateDir, InventoryFile)); !bytes.Equal(inv, after) {
			t.Errorf("a drift check changed the inventory")
		}
		if m, _ := filepath.Glob(filepath.Join(stateDir, "check-*")); len(m) > 0 {
			t.Errorf("a drift check left %v", m)
		}
		return res, sent
	}

	res := apply(t, full)
	if res.Health == nil || res.Health.Status != schemas.HealthProgressing {
		t.Errorf("health after apply = %+v, want Progressing (no controller makes the Deployment available)", res.Health)
	}

	t.Run("nothing changed", func(t *testing.T) {
		res, sent := check(t, full)
		if len(res.Drift) != 0 {
			t.Errorf("drift = %+v, want none", res.Drift)
		}
		if sent["PATCH dry-run"] != 0 {
			t.Errorf("no object moved since the apply, yet %d dry-runs were sent", sent["PATCH dry-run"])
		}
		if res.Changed {
			t.Error("a drift check reports Changed")
		}
	})

	t.Run("hand edit, hand delete, dropped object", func(t *testing.T) {
		cm := get(t, dc, configMaps, ns, "settings")
		_ = unstructured.SetNestedField(cm.Object, "pink", "data", "theme")
		if _, err := dc.Resource(configMaps).Namespace(ns).Update(t.Context(), cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
			t.Fatal(err)
		}
		if err := dc.Resource(configMaps).Namespace(ns).Delete(t.Context(), "extra", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// The desired state no longer has the Deployment: the apply would
		// prune it.
		res, sent := check(t, map[string]string{"settings.yaml": settingsV1})
		want := []schemas.ResourceDrift{
			{Kind: "ConfigMap", Namespace: ns, Name: "extra", Action: schemas.DriftMissing},
			{Kind: "ConfigMap", Namespace: ns, Name: "settings", Action: schemas.DriftChanged, Fields: []string{"data.theme"}},
			{Kind: "Deployment", Namespace: ns, Name: "web", Action: schemas.DriftExtra},
		}
		if diff := cmp.Diff(want, res.Drift); diff != "" {
			t.Errorf("drift (-want +got):\n%s", diff)
		}
		if sent["PATCH dry-run"] != 1 {
			t.Errorf("dry-runs = %d, want 1 (the edited ConfigMap)", sent["PATCH dry-run"])
		}
	})

	t.Run("apply corrects", func(t *testing.T) {
		apply(t, full)
		cm := get(t, dc, configMaps, ns, "settings")
		if v, _, _ := unstructured.NestedString(cm.Object, "data", "theme"); v != "dark" {
			t.Errorf("theme = %q after the apply, want dark", v)
		}
		if get(t, dc, configMaps, ns, "extra") == nil {
			t.Error("the deleted ConfigMap was not recreated")
		}
		res, _ := check(t, full)
		if len(res.Drift) != 0 {
			t.Errorf("drift after the correcting apply = %+v, want none", res.Drift)
		}
	})
}

// TestHealth checks a health job: Progressing until the Deployment
// reports Available (written by hand: there is no controller), then Ready.
func TestHealth(t *testing.T) {
	srv := kubetest.Shared(t)
	ns := srv.Namespace(t)
	p, counts := testPlugin(t, srv)
	dc := dyn(t, srv.Config())
	stateDir := t.TempDir()
	job := newJob("api", ns, writeFiles(t, map[string]string{"web.yaml": web, "settings.yaml": settingsV1}), map[string]any{"domain": "d.example", "replicas": 1})

	health := func(t *testing.T) *schemas.Health {
		t.Helper()
		env, log := testEnv(t, stateDir)
		j := *job
		j.Operation = schemas.OpHealth
		counts.reset()
		h, err := p.Health(t.Context(), &j, env)
		sent := counts.reset()
		if err != nil {
			t.Fatalf("%v\n%s", err, log)
		}
		// Discovery (for the REST mapper) and one LIST per kind: the
		// objects are never read one by one.
		if len(sent) != 1 || sent["GET"] > 4 {
			t.Errorf("a health check sent %v, want at most 4 GETs (2 discovery, 2 LISTs)", sent)
		}
		return h
	}
	env, log := testEnv(t, stateDir)
	if _, err := p.Apply(t.Context(), job, env); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	h := health(t)
	if h.Status != schemas.HealthProgressing || len(h.Resources) != 1 || h.Resources[0].Name != "web" {
		t.Errorf("health = %+v, want Progressing with the Deployment", h)
	}
	if !strings.HasPrefix(h.Message, "2 of 3 resources ready") {
		t.Errorf("message = %q", h.Message)
	}

	dep := get(t, dc, deployments, ns, "web")
	_ = unstructured.SetNestedField(dep.Object, map[string]any{
		"observedGeneration": dep.GetGeneration(),
		"replicas":           int64(1), "updatedReplicas": int64(1), "readyReplicas": int64(1), "availableReplicas": int64(1),
		"conditions": []any{
			map[string]any{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
			map[string]any{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
		},
	}, "status")
	if _, err := dc.Resource(deployments).Namespace(ns).UpdateStatus(t.Context(), dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := &schemas.Health{Status: schemas.HealthReady, Message: "3 of 3 resources ready"}
	if diff := cmp.Diff(want, health(t)); diff != "" {
		t.Errorf("health (-want +got):\n%s", diff)
	}
}

// TestDebug runs the Kubernetes debug commands against the real API
// server: Secrets show keys only, and nothing outside the install's
// namespaces can be read.
func TestDebug(t *testing.T) {
	srv := kubetest.Shared(t)
	ns, other := srv.Namespace(t), srv.Namespace(t)
	p, counts := testPlugin(t, srv)
	cs, err := kubernetes.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	const secret = "s3cr3t-password-value"
	if _, err := cs.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Annotations: map[string]string{
			"kubectl.kubernetes.io/last-applied-configuration": `{"stringData":{"password":"` + secret + `"}}`,
		}},
		StringData: map[string]string{"password": secret, "user": "app"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(other).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "other-settings"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Events(ns).Create(t.Context(), &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "web-0.1"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web-0"},
		Reason:         "FailedScheduling", Message: "0/0 nodes are available", Type: "Warning",
		FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 3,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		words   string
		want    []string
		refused string
		wantErr string
	}{
		{words: "get secret db", want: []string{"password: (hidden, 28 bytes base64)", "user: (hidden, 4 bytes base64)", "last-applied-configuration: (hidden)"}},
		{words: "describe secrets db", want: []string{"Kind:", "Secret", "Keys:", "password, user"}},
		{words: "get pods", want: []string{"NAME", "web-0", "Progressing"}},
		{words: "get po web-0", want: []string{"name: web-0", "image: registry.example/web:1"}},
		{words: "describe pod web-0", want: []string{"Name:", "web-0", "Containers:", "registry.example/web:1", "Events:", "FailedScheduling", "0/0 nodes are available"}},
		{words: "events", want: []string{"Warning", "FailedScheduling", "Pod/web-0", "3"}},
		{words: "get configmaps -n " + other, want: []string{"other-settings"}},
		{words: "get configmap nothing", want: []string{`ConfigMap "nothing" not found in namespace ` + ns}},
		{words: "get nodes", refused: "Node is cluster-scoped"},
		{words: "get namespaces", refused: "Namespace is cluster-scoped"},
		{words: "get widgets", refused: `the cluster has no kind "widgets"`},
		{words: "get pods -n kube-system", refused: `namespace "kube-system" is not one of the install's namespaces`},
		{words: "events -n default", refused: `namespace "default" is not one of the install's namespaces`},
		// No kubelet here: the pod never runs, and the API server answers
		// its log with nothing. A pod that does not exist is an error.
		{words: "logs web-0 --tail 10 --since 1h -c web", want: []string{"(no log lines: pod web-0 has not run"}},
		{words: "logs web-9", wantErr: `logs of pod web-9 in ` + ns + `: pods "web-9" not found`},
	}
	for _, tt := range tests {
		t.Run(tt.words, func(t *testing.T) {
			job := newJob("dashboards", ns, t.TempDir(), nil)
			job.Operation = schemas.OpDebug
			job.Debug = &schemas.DebugRequest{Command: strings.Fields(tt.words), Namespaces: []string{ns, other}}
			cmd, err := debugcmd.Parse(schemas.TypeManifests, job.Debug.Command)
			if err != nil {
				t.Fatal(err)
			}
			env, _ := testEnv(t, t.TempDir())
			out := debugcmd.NewLimit(1 << 20)
			counts.reset()
			err = p.Debug(t.Context(), job, env, cmd, out)
			sent := counts.reset()
			for method := range sent {
				if method != "GET" {
					t.Errorf("a debug command sent %s requests: %v", method, sent)
				}
			}
			answer := out.Answer(cmd, nil).Output
			switch {
			case tt.refused != "":
				var r *debugcmd.Refusal
				if !errors.As(err, &r) || !strings.Contains(r.Reason, tt.refused) {
					t.Fatalf("error = %v, want a refusal with %q", err, tt.refused)
				}
				return
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q; answer %q", err, tt.wantErr, answer)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(answer, w) {
					t.Errorf("answer lacks %q:\n%s", w, answer)
				}
			}
			if strings.Contains(answer, secret) || strings.Contains(answer, "czNjcjN0") {
				t.Errorf("answer holds the Secret's value:\n%s", answer)
			}
		})
	}
}

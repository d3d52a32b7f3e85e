package manifests

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/schemas"
)

const settingsV1 = `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  domain: ${inputs.domain}
  theme: dark
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: extra
data:
  a: "1"
`

const web = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: ${inputs.replicas}
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: registry.example/web:1
          env:
            - name: DOMAIN
              value: https://${inputs.domain}/
`

// TestLifecycle takes one component through create, a no-op re-apply, a
// status write, an update, a prune, drift and delete, against the real API
// server.
func TestLifecycle(t *testing.T) {
	srv := kubetest.Shared(t)
	ns := srv.Namespace(t)
	p, counts := testPlugin(t, srv)
	dc := dyn(t, srv.Config())
	stateDir := t.TempDir()
	inputs := map[string]any{"domain": "acme.example", "replicas": 2}

	steps := []struct {
		name        string
		files       map[string]string
		before      func(t *testing.T)
		destroy     bool
		wantChanged bool
		wantLog     []string
		check       func(t *testing.T, res *schemas.JobResult, sent map[string]int)
	}{
		{
			name:        "create",
			files:       map[string]string{"settings.yaml": settingsV1, "web.yaml": web},
			wantChanged: true,
			wantLog:     []string{"3 created, 0 configured, 0 unchanged, 0 deleted, 0 drifted"},
			check: func(t *testing.T, res *schemas.JobResult, sent map[string]int) {
				want := []any{"ConfigMap/" + ns + "/extra", "ConfigMap/" + ns + "/settings", "Deployment/" + ns + "/web"}
				if diff := cmp.Diff(want, res.Outputs["inventory"]); diff != "" {
					t.Errorf("inventory output (-want +got):\n%s", diff)
				}
				cm := get(t, dc, configMaps, ns, "settings")
				if got := cm.GetLabels()[LabelComponent]; got != "dashboards" {
					t.Errorf("label %s = %q", LabelComponent, got)
				}
				if d, _, _ := unstructured.NestedString(cm.Object, "data", "domain"); d != "acme.example" {
					t.Errorf("settings.data.domain = %q, want the input", d)
				}
				dep := get(t, dc, deployments, ns, "web")
				if r, _, _ := unstructured.NestedInt64(dep.Object, "spec", "replicas"); r != 2 {
					t.Errorf("web replicas = %d, want 2 (a typed input)", r)
				}
				if sent["PATCH dry-run"] != 0 {
					t.Errorf("a create sent %d dry-runs, want none", sent["PATCH dry-run"])
				}
				for _, f := range dep.GetManagedFields() {
					if f.Operation == metav1.ManagedFieldsOperationApply && f.Manager != FieldManager {
						t.Errorf("apply field manager %q, want %q", f.Manager, FieldManager)
					}
				}
			},
		},
		{
			name:    "re-apply no-op",
			files:   map[string]string{"settings.yaml": settingsV1, "web.yaml": web},
			wantLog: []string{"0 created, 0 configured, 3 unchanged"},
			check: func(t *testing.T, res *schemas.JobResult, sent map[string]int) {
				for method, n := range sent {
					if method != http.MethodGet {
						t.Errorf("a no-op re-apply sent %d %s requests, want only LISTs: %v", n, method, sent)
					}
				}
			},
		},
		{
			name:  "status write is not drift",
			files: map[string]string{"settings.yaml": settingsV1, "web.yaml": web},
			before: func(t *testing.T) {
				dep := get(t, dc, deployments, ns, "web")
				_ = unstructured.SetNestedField(dep.Object, int64(2), "status", "replicas")
				if _, err := dc.Resource(deployments).Namespace(ns).UpdateStatus(t.Context(), dep, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			wantLog: []string{"0 created, 0 configured, 3 unchanged, 0 deleted, 0 drifted"},
			check: func(t *testing.T, res *schemas.JobResult, sent map[string]int) {
				if sent["PATCH dry-run"] != 1 || sent["PATCH"] != 0 {
					t.Errorf("after a status write: %v, want one dry-run and no PATCH", sent)
				}
				if _, ok := res.Outputs["drift"]; ok {
					t.Errorf("drift reported for a status write: %v", res.Outputs["drift"])
				}
			},
		},
		{
			name:        "update",
			files:       map[string]string{"settings.yaml": strings.Replace(settingsV1, "theme: dark", "theme: blue", 1), "web.yaml": web},
			wantChanged: true,
			wantLog:     []string{"ConfigMap/" + ns + "/settings configured", "0 created, 1 configured, 2 unchanged"},
			check: func(t *testing.T, _ *schemas.JobResult, _ map[string]int) {
				cm := get(t, dc, configMaps, ns, "settings")
				if v, _, _ := unstructured.NestedString(cm.Object, "data", "theme"); v != "blue" {
					t.Errorf("theme = %q, want blue", v)
				}
			},
		},
		{
			name:        "prune",
			files:       map[string]string{"settings.yaml": strings.Replace(settingsV1[:strings.Index(settingsV1, "---")], "theme: dark", "theme: blue", 1), "web.yaml": web},
			wantChanged: true,
			wantLog:     []string{"ConfigMap/" + ns + "/extra deleted", "0 created, 0 configured, 2 unchanged, 1 deleted"},
			check: func(t *testing.T, res *schemas.JobResult, _ map[string]int) {
				if get(t, dc, configMaps, ns, "extra") != nil {
					t.Error("ConfigMap extra still exists after the version that dropped it")
				}
				if n := len(res.Outputs["inventory"].([]any)); n != 2 {
					t.Errorf("inventory has %d objects, want 2", n)
				}
			},
		},
		{
			name:  "drift",
			files: map[string]string{"settings.yaml": strings.Replace(settingsV1[:strings.Index(settingsV1, "---")], "theme: dark", "theme: blue", 1), "web.yaml": web},
			before: func(t *testing.T) {
				cm := get(t, dc, configMaps, ns, "settings")
				_ = unstructured.SetNestedField(cm.Object, "pink", "data", "theme")
				if _, err := dc.Resource(configMaps).Namespace(ns).Update(t.Context(), cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
					t.Fatal(err)
				}
			},
			wantChanged: true,
			wantLog:     []string{"ConfigMap/" + ns + "/settings drifted: data.theme", "1 drifted"},
			check: func(t *testing.T, res *schemas.JobResult, _ map[string]int) {
				want := []any{map[string]any{"object": "ConfigMap/" + ns + "/settings", "fields": []any{"data.theme"}}}
				if diff := cmp.Diff(want, res.Outputs["drift"]); diff != "" {
					t.Errorf("drift output (-want +got):\n%s", diff)
				}
				cm := get(t, dc, configMaps, ns, "settings")
				if v, _, _ := unstructured.NestedString(cm.Object, "data", "theme"); v != "blue" {
					t.Errorf("theme = %q after the apply, want blue set back", v)
				}
			},
		},
		{
			name:    "delete",
			destroy: true,
			wantLog: []string{"2 deleted"},
			check: func(t *testing.T, _ *schemas.JobResult, _ map[string]int) {
				if get(t, dc, configMaps, ns, "settings") != nil || get(t, dc, deployments, ns, "web") != nil {
					t.Error("objects left after Destroy")
				}
				if _, err := os.Stat(filepath.Join(stateDir, InventoryFile)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("inventory after Destroy: %v, want none", err)
				}
			},
		},
		{
			name:    "delete again",
			destroy: true,
			check: func(t *testing.T, _ *schemas.JobResult, sent map[string]int) {
				if len(sent) != 0 {
					t.Errorf("a second Destroy sent %v, want nothing", sent)
				}
			},
		},
	}
	for _, s := range steps {
		ok := t.Run(s.name, func(t *testing.T) {
			if s.before != nil {
				s.before(t)
			}
			env, log := testEnv(t, stateDir)
			job := newJob("dashboards", ns, writeFiles(t, s.files), inputs)
			counts.reset()
			var res *schemas.JobResult
			var err error
			if s.destroy {
				job.Operation = schemas.OpDelete
				err = p.Destroy(t.Context(), job, env)
			} else {
				res, err = p.Apply(t.Context(), job, env)
			}
			sent := counts.reset()
			if err != nil {
				t.Fatalf("%v\nlog:\n%s", err, log)
			}
			if res != nil && res.Changed != s.wantChanged {
				t.Errorf("Changed = %v, want %v\nlog:\n%s", res.Changed, s.wantChanged, log)
			}
			for _, w := range s.wantLog {
				if !strings.Contains(log.String(), w) {
					t.Errorf("log lacks %q:\n%s", w, log)
				}
			}
			t.Logf("requests: %v", sent)
			s.check(t, res, sent)
		})
		if !ok {
			t.FailNow()
		}
	}
}

// TestWaitTimeout checks that a health wait that times out names the
// object that is not ready and why, and that the objects are still
// recorded; once the Deployment reports Available, the wait passes.
func TestWaitTimeout(t *testing.T) {
	srv := kubetest.Shared(t)
	ns := srv.Namespace(t)
	p, _ := testPlugin(t, srv)
	dc := dyn(t, srv.Config())
	stateDir := t.TempDir()
	dir := writeFiles(t, map[string]string{"web.yaml": web})
	job := newJob("api", ns, dir, map[string]any{"domain": "d.example", "replicas": 1})
	job.Manifests.Wait = true
	job.Manifests.Timeout = "2s"

	env, log := testEnv(t, stateDir)
	began := time.Now()
	_, err := p.Apply(t.Context(), job, env)
	if !errors.Is(err, ErrNotReady) {
		t.Fatalf("Apply = %v, want ErrNotReady\nlog:\n%s", err, log)
	}
	want := "manifests wait api: not ready after 2s: 1 of 1 objects: Deployment/" + ns + "/web is InProgress ("
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error = %q, want it to start %q", err, want)
	}
	if took := time.Since(began); took > 15*time.Second {
		t.Errorf("Apply took %v with a 2s wait", took)
	}
	if inv, ok, _ := readInventory(stateDir); !ok || len(inv.Objects) != 1 {
		t.Errorf("inventory after a failed wait: %v, want the Deployment recorded", inv)
	}

	// Without a kubelet the Deployment never becomes Available: write its
	// status as the controller would.
	dep := get(t, dc, deployments, ns, "web")
	status := map[string]any{
		"observedGeneration": dep.GetGeneration(),
		"replicas":           int64(1), "updatedReplicas": int64(1), "readyReplicas": int64(1), "availableReplicas": int64(1),
		"conditions": []any{
			map[string]any{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
			map[string]any{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
		},
	}
	_ = unstructured.SetNestedField(dep.Object, status, "status")
	if _, err := dc.Resource(deployments).Namespace(ns).UpdateStatus(t.Context(), dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	env, log = testEnv(t, stateDir)
	if _, err := p.Apply(t.Context(), job, env); err != nil {
		t.Fatalf("Apply after the Deployment became Available: %v\nlog:\n%s", err, log)
	}
	if !strings.Contains(log.String(), "1 objects ready") {
		t.Errorf("log lacks the wait:\n%s", log)
	}
}

// TestImmutable checks that a change to an immutable field fails clearly,
// and that with manifests.recreate the object is recreated.
func TestImmutable(t *testing.T) {
	srv := kubetest.Shared(t)
	ns := srv.Namespace(t)
	p, _ := testPlugin(t, srv)
	dc := dyn(t, srv.Config())
	stateDir := t.TempDir()
	inputs := map[string]any{"domain": "d.example", "replicas": 1}
	env, log := testEnv(t, stateDir)
	if _, err := p.Apply(t.Context(), newJob("api", ns, writeFiles(t, map[string]string{"web.yaml": web}), inputs), env); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	uid := get(t, dc, deployments, ns, "web").GetUID()

	changed := strings.ReplaceAll(web, "app: web", "app: web2")
	job := newJob("api", ns, writeFiles(t, map[string]string{"web.yaml": changed}), inputs)
	env, log = testEnv(t, stateDir)
	_, err := p.Apply(t.Context(), job, env)
	if !errors.Is(err, ErrImmutable) {
		t.Fatalf("Apply = %v, want ErrImmutable\nlog:\n%s", err, log)
	}
	for _, want := range []string{"manifests apply api: immutable field changed: Deployment/" + ns + "/web (web.yaml): ", "field is immutable", "set manifests.recreate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if got := get(t, dc, deployments, ns, "web").GetUID(); got != uid {
		t.Errorf("the Deployment was replaced without manifests.recreate")
	}

	job.Manifests.Recreate = true
	env, log = testEnv(t, stateDir)
	if _, err := p.Apply(t.Context(), job, env); err != nil {
		t.Fatalf("Apply with recreate: %v\nlog:\n%s", err, log)
	}
	dep := get(t, dc, deployments, ns, "web")
	if dep.GetUID() == uid {
		t.Errorf("the Deployment was not recreated")
	}
	if sel, _, _ := unstructured.NestedString(dep.Object, "spec", "selector", "matchLabels", "app"); sel != "web2" {
		t.Errorf("selector app = %q, want web2", sel)
	}
}

// TestStaged applies a CRD with a custom resource, and a namespace with an
// object in it, in one job: definitions go first.
func TestStaged(t *testing.T) {
	srv := kubetest.Shared(t)
	p, _ := testPlugin(t, srv)
	dc := dyn(t, srv.Config())
	nsName := "staged-" + strings.ToLower(strings.ReplaceAll(time.Now().Format("150405.000"), ".", ""))
	files := map[string]string{
		"a-widget.yaml": `apiVersion: example.nuon.dev/v1
kind: Widget
metadata:
  name: w1
  namespace: ` + nsName + `
spec:
  size: ${inputs.size}
`,
		"b-crd.yaml": `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.nuon.dev
spec:
  group: example.nuon.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer}
`,
		"c-namespace.yaml": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + nsName + "\n",
	}
	stateDir := t.TempDir()
	env, log := testEnv(t, stateDir)
	job := newJob("widgets", "", writeFiles(t, files), map[string]any{"size": 3})
	res, err := p.Apply(t.Context(), job, env)
	if err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log)
	}
	want := []any{"CustomResourceDefinition/widgets.example.nuon.dev", "Namespace/" + nsName, "Widget.example.nuon.dev/" + nsName + "/w1"}
	if diff := cmp.Diff(want, res.Outputs["inventory"]); diff != "" {
		t.Errorf("inventory (-want +got):\n%s", diff)
	}
	w, err := dc.Resource(schemaGVR("example.nuon.dev", "v1", "widgets")).Namespace(nsName).Get(t.Context(), "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if size, _, _ := unstructured.NestedInt64(w.Object, "spec", "size"); size != 3 {
		t.Errorf("widget size = %d, want 3", size)
	}
	env, log = testEnv(t, stateDir)
	if err := p.Destroy(t.Context(), job, env); err != nil {
		t.Fatalf("Destroy: %v\nlog:\n%s", err, log)
	}
	if !strings.Contains(log.String(), "3 deleted") {
		t.Errorf("Destroy log:\n%s", log)
	}
}

// TestApplyErrors checks errors found before anything is applied.
func TestApplyErrors(t *testing.T) {
	srv := kubetest.Shared(t)
	p, counts := testPlugin(t, srv)
	tests := []struct {
		name    string
		files   map[string]string
		wantErr error
		want    string
	}{
		{
			name:    "unknown input",
			files:   map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {x: '${inputs.nope}'}\n"},
			wantErr: ErrInvalid,
			want:    "manifests load dashboards: cm.yaml: ConfigMap/a: data.x: invalid manifests: unknown input nope (inputs: domain)",
		},
		{
			name:    "unknown kind",
			files:   map[string]string{"x.yaml": "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: a}\n"},
			wantErr: ErrInvalid,
			want:    "manifests load dashboards: x.yaml: Gadget/a: invalid manifests: the cluster has no kind Gadget in example.com/v1, and no CustomResourceDefinition among the manifests defines it",
		},
		{
			name:    "duplicate",
			files:   map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n", "b.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"},
			wantErr: ErrInvalid,
			want:    "manifests load dashboards: invalid manifests: ConfigMap/NS/a is declared twice: in a.yaml and in b.yaml",
		},
		{
			name:    "no name",
			files:   map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\ndata: {}\n"},
			wantErr: ErrInvalid,
			want:    "manifests load dashboards: invalid manifests: a.yaml: document 1 (ConfigMap): no metadata.name",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := "errors-ns"
			env, _ := testEnv(t, t.TempDir())
			counts.reset()
			_, err := p.Apply(t.Context(), newJob("dashboards", ns, writeFiles(t, tt.files), map[string]any{"domain": "x"}), env)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Apply = %v, want %v", err, tt.wantErr)
			}
			if want := strings.ReplaceAll(tt.want, "NS", ns); err.Error() != want {
				t.Errorf("error:\n got %s\nwant %s", err, want)
			}
			for m := range counts.reset() {
				if m != http.MethodGet {
					t.Errorf("a %s request was sent before the error", m)
				}
			}
		})
	}
}

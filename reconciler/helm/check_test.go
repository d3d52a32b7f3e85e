package helm

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nuon.dev/nuon/internal/debugcmd"
	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// methods counts the requests a plugin sends, by method, dry-runs apart.
type methods struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *methods) wrap(rt http.RoundTripper) http.RoundTripper {
	return rtFunc(func(req *http.Request) (*http.Response, error) {
		key := req.Method
		if req.URL.Query().Get("dryRun") != "" {
			key += " dry-run"
		}
		m.mu.Lock()
		m.n[key]++
		m.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

func (m *methods) reset() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	got := m.n
	m.n = map[string]int{}
	return got
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func countingPlugin(srv *kubetest.Server) (*Plugin, *methods) {
	p := testPlugin(srv)
	m := &methods{n: map[string]int{}}
	p.Config = srv.Config()
	p.Config.Wrap(m.wrap)
	return p, m
}

func helmEnv(t *testing.T, stateDir string) (reconciler.Env, *syncBuilder) {
	log := &syncBuilder{}
	return reconciler.Env{StateDir: stateDir, Artifacts: dirSource{}, Log: log}, log
}

// TestDrift installs the chart, checks that a drift check finds nothing
// and writes nothing, edits and deletes objects by hand, checks the
// drift, and that an apply with the same chart and values sets it back.
func TestDrift(t *testing.T) {
	srv := kubetest.Shared(t)
	ns := srv.Namespace(t)
	cs := srv.Clientset(t)
	p, counts := countingPlugin(srv)
	stateDir := t.TempDir()
	inputs := apiInputs("acme.shop.example", 1)

	apply := func(t *testing.T) *schemas.JobResult {
		t.Helper()
		env, log := helmEnv(t, stateDir)
		res, err := p.Apply(t.Context(), newJob(ns, inputs), env)
		if err != nil {
			t.Fatalf("%v\n%s", err, log)
		}
		return res
	}
	drift := func(t *testing.T, in map[string]any) []schemas.ResourceDrift {
		t.Helper()
		env, log := helmEnv(t, stateDir)
		job := newJob(ns, in)
		job.Operation = schemas.OpDrift
		counts.reset()
		res, err := p.Drift(t.Context(), job, env)
		sent := counts.reset()
		if err != nil {
			t.Fatalf("%v\n%s", err, log)
		}
		for method, n := range sent {
			if method != "GET" && method != "PATCH dry-run" {
				t.Errorf("a drift check sent %d %s requests: %v", n, method, sent)
			}
		}
		if strings.Contains(log.String(), dbPassword) {
			t.Errorf("the log holds the secret:\n%s", log)
		}
		if res.Health == nil {
			t.Error("a drift check reports no health")
		}
		return res.Drift
	}

	res := apply(t)
	if res.Health == nil || res.Health.Status != schemas.HealthProgressing {
		t.Errorf("health after install = %+v, want Progressing (no controller)", res.Health)
	}
	if d := drift(t, inputs); len(d) != 0 {
		t.Errorf("drift right after the install = %+v, want none", d)
	}

	cm, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "api-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["DOMAIN"] = "evil.example"
	if _, err := cs.CoreV1().ConfigMaps(ns).Update(t.Context(), cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Secrets(ns).Delete(t.Context(), "api-database", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []schemas.ResourceDrift{
		{Kind: "ConfigMap", Namespace: ns, Name: "api-config", Action: schemas.DriftChanged, Fields: []string{"data.DOMAIN"}},
		{Kind: "Secret", Namespace: ns, Name: "api-database", Action: schemas.DriftMissing},
	}
	if diff := cmp.Diff(want, drift(t, inputs)); diff != "" {
		t.Errorf("drift after hand edits (-want +got):\n%s", diff)
	}
	changed := drift(t, apiInputs("other.example", 1))
	if i := slices.IndexFunc(changed, func(d schemas.ResourceDrift) bool { return d.Kind == KindRelease }); i < 0 || changed[i].Action != schemas.DriftChanged {
		t.Errorf("drift with other values = %+v, want the release changed", changed)
	}

	res = apply(t)
	if !res.Changed || res.Outputs["revision"] != int64(2) {
		t.Errorf("the correcting apply: changed %v, outputs %v; want revision 2", res.Changed, res.Outputs)
	}
	if got := configData(t, cs, ns, "DOMAIN"); got != "acme.shop.example" {
		t.Errorf("DOMAIN = %q after the correcting apply", got)
	}
	sec, err := cs.CoreV1().Secrets(ns).Get(t.Context(), "api-database", metav1.GetOptions{})
	if err != nil || string(sec.Data["DATABASE_PASSWORD"]) != dbPassword {
		t.Errorf("the deleted Secret after the correcting apply: %v", err)
	}
	if d := drift(t, inputs); len(d) != 0 {
		t.Errorf("drift after the correcting apply = %+v, want none", d)
	}
	if res := apply(t); res.Changed {
		t.Error("an apply with nothing drifted changed the release")
	}
}

// TestWait checks helm.wait: an apply waits for the Deployment to become
// Ready (kstatus) and fails, naming it, when it does not within the
// timeout; once its status says Available, the apply passes and reports
// the release Ready.
func TestWait(t *testing.T) {
	srv := kubetest.Shared(t)
	ns := srv.Namespace(t)
	cs := srv.Clientset(t)
	p := testPlugin(srv)
	stateDir := t.TempDir()
	job := newJob(ns, apiInputs("acme.shop.example", 1))
	job.Helm.Wait = true
	job.Helm.Timeout = "2s"

	env, log := helmEnv(t, stateDir)
	_, err := p.Apply(t.Context(), job, env)
	if !errors.Is(err, ErrNotReady) {
		t.Fatalf("Apply = %v, want ErrNotReady\n%s", err, log)
	}
	if want := "Deployment/" + ns + "/api is Progressing"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks %q", err, want)
	}

	dep, err := cs.AppsV1().Deployments(ns).Get(t.Context(), "api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dep.Status = appsv1.DeploymentStatus{
		ObservedGeneration: dep.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: "True", Reason: "MinimumReplicasAvailable"},
			{Type: appsv1.DeploymentProgressing, Status: "True", Reason: "NewReplicaSetAvailable"},
		},
	}
	if _, err := cs.AppsV1().Deployments(ns).UpdateStatus(t.Context(), dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	env, log = helmEnv(t, stateDir)
	began := time.Now()
	res, err := p.Apply(t.Context(), job, env)
	if err != nil {
		t.Fatalf("Apply once Available: %v\n%s", err, log)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("Apply took %v", took)
	}
	want := &schemas.Health{Status: schemas.HealthReady, Message: "3 of 3 resources ready"}
	if diff := cmp.Diff(want, res.Health); diff != "" {
		t.Errorf("health (-want +got):\n%s", diff)
	}
	h, err := p.Health(t.Context(), job, env)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("health job (-want +got):\n%s", diff)
	}
}

// TestDebug answers helm status and history and a Kubernetes command
// through the helm plugin; values never show.
func TestDebug(t *testing.T) {
	srv := kubetest.Shared(t)
	ns := srv.Namespace(t)
	p, counts := countingPlugin(srv)
	stateDir := t.TempDir()
	env, log := helmEnv(t, stateDir)
	if _, err := p.Apply(t.Context(), newJob(ns, apiInputs("acme.shop.example", 1)), env); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	tests := []struct {
		words   string
		want    []string
		refused string
	}{
		{words: "status api", want: []string{"NAME:", "api", "REVISION:", "1", "STATUS:", "deployed", "CHART:", "web-1.0.0", "RESOURCES:", "Secret/api-database", "Deployment/api"}},
		{words: "history api", want: []string{"REVISION", "1", "deployed", "web-1.0.0", "Install complete"}},
		{words: "status nothing", want: []string{"release nothing not found in namespace " + ns}},
		{words: "get secret api-database", want: []string{"DATABASE_PASSWORD: (hidden"}},
		{words: "describe deployment api", want: []string{"Health:", "Progressing"}},
		{words: "get pods -n kube-system", refused: "not one of the install's namespaces"},
	}
	for _, tt := range tests {
		t.Run(tt.words, func(t *testing.T) {
			cmd, err := debugcmd.Parse(schemas.TypeHelm, strings.Fields(tt.words))
			if err != nil {
				t.Fatal(err)
			}
			job := newJob(ns, apiInputs("acme.shop.example", 1))
			job.Operation = schemas.OpDebug
			job.Debug = &schemas.DebugRequest{Command: cmd.Words()}
			out := debugcmd.NewLimit(1 << 20)
			counts.reset()
			err = p.Debug(t.Context(), job, env, cmd, out)
			for method := range counts.reset() {
				if method != "GET" {
					t.Errorf("a debug command sent a %s request", method)
				}
			}
			if tt.refused != "" {
				if !errors.Is(err, debugcmd.ErrRefused) || !strings.Contains(err.Error(), tt.refused) {
					t.Fatalf("error = %v, want a refusal with %q", err, tt.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			answer := out.Answer(cmd, nil).Output
			for _, w := range tt.want {
				if !strings.Contains(answer, w) {
					t.Errorf("answer lacks %q:\n%s", w, answer)
				}
			}
			if strings.Contains(answer, "s3cr3t") || strings.Contains(answer, "acme.shop.example") {
				t.Errorf("the answer holds a value:\n%s", answer)
			}
		})
	}
}

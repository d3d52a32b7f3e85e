package helm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/storage/driver"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// dirSource is an ArtifactSource whose artifacts are directories: it copies
// the one an artifact's Local reference names.
type dirSource struct{}

func (dirSource) Extract(ctx context.Context, a schemas.Artifact, dir string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return os.CopyFS(dir, os.DirFS(a.Local))
}

// webChart is the test chart; fixtureChart is the sample app's API chart.
var (
	webChart     = filepath.Join("testdata", "charts", "web")
	fixtureChart = filepath.Join("..", "..", "fixtures", "charts", "api")
)

const dbPassword = `pw-"s3cr3t"-42`

func newJob(namespace string, inputs map[string]any) *schemas.Job {
	return &schemas.Job{
		APIVersion: schemas.APIVersion,
		Kind:       schemas.KindJob,
		ID:         "api-g1-create-test",
		Install:    "acme",
		Component:  "api",
		Operation:  schemas.OpCreate,
		Plugin:     schemas.TypeHelm,
		Version:    "2.4.0",
		Artifacts:  []schemas.Artifact{{Name: ChartArtifact, Local: webChart, Digest: "sha256:web-1.0.0"}},
		Inputs:     inputs,
		Helm:       &schemas.HelmSettings{Namespace: namespace, Timeout: "1m"},
		Timeout:    "2m",
	}
}

func apiInputs(domain string, replicas int) map[string]any {
	return map[string]any{
		"replicas": replicas,
		"domain":   domain,
		"database": map[string]any{"endpoint": "app.vpc-1.internal:5432", "password": "${secrets.db_password}"},
	}
}

type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testPlugin(srv *kubetest.Server) *Plugin {
	return &Plugin{
		Config: srv.Config(),
		LookupEnv: func(k string) (string, bool) {
			if k == "NUON_SECRET_DB_PASSWORD" {
				return dbPassword, true
			}
			return "", false
		},
	}
}

// history reads the release's revisions with Helm itself.
func history(t *testing.T, srv *kubetest.Server, ns, name string) []*release.Release {
	t.Helper()
	cfg := &action.Configuration{}
	if err := cfg.Init(&getter{cfg: srv.Config(), namespace: ns}, ns, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	hist, err := cfg.Releases.History(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	releaseutil.SortByRevision(hist)
	return hist
}

func configData(t *testing.T, cs *kubernetes.Clientset, ns, key string) string {
	t.Helper()
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "api-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data[key]
}

// TestLifecycle installs the fixture chart, re-applies it, upgrades it,
// fails an upgrade (rolled back), and uninstalls it.
func TestLifecycle(t *testing.T) {
	srv := kubetest.Shared(t)
	ns := srv.Namespace(t)
	cs := srv.Clientset(t)
	p := testPlugin(srv)
	stateDir := t.TempDir()

	steps := []struct {
		name        string
		inputs      map[string]any
		destroy     bool
		wantErr     error
		wantChanged bool
		check       func(t *testing.T, res *schemas.JobResult, err error)
	}{
		{
			name:        "install",
			inputs:      apiInputs("acme.shop.example", 2),
			wantChanged: true,
			check: func(t *testing.T, res *schemas.JobResult, _ error) {
				if res.Outputs["revision"] != int64(1) || res.Outputs["status"] != "deployed" || res.Outputs["chart"] != "web-1.0.0" || res.Outputs["namespace"] != ns {
					t.Errorf("outputs = %v", res.Outputs)
				}
				if got := configData(t, cs, ns, "DATABASE_ENDPOINT"); got != "app.vpc-1.internal:5432" {
					t.Errorf("DATABASE_ENDPOINT = %q", got)
				}
				sec, err := cs.CoreV1().Secrets(ns).Get(t.Context(), "api-database", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if got := string(sec.Data["DATABASE_PASSWORD"]); got != dbPassword {
					t.Errorf("DATABASE_PASSWORD = %q, want the resolved secret", got)
				}
				dep, err := cs.AppsV1().Deployments(ns).Get(t.Context(), "api", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if *dep.Spec.Replicas != 2 {
					t.Errorf("replicas = %d, want 2", *dep.Spec.Replicas)
				}
			},
		},
		{
			name:   "re-apply no-op",
			inputs: apiInputs("acme.shop.example", 2),
			check: func(t *testing.T, res *schemas.JobResult, _ error) {
				if res.Outputs["revision"] != int64(1) {
					t.Errorf("revision = %v, want 1 kept", res.Outputs["revision"])
				}
			},
		},
		{
			name:        "upgrade",
			inputs:      apiInputs("shop.acme.example", 2),
			wantChanged: true,
			check: func(t *testing.T, res *schemas.JobResult, _ error) {
				if res.Outputs["revision"] != int64(2) {
					t.Errorf("revision = %v, want 2", res.Outputs["revision"])
				}
				if got := configData(t, cs, ns, "DOMAIN"); got != "shop.acme.example" {
					t.Errorf("DOMAIN = %q after the upgrade", got)
				}
			},
		},
		{
			name:    "failed upgrade rolls back",
			inputs:  apiInputs("broken.acme.example", -1),
			wantErr: ErrUpgradeFailed,
			check: func(t *testing.T, _ *schemas.JobResult, err error) {
				for _, want := range []string{"helm release api: upgrade failed: ", "spec.replicas", "; rolled back to revision 2"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q lacks %q", err, want)
					}
				}
				hist := history(t, srv, ns, "api")
				var got []string
				for _, r := range hist {
					got = append(got, r.Info.Status.String())
				}
				if want := "superseded superseded failed deployed"; strings.Join(got, " ") != want {
					t.Errorf("history = %v, want %s", got, want)
				}
				if got := configData(t, cs, ns, "DOMAIN"); got != "shop.acme.example" {
					t.Errorf("DOMAIN = %q after the rollback, want revision 2's", got)
				}
			},
		},
		{
			name:        "fixed upgrade after a rollback",
			inputs:      apiInputs("fixed.acme.example", 3),
			wantChanged: true,
			check: func(t *testing.T, res *schemas.JobResult, _ error) {
				if res.Outputs["revision"] != int64(5) {
					t.Errorf("revision = %v, want 5", res.Outputs["revision"])
				}
			},
		},
		{
			name:    "uninstall",
			destroy: true,
			check: func(t *testing.T, _ *schemas.JobResult, _ error) {
				if h := history(t, srv, ns, "api"); len(h) != 0 {
					t.Errorf("history after uninstall has %d revisions", len(h))
				}
				if _, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), "api-config", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Errorf("ConfigMap after uninstall: %v, want not found", err)
				}
			},
		},
		{
			name:    "uninstall again",
			destroy: true,
			check:   func(*testing.T, *schemas.JobResult, error) {},
		},
	}
	for _, s := range steps {
		ok := t.Run(s.name, func(t *testing.T) {
			log := &syncBuilder{}
			env := reconciler.Env{StateDir: stateDir, Artifacts: dirSource{}, Log: log}
			job := newJob(ns, s.inputs)
			var res *schemas.JobResult
			var err error
			if s.destroy {
				job.Operation = schemas.OpDelete
				err = p.Destroy(t.Context(), job, env)
			} else {
				res, err = p.Apply(t.Context(), job, env)
			}
			if s.wantErr != nil {
				if !errors.Is(err, s.wantErr) {
					t.Fatalf("error = %v, want %v\nlog:\n%s", err, s.wantErr, log)
				}
			} else if err != nil {
				t.Fatalf("%v\nlog:\n%s", err, log)
			}
			if res != nil && res.Changed != s.wantChanged {
				t.Errorf("Changed = %v, want %v", res.Changed, s.wantChanged)
			}
			// What leaves the job passes through the job process's
			// redactor (package jobrun).
			red, rerr := redact.New(map[string]string{"NUON_SECRET_DB_PASSWORD": dbPassword})
			if rerr != nil {
				t.Fatal(rerr)
			}
			for _, leak := range []string{dbPassword, "s3cr3t"} {
				if strings.Contains(red.String(log.String()), leak) || (err != nil && strings.Contains(red.Error(err).Error(), leak)) {
					t.Errorf("the log or the error holds the secret")
				}
			}
			s.check(t, res, err)
		})
		if !ok {
			t.FailNow()
		}
	}
}

// TestInstallFails checks that a first install that fails leaves no
// release behind, so that the next job installs afresh.
func TestInstallFails(t *testing.T) {
	srv := kubetest.Shared(t)
	ns := srv.Namespace(t)
	p := testPlugin(srv)
	log := &syncBuilder{}
	env := reconciler.Env{StateDir: t.TempDir(), Artifacts: dirSource{}, Log: log}
	_, err := p.Apply(t.Context(), newJob(ns, apiInputs("x.example", -1)), env)
	if !errors.Is(err, ErrInstallFailed) {
		t.Fatalf("Apply = %v, want ErrInstallFailed\nlog:\n%s", err, log)
	}
	if h := history(t, srv, ns, "api"); len(h) != 0 {
		t.Errorf("a failed install left %d revisions", len(h))
	}
	res, err := p.Apply(t.Context(), newJob(ns, apiInputs("x.example", 1)), env)
	if err != nil {
		t.Fatalf("install after a failed one: %v\nlog:\n%s", err, log)
	}
	if res.Outputs["revision"] != int64(1) {
		t.Errorf("revision = %v, want 1", res.Outputs["revision"])
	}
}

// TestPendingRelease checks that a release left pending by a killed job
// does not block the next one.
func TestPendingRelease(t *testing.T) {
	srv := kubetest.Shared(t)
	ns := srv.Namespace(t)
	p := testPlugin(srv)
	log := &syncBuilder{}
	env := reconciler.Env{StateDir: t.TempDir(), Artifacts: dirSource{}, Log: log}
	if _, err := p.Apply(t.Context(), newJob(ns, apiInputs("a.example", 1)), env); err != nil {
		t.Fatal(err)
	}
	cfg := &action.Configuration{}
	if err := cfg.Init(&getter{cfg: srv.Config(), namespace: ns}, ns, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	rel, err := cfg.Releases.Last("api")
	if err != nil {
		t.Fatal(err)
	}
	// A killed upgrade leaves the deployed revision and a pending one.
	pending := *rel
	info := *rel.Info
	pending.Info, pending.Version = &info, rel.Version+1
	pending.Info.Status = release.StatusPendingUpgrade
	if err := cfg.Releases.Create(&pending); err != nil {
		t.Fatal(err)
	}
	res, err := p.Apply(t.Context(), newJob(ns, apiInputs("b.example", 1)), env)
	if err != nil {
		t.Fatalf("Apply after a pending release: %v\nlog:\n%s", err, log)
	}
	if !strings.Contains(log.String(), "left pending-upgrade by an interrupted job") {
		t.Errorf("log:\n%s", log)
	}
	if res.Outputs["revision"] != int64(3) {
		t.Errorf("revision = %v, want 3", res.Outputs["revision"])
	}
}

func TestSecretMissing(t *testing.T) {
	p := &Plugin{LookupEnv: func(string) (string, bool) { return "", false }}
	env := reconciler.Env{StateDir: t.TempDir(), Artifacts: dirSource{}}
	_, err := p.Apply(t.Context(), newJob("ns", apiInputs("x", 1)), env)
	if !errors.Is(err, reconciler.ErrSecretMissing) {
		t.Fatalf("Apply = %v, want reconciler.ErrSecretMissing", err)
	}
	want := "helm values api: input database.password: secret missing: db_password (NUON_SECRET_DB_PASSWORD is not set)"
	if err.Error() != want {
		t.Errorf("error:\n got %s\nwant %s", err, want)
	}
}

// TestFixtureChart installs the sample app's API chart with the inputs
// fixtures/tenant/nuon.yaml gives it.
func TestFixtureChart(t *testing.T) {
	srv := kubetest.Shared(t)
	ns := srv.Namespace(t)
	p := testPlugin(srv)
	log := &syncBuilder{}
	env := reconciler.Env{StateDir: t.TempDir(), Artifacts: dirSource{}, Log: log}
	job := newJob(ns, apiInputs("acme.shop.example", 2))
	job.Artifacts[0].Local = fixtureChart
	res, err := p.Apply(t.Context(), job, env)
	if err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log)
	}
	if res.Outputs["status"] != "deployed" || !strings.HasPrefix(res.Outputs["chart"].(string), "api-") {
		t.Errorf("outputs = %v", res.Outputs)
	}
	if err := p.Destroy(t.Context(), job, env); err != nil {
		t.Fatal(err)
	}
}

package manifests_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/manifests"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/reconciler/helm"
	plugin "nuon.dev/nuon/reconciler/manifests"
	"nuon.dev/nuon/schemas"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

const (
	agentSA = "system:serviceaccount:nuon-system:nuon-agent"
	jobSA   = "system:serviceaccount:nuon-system:nuon-job"
)

// dirSource serves each artifact from the directory its Local names.
type dirSource struct{}

func (dirSource) Extract(ctx context.Context, a schemas.Artifact, dir string) error {
	return os.CopyFS(dir, os.DirFS(a.Local))
}

func job(component, dir string, inputs map[string]any) *schemas.Job {
	return &schemas.Job{
		APIVersion: schemas.APIVersion, Kind: schemas.KindJob,
		ID: component + "-g1-create-000001", Install: "acme", Component: component,
		Operation: schemas.OpCreate, Version: "1.0.0", Generation: 1,
		Commit:    strings.Repeat("ab", 20),
		Artifacts: []schemas.Artifact{{Name: "manifests", Local: dir, Digest: "sha256:test"}},
		Inputs:    inputs, Timeout: "2m",
	}
}

// as returns a client configuration that impersonates a service account.
func as(srv *kubetest.Server, user string) *rest.Config {
	cfg := srv.Config()
	parts := strings.Split(user, ":")
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: user,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + parts[2], "system:authenticated"},
	}
	return cfg
}

// TestManifests applies the agent's manifests to a real API server, checks
// what each service account may and may not do, and then works as each:
// the agent runs a Kubernetes Job, the jobs apply the sample app's
// manifests and chart into its namespace.
func TestManifests(t *testing.T) {
	srv := kubetest.Shared(t)
	dir := t.TempDir()
	if err := os.CopyFS(dir, manifests.FS); err != nil {
		t.Fatal(err)
	}
	p := &plugin.Plugin{Config: srv.Config()}
	stateDir := t.TempDir()
	var log strings.Builder
	env := reconciler.Env{StateDir: stateDir, Artifacts: dirSource{}, Log: &log}
	res, err := p.Apply(t.Context(), job("nuon", dir, nil), env)
	if err != nil {
		t.Fatalf("apply the manifests: %v\n%s", err, log.String())
	}
	entries, _ := fs.Glob(manifests.FS, "*.yaml")
	if n := len(res.Outputs["inventory"].([]any)); n != 15 || len(entries) != 4 {
		t.Errorf("applied %d objects from %d files: %v", n, len(entries), res.Outputs["inventory"])
	}
	log.Reset()
	if res, err := p.Apply(t.Context(), job("nuon", dir, nil), env); err != nil || res.Changed {
		t.Errorf("re-apply: changed %v, %v\n%s", res != nil && res.Changed, err, log.String())
	}

	t.Run("rbac", func(t *testing.T) { checkAccess(t, srv.Clientset(t)) })
	t.Run("agent runs a job", func(t *testing.T) { agentRunsJob(t, srv) })
	t.Run("jobs deploy the app", func(t *testing.T) { jobsDeploy(t, srv) })
}

// checkAccess asks the API server's authorizer what each service account
// may do.
func checkAccess(t *testing.T, cs *kubernetes.Clientset) {
	tests := []struct {
		user, verb, group, resource, sub, ns string
		allowed                              bool
	}{
		{agentSA, "create", "batch", "jobs", "", "nuon-system", true},
		{agentSA, "delete", "batch", "jobs", "", "nuon-system", true},
		{agentSA, "create", "", "configmaps", "", "nuon-system", true},
		{agentSA, "get", "", "pods", "log", "nuon-system", true},
		{agentSA, "get", "", "secrets", "", "nuon-system", false},
		{agentSA, "list", "", "secrets", "", "nuon-system", false},
		{agentSA, "patch", "", "secrets", "", "nuon-system", false},
		{agentSA, "create", "", "secrets", "", "nuon-system", true},
		{agentSA, "patch", "batch", "jobs", "", "nuon-system", true},
		{agentSA, "create", "", "secrets", "", "shop", false},
		{agentSA, "create", "batch", "jobs", "", "shop", false},
		{agentSA, "create", "apps", "deployments", "", "shop", false},
		{agentSA, "create", "", "pods", "", "nuon-system", false},
		{agentSA, "create", "rbac.authorization.k8s.io", "rolebindings", "", "nuon-system", false},
		{jobSA, "patch", "apps", "deployments", "", "shop", true},
		{jobSA, "create", "", "secrets", "", "shop", true},
		{jobSA, "list", "apps", "replicasets", "", "shop", true},
		{jobSA, "create", "apps", "deployments", "", "kube-system", false},
		{jobSA, "get", "", "secrets", "", "nuon-system", false},
		{jobSA, "create", "", "namespaces", "", "", false},
		{jobSA, "create", "rbac.authorization.k8s.io", "clusterrolebindings", "", "", false},
		{jobSA, "delete", "", "pods", "", "shop", false},
		// The terraform state (Terraform's kubernetes backend) in
		// nuon-state: what the backend calls, and no more.
		{jobSA, "list", "", "secrets", "", "nuon-state", true},
		{jobSA, "create", "", "secrets", "", "nuon-state", true},
		{jobSA, "update", "", "secrets", "", "nuon-state", true},
		{jobSA, "delete", "", "secrets", "", "nuon-state", false},
		{jobSA, "update", "coordination.k8s.io", "leases", "", "nuon-state", true},
		{jobSA, "delete", "coordination.k8s.io", "leases", "", "nuon-state", false},
		{jobSA, "create", "", "configmaps", "", "nuon-state", false},
		{jobSA, "list", "", "secrets", "", "nuon-system", false},
		{agentSA, "get", "coordination.k8s.io", "leases", "", "nuon-state", true},
		{agentSA, "update", "coordination.k8s.io", "leases", "", "nuon-state", false},
		{agentSA, "get", "", "secrets", "", "nuon-state", false},
		// A vendor's plugin's job: its NetworkPolicy, created, never
		// changed or deleted by the agent (the garbage collector deletes
		// it with the Job); none elsewhere.
		{agentSA, "create", "networking.k8s.io", "networkpolicies", "", "nuon-system", true},
		{agentSA, "update", "networking.k8s.io", "networkpolicies", "", "nuon-system", false},
		{agentSA, "delete", "networking.k8s.io", "networkpolicies", "", "nuon-system", false},
		{agentSA, "create", "networking.k8s.io", "networkpolicies", "", "shop", false},
		{jobSA, "create", "networking.k8s.io", "networkpolicies", "", "nuon-system", false},
	}
	for _, tt := range tests {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   tt.user,
			Groups: []string{"system:serviceaccounts", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: tt.ns, Verb: tt.verb, Group: tt.group, Resource: tt.resource, Subresource: tt.sub,
			},
		}}
		got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tt.allowed {
			t.Errorf("%s %s %s/%s in %q: allowed %v, want %v", strings.TrimPrefix(tt.user, "system:serviceaccount:"), tt.verb, tt.resource, tt.sub, tt.ns, got.Status.Allowed, tt.allowed)
		}
	}
}

// agentRunsJob runs a job with the Kubernetes runner as the agent's
// service account, and completes it as the job controller and kubelet
// would: the Job's pod must pass the namespace's restricted policy.
func agentRunsJob(t *testing.T, srv *kubetest.Server) {
	agent, err := kubernetes.NewForConfig(as(srv, agentSA))
	if err != nil {
		t.Fatal(err)
	}
	admin := srv.Clientset(t)
	k := &jobs.Kube{Client: agent, Namespace: "nuon-system", Image: "registry.vendor.example/nuon/nuon:0.1.0", SecretName: "nuon-secrets", PollInterval: 50 * time.Millisecond}
	j := job("api", "", map[string]any{"replicas": float64(2)})
	j.Plugin, j.StateDir, j.Artifacts = schemas.TypeHelm, "/var/lib/nuon/components/api", nil
	type outcome struct {
		res *schemas.JobResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := k.Run(t.Context(), j, t.TempDir())
		done <- outcome{res, err}
	}()
	var kj *batchv1.Job
	for deadline := time.Now().Add(30 * time.Second); kj == nil; {
		got, err := admin.BatchV1().Jobs("nuon-system").Get(t.Context(), jobs.KubeName(j.ID), metav1.GetOptions{})
		if err == nil {
			kj = got
			break
		}
		select {
		case o := <-done:
			t.Fatalf("Run as the agent: %v", o.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent created no Job")
		}
		time.Sleep(50 * time.Millisecond)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: kj.Name + "-abcde", Namespace: kj.Namespace, Labels: map[string]string{"batch.kubernetes.io/job-name": kj.Name}},
		Spec:       *kj.Spec.Template.Spec.DeepCopy(),
	}
	pod, err = admin.CoreV1().Pods(kj.Namespace).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the Job's pod is refused (restricted policy?): %v", err)
	}
	result, _ := json.Marshal(schemas.JobResult{APIVersion: schemas.APIVersion, Kind: schemas.KindJobResult, Job: j.ID, Changed: true})
	now := metav1.Now()
	pod.Status = corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "job", Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: string(result), StartedAt: now, FinishedAt: now}},
	}}}
	if _, err := admin.CoreV1().Pods(kj.Namespace).UpdateStatus(t.Context(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kj.Status = batchv1.JobStatus{StartTime: &now, CompletionTime: &now, Succeeded: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}}
	if _, err := admin.BatchV1().Jobs(kj.Namespace).UpdateStatus(t.Context(), kj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil || o.res == nil || !o.res.Changed {
		t.Errorf("Run as the agent = %+v, %v", o.res, o.err)
	}
}

// jobsDeploy applies the sample app's dashboards and installs its API
// chart into shop as the jobs' service account.
func jobsDeploy(t *testing.T, srv *kubetest.Server) {
	cfg := as(srv, jobSA)
	var log strings.Builder
	env := reconciler.Env{StateDir: t.TempDir(), Artifacts: dirSource{}, Log: &log}
	dash := job("dashboards", filepath.Join("..", "fixtures", "manifests", "dashboards"), map[string]any{"domain": "acme.shop.example"})
	dash.Manifests = &schemas.ManifestSettings{Namespace: "shop", Wait: true, Timeout: "20s"}
	if _, err := (&plugin.Plugin{Config: cfg}).Apply(t.Context(), dash, env); err != nil {
		t.Errorf("dashboards as %s: %v\n%s", jobSA, err, log.String())
	}
	log.Reset()
	api := job("api", filepath.Join("..", "fixtures", "charts", "api"), map[string]any{
		"replicas": 2,
		"domain":   "acme.shop.example",
		"database": map[string]any{"endpoint": "db.internal:5432", "password": "${secrets.db_password}"},
	})
	api.Artifacts[0].Name = helm.ChartArtifact
	api.Helm = &schemas.HelmSettings{Namespace: "shop"}
	hp := &helm.Plugin{Config: cfg, LookupEnv: func(k string) (string, bool) { return "pw-12345678", k == "NUON_SECRET_DB_PASSWORD" }}
	env.StateDir = t.TempDir()
	res, err := hp.Apply(t.Context(), api, env)
	if err != nil {
		t.Fatalf("api chart as %s: %v\n%s", jobSA, err, log.String())
	}
	if res.Outputs["status"] != "deployed" {
		t.Errorf("api release: %v", res.Outputs)
	}
}

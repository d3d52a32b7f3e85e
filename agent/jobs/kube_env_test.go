package jobs

import (
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/internal/s3test"
	"nuon.dev/nuon/internal/ststest"
	"nuon.dev/nuon/internal/testenv"
	"nuon.dev/nuon/reconciler/terraform"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/stack"
)

// credsModule writes the AWS credentials terraform runs with to var.out,
// as the aws provider would use them.
const credsModule = `
variable "out" { type = string }
resource "terraform_data" "creds" {
  provisioner "local-exec" {
    command     = "printf '%s %s' \"$AWS_ACCESS_KEY_ID\" \"$AWS_SESSION_TOKEN\" > \"$OUT\""
    environment = { OUT = var.out }
  }
}
output "id" { value = terraform_data.creds.id }
`

// TestKubeRunEnv runs the sandbox's job on AWS as the Kubernetes runner
// does, for real: the real kube-apiserver and controller manager,
// manifests/ applied, the runner acting as the agent's service account,
// a test kubelet, and the real terraform keeping the state in S3 (the
// job's State) through the S3 stand-in. The maintenance role's
// credentials (RunEnv) reach terraform through the job's own Secret,
// owned by the Job: never in the Job, the ConfigMap or the log; the
// garbage collector removes the Secret with the Job. A suspended Job
// left by an earlier run that stopped before its Secret is replaced.
func TestKubeRunEnv(t *testing.T) {
	if _, err := exec.LookPath("terraform"); err != nil {
		testenv.Missing(t, "terraform: %v", err)
	}
	sts := ststest.New(t)
	sts.AddCaller("AKIAAGENT0000001", "arn:aws:iam::111111111111:role/nuon-acme-agent")
	role := "arn:aws:iam::222222222222:role/nuon-acme-maintenance"
	sts.AddRole(ststest.Role{ARN: role, TrustedAccount: "111111111111", ExternalID: "acme-x"})
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKIAAGENT0000001", "agent-secret", "")}
	creds, err := stack.AssumeRole(t.Context(), cfg, role, "acme-x", stack.WithEndpoint(sts.URL))
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for k, v := range creds.Env() {
		env = append(env, k+"="+v)
		if k == "AWS_SECRET_ACCESS_KEY" || k == "AWS_SESSION_TOKEN" {
			env = append(env, redact.EnvPrefix+k+"="+v)
		}
	}
	const bucket = "nuon-acme-state"
	s3 := s3test.New(t, sts.Secret, bucket)

	srv := kubetest.New(t, kubetest.WithControllerManager())
	kubectl := kubetest.Kubectl(t)
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	for _, f := range []string{"00-namespaces.yaml", "10-agent-rbac.yaml", "20-jobs-rbac.yaml"} {
		out, err := exec.Command(kubectl, "--kubeconfig", srv.Kubeconfig, "apply", "--server-side", "-f", filepath.Join(root, "manifests", f)).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl apply %s: %v\n%s", f, err, out)
		}
	}
	const ns = "nuon-system"
	modules := t.TempDir()
	if err := os.MkdirAll(filepath.Join(modules, "creds"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(modules, "creds", "main.tf"), []byte(credsModule), 0o600); err != nil {
		t.Fatal(err)
	}
	none := filepath.Join(t.TempDir(), "none")
	kl := startKubelet(t, srv, ns, []string{envModules + "=" + modules, "CHECKPOINT_DISABLE=1",
		terraform.EnvS3Endpoint + "=" + s3.URL, terraform.EnvSTSEndpoint + "=" + sts.URL,
		"AWS_CONFIG_FILE=" + none, "AWS_SHARED_CREDENTIALS_FILE=" + none, "AWS_EC2_METADATA_DISABLED=true"})

	agentCfg := srv.Config()
	agentCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:nuon-system:nuon-agent",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:nuon-system", "system:authenticated"}}
	client, err := NewKubeClient(agentCfg)
	if err != nil {
		t.Fatal(err)
	}
	var runnerLog strings.Builder
	k := &Kube{Client: client, Namespace: ns, Image: "registry.example/nuon:test", PollInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&runnerLog, nil))}
	cs := srv.Clientset(t)

	out := filepath.Join(t.TempDir(), "creds")
	job := kubeJob("sandbox-g1-create-000001")
	job.Plugin, job.Component, job.Timeout = schemas.TypeTerraform, schemas.SandboxComponent, "3m"
	job.StateDir = "/var/lib/nuon/sandbox"
	job.Artifacts = []schemas.Artifact{{Name: terraform.ModuleArtifact, Local: "r.example/creds@" + testDigest, Digest: testDigest}}
	job.Inputs = map[string]any{"out": out}
	job.State = &schemas.S3State{Bucket: bucket, Key: "sandbox/terraform.tfstate", Region: "us-east-1"}
	// A run that stopped between creating its suspended Job and its
	// Secret left the Job behind: it never started, and is replaced.
	_, left, err := k.objects(job, KubeName(job.ID), "", KubeName(job.ID)+"-env-lost", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	left.Spec.Suspend = ptr.To(true)
	if _, err := cs.BatchV1().Jobs(ns).Create(t.Context(), left, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	res, err := k.RunEnv(t.Context(), job, dir, env)
	if err != nil {
		t.Fatalf("RunEnv: %v\n%s", err, kl.log(KubeName(job.ID)))
	}
	if !res.Changed {
		t.Errorf("not changed: %+v", res)
	}
	got, _ := os.ReadFile(out)
	if want := creds.AccessKeyID + " " + creds.SessionToken; string(got) != want {
		t.Errorf("terraform ran with %q, want the role's credentials", got)
	}
	if _, ok := s3.Object(bucket, "sandbox/terraform.tfstate"); !ok {
		t.Errorf("no state in S3: %v", s3.Keys(bucket))
	}

	// The credentials are in the job's Secret only.
	name := KubeName(job.ID)
	kj, err := cs.BatchV1().Jobs(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	specs, _ := json.Marshal([]any{kj, cm})
	jobLog, _ := os.ReadFile(filepath.Join(dir, LogFile))
	for where, text := range map[string]string{"the Job and ConfigMap": string(specs), "the job's log": string(jobLog),
		"the runner's log": runnerLog.String(), "the job's manifest": readFileString(t, filepath.Join(dir, ManifestFile))} {
		for _, secret := range []string{creds.SecretAccessKey, creds.SessionToken} {
			if strings.Contains(text, secret) {
				t.Errorf("%s holds a credential", where)
			}
		}
	}
	env0 := kj.Spec.Template.Spec.Containers[0].EnvFrom
	secretName := ""
	for _, e := range env0 {
		if e.SecretRef != nil && e.Prefix == "" {
			secretName = e.SecretRef.Name
		}
	}
	sec, err := cs.CoreV1().Secrets(ns).Get(t.Context(), secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the job's secret %q: %v", secretName, err)
	}
	if len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].UID != kj.UID || sec.Immutable == nil || !*sec.Immutable {
		t.Errorf("the job's secret: owners %+v, immutable %v; want the Job %s, immutable", sec.OwnerReferences, sec.Immutable, kj.UID)
	}
	if string(sec.Data["AWS_SECRET_ACCESS_KEY"]) != creds.SecretAccessKey || string(sec.Data[redact.EnvPrefix+"AWS_SESSION_TOKEN"]) != creds.SessionToken {
		t.Errorf("the job's secret holds %v", mapsKeys(sec.Data))
	}
	if kj.Spec.Suspend == nil || *kj.Spec.Suspend {
		t.Errorf("the Job is suspended: %v", kj.Spec.Suspend)
	}

	// The Job goes (as its TTL or the runner deletes it): the garbage
	// collector takes the Secret with it.
	bg := metav1.DeletePropagationBackground
	if err := cs.BatchV1().Jobs(ns).Delete(t.Context(), name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		_, err := cs.CoreV1().Secrets(ns).Get(t.Context(), secretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job's secret outlived its Job: %v", err)
		}
	}
}

func readFileString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mapsKeys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

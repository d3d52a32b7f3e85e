package jobs

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/internal/testenv"
	"nuon.dev/nuon/internal/tfstate"
	"nuon.dev/nuon/reconciler/terraform"
	"nuon.dev/nuon/schemas"
)

// counterModule creates one terraform_data whose create-time provisioner
// appends a line to var.log, then sleeps var.delay seconds: the log counts
// the creations, and a delay holds the state lock for that long.
const counterModule = `
variable "log" { type = string }
variable "delay" {
  type    = number
  default = 0
}
resource "terraform_data" "thing" {
  input = "v1"
  provisioner "local-exec" {
    command     = "echo created >> \"$LOG\" && sleep \"$DELAY\""
    environment = { LOG = var.log, DELAY = var.delay }
  }
}
output "id" { value = terraform_data.thing.id }
`

// TestKubeTerraformState runs terraform jobs with the Kubernetes runner
// for real: the real kube-apiserver and controller manager, manifests/
// applied (namespaces and RBAC), the runner acting as the agent's service
// account, each pod's command run by a test kubelet as the jobs' service
// account, and the real terraform keeping the state in the kubernetes
// backend. The pods' state directories are emptyDirs, fresh for every
// job: the state survives in nuon-state only.
func TestKubeTerraformState(t *testing.T) {
	if _, err := exec.LookPath("terraform"); err != nil {
		testenv.Missing(t, "terraform: %v", err)
	}
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
	if err := os.MkdirAll(filepath.Join(modules, "counter"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(modules, "counter", "main.tf"), []byte(counterModule), 0o600); err != nil {
		t.Fatal(err)
	}
	kl := startKubelet(t, srv, ns, []string{envModules + "=" + modules, "CHECKPOINT_DISABLE=1"})

	// The runner as the agent's service account.
	agentCfg := srv.Config()
	agentCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:nuon-system:nuon-agent",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:nuon-system", "system:authenticated"}}
	client, err := NewKubeClient(agentCfg)
	if err != nil {
		t.Fatal(err)
	}
	k := &Kube{Client: client, Namespace: ns, Image: "registry.example/nuon:test", PollInterval: 100 * time.Millisecond}
	cs := srv.Clientset(t)
	data := t.TempDir()

	run := func(t *testing.T, id, component string, delay int) (*schemas.JobResult, error) {
		t.Helper()
		job := kubeJob(id)
		job.Plugin, job.Component, job.Timeout = schemas.TypeTerraform, component, "3m"
		job.StateDir = "/var/lib/nuon/components/" + component
		job.Artifacts = []schemas.Artifact{{Name: terraform.ModuleArtifact, Local: "r.example/counter@" + testDigest, Digest: testDigest}}
		job.Inputs = map[string]any{"log": filepath.Join(data, component+".log"), "delay": float64(delay)}
		return k.Run(t.Context(), job, t.TempDir())
	}
	creations := func(component string) int {
		b, _ := os.ReadFile(filepath.Join(data, component+".log"))
		return strings.Count(string(b), "created")
	}

	t.Run("two applies share the state", func(t *testing.T) {
		first, err := run(t, "network-g1-create-000001", "network", 0)
		if err != nil {
			t.Fatalf("first apply: %v\n%s", err, kl.log(KubeName("network-g1-create-000001")))
		}
		second, err := run(t, "network-g2-update-000002", "network", 0)
		if err != nil {
			t.Fatalf("second apply: %v\n%s", err, kl.log(KubeName("network-g2-update-000002")))
		}
		if !first.Changed || second.Changed {
			t.Errorf("changed: first %v, second %v; want true, false", first.Changed, second.Changed)
		}
		if first.Outputs["id"] == nil || first.Outputs["id"] != second.Outputs["id"] {
			t.Errorf("id: first %v, second %v; want the same resource", first.Outputs["id"], second.Outputs["id"])
		}
		if n := creations("network"); n != 1 {
			t.Errorf("the resource was created %d times, want once", n)
		}
		secret := tfstate.StateSecretName(tfstate.StateSecretSuffix("acme", "network"))
		if _, err := cs.CoreV1().Secrets(DefaultStateNamespace).Get(t.Context(), secret, metav1.GetOptions{}); err != nil {
			t.Errorf("the state Secret: %v", err)
		}
	})

	t.Run("a killed job's lock is broken by the next", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			_, err := run(t, "database-g1-create-000003", "database", 120)
			done <- err
		}()
		// The provisioner runs: the apply holds the lock.
		deadline := time.Now().Add(2 * time.Minute)
		for creations("database") == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the slow apply never started\n%s", kl.log(KubeName("database-g1-create-000003")))
			}
			time.Sleep(100 * time.Millisecond)
		}
		kl.kill(KubeName("database-g1-create-000003"))
		if err := <-done; !errors.Is(err, ErrJobFailed) {
			t.Fatalf("the killed job: %v, want ErrJobFailed", err)
		}
		lease := tfstate.StateLeaseName(tfstate.StateSecretSuffix("acme", "database"))
		l, err := cs.CoordinationV1().Leases(DefaultStateNamespace).Get(t.Context(), lease, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			t.Fatalf("the killed job left no lock: %v %v", l, err)
		}
		killedLock := *l.Spec.HolderIdentity

		res, err := run(t, "database-g2-create-000004", "database", 0)
		if err != nil {
			t.Fatalf("the next job: %v\n%s", err, kl.log(KubeName("database-g2-create-000004")))
		}
		if res.Outputs["id"] == nil {
			t.Errorf("no id: %v", res.Outputs)
		}
		if res.BrokenLock == nil || res.BrokenLock.ID != killedLock || res.BrokenLock.Operation != "OperationTypeApply" || res.BrokenLock.Created == "" {
			t.Errorf("the result reports the broken lock as %+v, want %s", res.BrokenLock, killedLock)
		}
		log := kl.log(KubeName("database-g2-create-000004"))
		if !strings.Contains(log, "no longer running (lock "+killedLock) || !strings.Contains(log, "force-unlock") {
			t.Errorf("the job's log does not report the broken lock %s:\n%s", killedLock, log)
		}
		l, err = cs.CoordinationV1().Leases(DefaultStateNamespace).Get(t.Context(), lease, metav1.GetOptions{})
		if err != nil || (l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "") {
			t.Errorf("the lock after the next job: %v %v", l.Spec.HolderIdentity, err)
		}
		// And the job after that sees the state.
		res2, err := run(t, "database-g3-update-000005", "database", 0)
		if err != nil || res2.Changed || res2.Outputs["id"] != res.Outputs["id"] {
			t.Errorf("third job: changed %v, id %v (want %v), %v", res2 != nil && res2.Changed, res2.Outputs["id"], res.Outputs["id"], err)
		}
	})

	t.Run("a live job's lock is waited for", func(t *testing.T) {
		slow := make(chan error, 1)
		go func() {
			_, err := run(t, "cache-g1-create-000006", "cache", 4)
			slow <- err
		}()
		for creations("cache") == 0 {
			time.Sleep(100 * time.Millisecond)
		}
		began := time.Now()
		res, err := run(t, "cache-g2-update-000007", "cache", 0)
		if err != nil {
			t.Fatalf("the second job: %v\n%s", err, kl.log(KubeName("cache-g2-update-000007")))
		}
		if err := <-slow; err != nil {
			t.Errorf("the first job: %v (its lock was broken?)", err)
		}
		if res.BrokenLock != nil {
			t.Errorf("the second job reports a broken lock: %+v", res.BrokenLock)
		}
		if res.Changed || creations("cache") != 1 {
			t.Errorf("second job changed %v, creations %d: want false, 1", res.Changed, creations("cache"))
		}
		if time.Since(began) < 2*time.Second {
			t.Errorf("the second job ended %s after it started: it did not wait", time.Since(began))
		}
		if log := kl.log(KubeName("cache-g2-update-000007")); strings.Contains(log, "force-unlock") {
			t.Errorf("the second job broke a live job's lock:\n%s", log)
		}
	})
}

// testDigest is what the test artifacts claim; dirModules checks none.
const testDigest = "sha256:0000000000000000000000000000000000000000000000000000000000000000"

// TestLocalTerraformKilled kills a local terraform job mid-apply, as a
// machine losing the agent would: SIGKILL to the job's whole process
// group, terraform included. Its lock on the state file goes with it (an
// fcntl lock the kernel drops), though its lock info file stays: the next
// job applies without waiting and without breaking anything.
func TestLocalTerraformKilled(t *testing.T) {
	if _, err := exec.LookPath("terraform"); err != nil {
		testenv.Missing(t, "terraform: %v", err)
	}
	modules, data, state := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(modules, "counter"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(modules, "counter", "main.tf"), []byte(counterModule), 0o600); err != nil {
		t.Fatal(err)
	}
	l := testRunner(t)
	l.Env = []string{envPod + "=1", envModules + "=" + modules, "GORACE=atexit_sleep_ms=0", "CHECKPOINT_DISABLE=1"}
	run := func(ctx context.Context, id string, delay int, dir string) (*schemas.JobResult, error) {
		job := testJob(t, "network")
		job.ID, job.StateDir, job.Timeout = id, state, "3m"
		job.Artifacts = []schemas.Artifact{{Name: terraform.ModuleArtifact, Local: "r.example/counter@" + testDigest, Digest: testDigest}}
		job.Inputs = map[string]any{"log": filepath.Join(data, "log"), "delay": float64(delay)}
		return l.Run(ctx, job, dir)
	}
	created := func() int {
		b, _ := os.ReadFile(filepath.Join(data, "log"))
		return strings.Count(string(b), "created")
	}

	first := t.TempDir()
	done := make(chan error, 1)
	go func() { _, err := run(t.Context(), "network-g1-create-1", 120, first); done <- err }()
	for deadline := time.Now().Add(2 * time.Minute); created() == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(first, LogFile))
			t.Fatalf("the slow apply never started:\n%s", log)
		}
	}
	pid := jobPid(t, filepath.Join(first, ManifestFile))
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrJobFailed) {
		t.Fatalf("the killed job: %v, want ErrJobFailed", err)
	}
	if _, err := os.Stat(filepath.Join(state, ".terraform.tfstate.lock.info")); err != nil {
		t.Errorf("the killed apply left no lock info (%v): was it killed while holding the lock?", err)
	}

	second := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := run(ctx, "network-g2-create-2", 0, second)
	log, _ := os.ReadFile(filepath.Join(second, LogFile))
	if err != nil {
		t.Fatalf("the next job: %v\n%s", err, log)
	}
	if strings.Contains(string(log), "state lock") || res.BrokenLock != nil {
		t.Errorf("the next job met a lock (broken: %+v):\n%s", res.BrokenLock, log)
	}
	if res.Outputs["id"] == nil {
		t.Errorf("no id: %v", res.Outputs)
	}
}

// jobPid finds the job process whose command line names manifest.
func jobPid(t *testing.T, manifest string) int {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), manifest) {
			return pid
		}
	}
	t.Fatalf("no process runs %s", manifest)
	return 0
}

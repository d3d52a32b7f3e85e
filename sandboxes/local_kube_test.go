package sandboxes

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"nuon.dev/nuon/internal/testenv"
)

// TestLocalKubeControllers runs the local sandbox's kube-up.sh and checks
// what its kube-controller-manager brings: a deleted namespace is emptied
// and removed instead of staying Terminating, owner-referenced objects go
// with their owner, and a Job's pod is made by the Job controller. Then
// kube-down.sh stops all three processes.
func TestLocalKubeControllers(t *testing.T) {
	assets := os.Getenv("NUON_KUBE_ASSETS")
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(assets, b)); assets == "" || err != nil {
			testenv.Missing(t, "the local sandbox needs %s in NUON_KUBE_ASSETS (make kube-binaries)", b)
		}
	}
	for _, b := range []string{"openssl", "curl", "python3"} {
		if _, err := exec.LookPath(b); err != nil {
			testenv.Missing(t, "the local sandbox needs %s (make registry)", b)
		}
	}
	mod, dir := filepath.Join(t.TempDir(), "module"), filepath.Join(t.TempDir(), "kube")
	if err := Extract(Local, mod); err != nil {
		t.Fatal(err)
	}
	up := exec.Command(filepath.Join(mod, "kube-up.sh"), assets, dir)
	t.Cleanup(func() { _ = exec.Command(filepath.Join(mod, "kube-down.sh"), dir).Run() })
	out, err := up.Output()
	if err != nil {
		t.Fatalf("kube-up.sh: %v\n%s", err, errOutput(err))
	}
	kubeconfig := strings.TrimSpace(string(out))
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The service account controller gives it a default ServiceAccount,
	// which the Job's pod runs as.
	waitFor(t, "the default ServiceAccount of shop", func(ctx context.Context) (bool, string) {
		_, err := cs.CoreV1().ServiceAccounts("shop").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})

	// A Job: the Job controller creates its pod, owned by the Job.
	job, err := cs.BatchV1().Jobs("shop").Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "migrate"},
		Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "migrate", Image: "registry.example/migrate:1"}},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Job's pod", func(ctx context.Context) (bool, string) {
		pods, err := cs.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=migrate"})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprint(pods, err)
		}
		refs := pods.Items[0].OwnerReferences
		return len(refs) == 1 && refs[0].UID == job.UID, fmt.Sprint(refs)
	})

	// Owner references: deleting the owner collects the dependent.
	owner, err := cs.CoreV1().ConfigMaps("shop").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dependent",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: owner.UID}}}}
	if _, err := cs.CoreV1().ConfigMaps("shop").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps("shop").Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dependent collected", func(ctx context.Context) (bool, string) {
		_, err := cs.CoreV1().ConfigMaps("shop").Get(ctx, "dependent", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})

	// The namespace, with its Job, pod and ServiceAccount, goes.
	if err := cs.CoreV1().Namespaces().Delete(ctx, "shop", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "namespace shop removed", func(ctx context.Context) (bool, string) {
		n, err := cs.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
		if err != nil {
			return apierrors.IsNotFound(err), err.Error()
		}
		return false, "phase " + string(n.Status.Phase)
	})

	pids := map[string]int{}
	for _, p := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		b, err := os.ReadFile(filepath.Join(dir, p+".pid"))
		if err != nil {
			t.Fatal(err)
		}
		pids[p], _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if out, err := exec.Command(filepath.Join(mod, "kube-down.sh"), dir).CombinedOutput(); err != nil {
		t.Fatalf("kube-down.sh: %v\n%s", err, out)
	}
	for p, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("%s (%d) still runs after kube-down.sh", p, pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// waitFor polls cond until it holds, or fails the test after two minutes
// with what cond last said.
func waitFor(t *testing.T, what string, cond func(context.Context) (bool, string)) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var ok bool
		if ok, last = cond(t.Context()); ok {
			return
		}
	}
	t.Fatalf("%s: not within 2m (%s)", what, last)
}

func errOutput(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

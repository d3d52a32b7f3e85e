package kubetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// eventually polls cond every 100 ms until it returns true, or fails the
// test after timeout, quoting what cond last said.
func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var ok bool
		if ok, last = cond(t.Context()); ok {
			return
		}
	}
	t.Fatalf("%s: not after %s (%s)", what, timeout, last)
}

// TestControllerManager checks what WithControllerManager brings that the
// API server alone lacks: a deleted namespace is emptied and goes,
// dependents go with their owner, a Job and a Deployment get their Pods,
// and a service account token Secret gets its token.
func TestControllerManager(t *testing.T) {
	srv := New(t, WithControllerManager())
	cs := srv.Clientset(t)
	ctx := t.Context()
	ns := srv.Namespace(t)
	if _, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
		// Start waited for the controllers; the new namespace's follows.
		eventually(t, 30*time.Second, "default service account of "+ns, func(ctx context.Context) (bool, string) {
			_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			return err == nil, errString(err)
		})
	}

	t.Run("garbage collector", func(t *testing.T) {
		owner, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dependent", OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID},
		}}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "dependent collected", func(ctx context.Context) (bool, string) {
			_, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, dep.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), errString(err)
		})
	})

	t.Run("job controller", func(t *testing.T) {
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "migrate"},
			Spec: batchv1.JobSpec{
				BackoffLimit: ptr.To[int32](0),
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "job", Image: "registry.example/migrate:1"}},
				}},
			},
		}
		job, err := cs.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "the Job's pod", func(ctx context.Context) (bool, string) {
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=migrate"})
			if err != nil || len(pods.Items) == 0 {
				return false, errString(err)
			}
			p := pods.Items[0]
			owned := len(p.OwnerReferences) == 1 && p.OwnerReferences[0].UID == job.UID
			return owned && p.Spec.ServiceAccountName == "default", "pod " + p.Name
		})
		eventually(t, time.Minute, "the Job's status counts the pod", func(ctx context.Context) (bool, string) {
			j, err := cs.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return j.Status.Active == 1 && j.Status.StartTime != nil, "status " + j.Status.String()
		})
	})

	t.Run("deployment controller", func(t *testing.T) {
		labels := map[string]string{"app": "api"}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "api"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](2),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "api", Image: "registry.example/api:1"}}},
				},
			},
		}
		if _, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "the Deployment's pods", func(ctx context.Context) (bool, string) {
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=api"})
			if err != nil {
				return false, err.Error()
			}
			return len(pods.Items) == 2, fmt.Sprintf("%d pods", len(pods.Items))
		})
	})

	t.Run("token controller", func(t *testing.T) {
		sec := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "default-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
			Type:       corev1.SecretTypeServiceAccountToken,
		}
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "the token in "+sec.Name, func(ctx context.Context) (bool, string) {
			s, err := cs.CoreV1().Secrets(ns).Get(ctx, sec.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return len(s.Data[corev1.ServiceAccountTokenKey]) > 0 && len(s.Data[corev1.ServiceAccountRootCAKey]) > 0, "keys without the token"
		})
	})

	t.Run("namespace controller", func(t *testing.T) {
		// ns holds a Job, its Pod, a Deployment and its ReplicaSet and
		// Pods, ConfigMaps, Secrets and ServiceAccounts by now: the
		// namespace controller removes them all, then the namespace.
		if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Minute, "namespace "+ns+" removed", func(ctx context.Context) (bool, string) {
			n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err != nil {
				return apierrors.IsNotFound(err), err.Error()
			}
			return false, "phase " + string(n.Status.Phase)
		})
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

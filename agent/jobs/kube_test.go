package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/schemas"
)

// kubeJob is a job for the Kubernetes runner tests.
func kubeJob(id string) *schemas.Job {
	return &schemas.Job{
		APIVersion: schemas.APIVersion,
		Kind:       schemas.KindJob,
		ID:         id,
		Install:    "acme",
		Component:  "api",
		Operation:  schemas.OpUpdate,
		Plugin:     schemas.TypeHelm,
		Version:    "2.4.0",
		Generation: 3,
		Commit:     strings.Repeat("c0ffee12", 5),
		Inputs:     map[string]any{"replicas": float64(2)},
		Timeout:    "5m",
		StateDir:   "/var/lib/nuon/components/api",
	}
}

// outcome is what Run returned.
type outcome struct {
	res *schemas.JobResult
	err error
}

// startRun runs job with k in the background.
func startRun(ctx context.Context, k *Kube, job *schemas.Job, dir string) <-chan outcome {
	done := make(chan outcome, 1)
	go func() {
		res, err := k.Run(ctx, job, dir)
		done <- outcome{res, err}
	}()
	return done
}

// awaitJob waits until the runner created the Kubernetes Job of id; it
// fails if Run returns first.
func awaitJob(t *testing.T, cs kubernetes.Interface, ns, id string, done <-chan outcome) *batchv1.Job {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		j, err := cs.BatchV1().Jobs(ns).Get(t.Context(), KubeName(id), metav1.GetOptions{})
		if err == nil {
			return j
		}
		select {
		case o := <-done:
			t.Fatalf("Run returned before creating a Job: %v, %v", o.res, o.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no kubernetes job for %s: %v", id, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// finishJob plays the job controller and the kubelet, which the test API
// server lacks: it creates the Job's pod, terminated with exitCode and
// message as its termination message, and marks the Job complete or
// failed.
func finishJob(t *testing.T, cs kubernetes.Interface, j *batchv1.Job, exitCode int32, message string) {
	t.Helper()
	ctx := t.Context()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      j.Name + "-x7k2p",
			Namespace: j.Namespace,
			Labels:    map[string]string{labelJobName: j.Name, labelJobNameOlder: j.Name},
		},
		Spec: *j.Spec.Template.Spec.DeepCopy(),
	}
	pod, err := cs.CoreV1().Pods(j.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	phase := corev1.PodSucceeded
	if exitCode != 0 {
		phase = corev1.PodFailed
	}
	pod.Status = corev1.PodStatus{
		Phase: phase,
		ContainerStatuses: []corev1.ContainerStatus{{
			Name:  jobContainer,
			Image: j.Spec.Template.Spec.Containers[0].Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: exitCode, Message: message, StartedAt: now, FinishedAt: now,
			}},
		}},
	}
	if _, err := cs.CoreV1().Pods(j.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	j, err = cs.BatchV1().Jobs(j.Namespace).Get(ctx, j.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	j.Status.StartTime = &now
	if exitCode == 0 {
		j.Status.Succeeded = 1
		j.Status.CompletionTime = &now
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
	} else {
		j.Status.Failed = 1
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
		}
	}
	if _, err := cs.BatchV1().Jobs(j.Namespace).UpdateStatus(ctx, j, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func resultJSON(t *testing.T, res schemas.JobResult) string {
	t.Helper()
	res.APIVersion, res.Kind = schemas.APIVersion, schemas.KindJobResult
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestKube runs jobs with the Kubernetes runner against a real API server.
// Without a kubelet no pod runs: the test completes each Job itself and
// checks that the runner picks up the outcome.
func TestKube(t *testing.T) {
	srv := kubetest.New(t)
	cs := srv.Clientset(t)
	ns := srv.Namespace(t)
	// Pods need their service account to exist.
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DefaultJobServiceAccount}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	client, err := NewKubeClient(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	k := &Kube{
		Client:       client,
		Namespace:    ns,
		Image:        "registry.example/nuon:test",
		SecretName:   "nuon-secrets",
		PollInterval: 50 * time.Millisecond,
	}

	t.Run("succeeds", func(t *testing.T) {
		dir := t.TempDir()
		job := kubeJob("api-g3-update-1a2b3c")
		done := startRun(t.Context(), k, job, dir)
		kj := awaitJob(t, cs, ns, job.ID, done)
		checkJobSpec(t, cs, k, job, kj)

		want := schemas.JobResult{Job: job.ID, Changed: true, Outputs: map[string]any{"revision": float64(3)}}
		finishJob(t, cs, kj, 0, resultJSON(t, want))
		var got outcome
		select {
		case got = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not notice the completed Job")
		}
		if got.err != nil {
			t.Fatal(got.err)
		}
		want.APIVersion, want.Kind = schemas.APIVersion, schemas.KindJobResult
		if diff := cmp.Diff(&want, got.res); diff != "" {
			t.Errorf("result (-want +got):\n%s", diff)
		}
		onDisk, err := readResult(filepath.Join(dir, ResultFile))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(&want, onDisk); diff != "" {
			t.Errorf("result.json (-want +got):\n%s", diff)
		}
		log, _ := os.ReadFile(filepath.Join(dir, LogFile))
		if !strings.Contains(string(log), "==> ") || !strings.Contains(string(log), "in kubernetes job "+ns+"/"+kj.Name+", pod ") {
			t.Errorf("log:\n%s", log)
		}

		// After an agent restart: from result.json, then from the Job.
		res, err := k.Recover(t.Context(), dir)
		if err != nil || !cmp.Equal(&want, res) {
			t.Errorf("Recover = %v, %v; want the result", res, err)
		}
		os.Remove(filepath.Join(dir, ResultFile))
		res, err = k.Recover(t.Context(), dir)
		if err != nil || !cmp.Equal(&want, res) {
			t.Errorf("Recover from the Job = %v, %v; want the result", res, err)
		}
	})

	t.Run("fails", func(t *testing.T) {
		dir := t.TempDir()
		job := kubeJob("api-g4-update-9f8e7d")
		done := startRun(t.Context(), k, job, dir)
		kj := awaitJob(t, cs, ns, job.ID, done)
		finishJob(t, cs, kj, 1, resultJSON(t, schemas.JobResult{Job: job.ID, Error: "helm release api: upgrade failed: boom"}))
		err := (<-done).err
		if !errors.Is(err, ErrJobFailed) || !strings.Contains(err.Error(), "upgrade failed: boom") {
			t.Errorf("Run = %v, want ErrJobFailed with the job's error", err)
		}
	})

	t.Run("fails without a result", func(t *testing.T) {
		dir := t.TempDir()
		job := kubeJob("api-g5-update-000001")
		done := startRun(t.Context(), k, job, dir)
		kj := awaitJob(t, cs, ns, job.ID, done)
		finishJob(t, cs, kj, 137, "")
		err := (<-done).err
		if !errors.Is(err, ErrJobFailed) || !strings.Contains(err.Error(), "kubernetes job failed (BackoffLimitExceeded: ") {
			t.Errorf("Run = %v, want ErrJobFailed naming the Job's failure", err)
		}
	})

	t.Run("recover waits", func(t *testing.T) {
		dir := t.TempDir()
		job := kubeJob("api-g6-update-000002")
		ctx, cancel := context.WithCancel(t.Context())
		done := startRun(ctx, k, job, dir)
		kj := awaitJob(t, cs, ns, job.ID, done)
		// A second run of the same job refuses while the Job is active.
		if _, err := k.Run(t.Context(), job, t.TempDir()); !errors.Is(err, ErrRunning) {
			t.Errorf("second Run = %v, want ErrRunning", err)
		}
		// A Recover that gives up leaves the Job running.
		short, cancelShort := context.WithTimeout(t.Context(), 200*time.Millisecond)
		_, err := k.Recover(short, dir)
		cancelShort()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Recover with a short ctx = %v", err)
		}
		if _, err := cs.BatchV1().Jobs(ns).Get(t.Context(), kj.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("the Job after Recover gave up: %v", err)
		}
		recovered := make(chan error, 1)
		go func() {
			_, err := k.Recover(t.Context(), dir)
			recovered <- err
		}()
		finishJob(t, cs, kj, 0, resultJSON(t, schemas.JobResult{Job: job.ID}))
		if err := <-recovered; err != nil {
			t.Errorf("Recover = %v", err)
		}
		cancel()
		<-done
	})

	t.Run("cancel deletes the job", func(t *testing.T) {
		dir := t.TempDir()
		job := kubeJob("api-g7-update-000003")
		ctx, cancel := context.WithCancel(t.Context())
		done := startRun(ctx, k, job, dir)
		kj := awaitJob(t, cs, ns, job.ID, done)
		cancel()
		if err := (<-done).err; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
		j, err := cs.BatchV1().Jobs(ns).Get(t.Context(), kj.Name, metav1.GetOptions{})
		if err == nil && j.DeletionTimestamp == nil {
			t.Errorf("the Job is still there after the runner's ctx ended")
		}
		if _, err := k.Recover(t.Context(), dir); !errors.Is(err, ErrNotFinished) {
			t.Errorf("Recover after the Job was deleted = %v, want ErrNotFinished", err)
		}
	})
}

// TestKubeAPI checks the runner's calls with both kinds of KubeClient:
// objects round-trip, and errors are the typed clientset's.
func TestKubeAPI(t *testing.T) {
	srv := kubetest.New(t)
	ns := srv.Namespace(t)
	minimal, err := NewKubeClient(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		client KubeClient
	}{
		{"minimal", minimal},
		{"clientset", srv.Clientset(t)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			api := kubeAPI{c: tt.client.RESTClient(), ns: ns}
			name := "api-" + tt.name
			if _, err := api.getJob(ctx, name); !apierrors.IsNotFound(err) {
				t.Errorf("getJob of a missing Job = %v, want NotFound", err)
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelJob: tt.name}}, Data: map[string]string{"a": "1"}}
			if err := api.createConfigMap(ctx, cm); err != nil {
				t.Fatal(err)
			}
			if err := api.createConfigMap(ctx, cm); !apierrors.IsAlreadyExists(err) {
				t.Errorf("createConfigMap twice = %v, want AlreadyExists", err)
			}
			cm.Data["a"] = "2"
			if err := api.updateConfigMap(ctx, cm); err != nil {
				t.Errorf("updateConfigMap: %v", err)
			}
			if err := api.mergePatchConfigMap(ctx, name, []byte(`{"data":{"b":"3"}}`)); err != nil {
				t.Errorf("mergePatchConfigMap: %v", err)
			}
			got, err := srv.Clientset(t).CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(map[string]string{"a": "2", "b": "3"}, got.Data); diff != "" {
				t.Errorf("ConfigMap data (-want +got):\n%s", diff)
			}
			if len(got.ManagedFields) == 0 || got.ManagedFields[0].Manager != fieldManager {
				t.Errorf("managed fields %+v, want the manager %q", got.ManagedFields, fieldManager)
			}
			j, err := api.createJob(ctx, &batchv1.Job{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelJob: tt.name}},
				Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: jobContainer, Image: "registry.example/nuon:test"}},
				}}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if j.UID == "" || j.Namespace != ns || j.CreationTimestamp.IsZero() {
				t.Errorf("created Job %s/%s uid %q created %v", j.Namespace, j.Name, j.UID, j.CreationTimestamp)
			}
			list, err := api.listJobs(ctx, LabelJob+"="+tt.name)
			if err != nil || len(list.Items) != 1 || list.Items[0].UID != j.UID {
				t.Errorf("listJobs = %v, %v; want the Job", list, err)
			}
			if _, err := api.podLog(ctx, name, jobContainer, 100); !apierrors.IsNotFound(err) {
				t.Errorf("podLog of a missing pod = %v, want NotFound", err)
			}
			if err := api.deleteJob(ctx, name); err != nil {
				t.Errorf("deleteJob: %v", err)
			}
			if err := api.deleteConfigMap(ctx, name); err != nil {
				t.Errorf("deleteConfigMap: %v", err)
			}
			if err := api.deleteConfigMap(ctx, name); !apierrors.IsNotFound(err) {
				t.Errorf("deleteConfigMap twice = %v, want NotFound", err)
			}
		})
	}
}

// checkJobSpec checks the ConfigMap and Job the runner created for job.
func checkJobSpec(t *testing.T, cs kubernetes.Interface, k *Kube, job *schemas.Job, kj *batchv1.Job) {
	t.Helper()
	cm, err := cs.CoreV1().ConfigMaps(kj.Namespace).Get(t.Context(), kj.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got schemas.Job
	if err := json.Unmarshal([]byte(cm.Data[ManifestFile]), &got); err != nil {
		t.Fatal(err)
	}
	want := *job
	want.ResultFile = PodResultFile
	if diff := cmp.Diff(&want, &got); diff != "" {
		t.Errorf("manifest in the ConfigMap (-want +got):\n%s", diff)
	}
	if _, err := schemas.DecodeJob("configmap", []byte(cm.Data[ManifestFile])); err != nil {
		t.Errorf("the ConfigMap's manifest does not validate: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(cm.OwnerReferences) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		cm, _ = cs.CoreV1().ConfigMaps(kj.Namespace).Get(t.Context(), kj.Name, metav1.GetOptions{})
	}
	if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != kj.UID {
		t.Errorf("ConfigMap owners = %v, want the Job", cm.OwnerReferences)
	}
	if kj.Labels[LabelJob] != idHash(job.ID) || kj.Annotations[AnnotationJobID] != job.ID {
		t.Errorf("labels %v annotations %v", kj.Labels, kj.Annotations)
	}
	spec := kj.Spec
	if *spec.BackoffLimit != 0 || *spec.ActiveDeadlineSeconds != int64((5*time.Minute+DefaultTimeoutMargin).Seconds()) {
		t.Errorf("backoffLimit %d, activeDeadlineSeconds %d", *spec.BackoffLimit, *spec.ActiveDeadlineSeconds)
	}
	pod := spec.Template.Spec
	if pod.ServiceAccountName != DefaultJobServiceAccount || pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("serviceAccount %q restartPolicy %q", pod.ServiceAccountName, pod.RestartPolicy)
	}
	c := pod.Containers[0]
	if diff := cmp.Diff([]string{"nuon", "job", "run", "--pod", "/nuon/manifest/manifest.json"}, c.Command); diff != "" {
		t.Errorf("command (-want +got):\n%s", diff)
	}
	if c.Image != k.Image || c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("image %q, terminationMessagePolicy %q", c.Image, c.TerminationMessagePolicy)
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].Prefix != "NUON_SECRET_" || c.EnvFrom[0].SecretRef.Name != "nuon-secrets" {
		t.Errorf("envFrom = %+v", c.EnvFrom)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	for path, name := range map[string]string{PodManifestDir: "manifest", PodResultDir: "result", job.StateDir: "state", "/tmp": "tmp"} {
		if mounts[path] != name {
			t.Errorf("mount at %s = %q, want %q (mounts %v)", path, mounts[path], name, mounts)
		}
	}
}

func TestKubeName(t *testing.T) {
	for _, id := range []string{"api-g3-update-1a2b3c", "Dashboards_G1.create", strings.Repeat("x", 128), "-.-"} {
		name := KubeName(id)
		if len(name) > 63 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || strings.HasSuffix(name, "-") {
			t.Errorf("KubeName(%q) = %q, not a DNS label", id, name)
		}
		if KubeName(id+"x") == name {
			t.Errorf("KubeName(%q) equals that of another id", id)
		}
	}
}

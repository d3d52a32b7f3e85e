package jobs

import (
	"nuon.dev/nuon/internal/atomicfile"
	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/jobrun"
	"nuon.dev/nuon/plugin"

	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"nuon.dev/nuon/schemas"
)

// Run executes job as a Kubernetes Job and waits for it; see Kube for the
// objects it creates. dir keeps manifest.json, result.json and log as for
// a Local job. It returns ErrRunning without starting anything while a
// Job of an earlier run of the job is still active: call Recover for
// that.
//
// A job that failed returns its result, if it wrote one, and an error
// wrapping ErrJobFailed; one that hit its deadline also wraps
// context.DeadlineExceeded. When ctx ends first, the Job is deleted, which
// stops its pod, and the error wraps ctx.Err().
func (k *Kube) Run(ctx context.Context, job *schemas.Job, dir string) (*schemas.JobResult, error) {
	return k.run(ctx, job, dir, nil)
}

// RunEnv is Run with env (KEY=VALUE) added to the job's container through
// a Secret of the job's own, never the Job's spec: see Kube.
func (k *Kube) RunEnv(ctx context.Context, job *schemas.Job, dir string, env []string) (*schemas.JobResult, error) {
	return k.run(ctx, job, dir, env)
}

func (k *Kube) run(ctx context.Context, job *schemas.Job, dir string, env []string) (*schemas.JobResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("job %s: %w", job.ID, err)
	}
	r, err := k.newKubeRun(job, dir)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", job.ID, err)
	}
	if r.env, err = envData(env); err != nil {
		return nil, fmt.Errorf("job %s: %w", job.ID, err)
	}
	// The staged directory goes with the run, whatever its outcome.
	defer r.unstage()
	for _, step := range []func(context.Context) error{r.prepareDir, r.admitPlugin, r.clearFinished, r.checkStateLock, r.stage, r.create} {
		if err := step(ctx); err != nil {
			return nil, fmt.Errorf("job %s: %w", job.ID, err)
		}
	}
	r.wait(ctx)
	return r.outcome(ctx)
}

// kubeRun is one Run or Recover of one job: what its steps share.
type kubeRun struct {
	k      *Kube
	job    schemas.Job // as the agent keeps it: resultFile in dir
	dir    string
	name   string
	logger *slog.Logger

	timeout time.Duration
	// obj is the Job as last read.
	obj *batchv1.Job
	// cause is why the runner stopped waiting early: ctx's error, or
	// context.DeadlineExceeded with timedOut set.
	cause    error
	timedOut bool
	// waitErr is a failure to read the Job.
	waitErr error
	// keepOnCancel leaves the Job running when ctx ends.
	keepOnCancel bool
	// staleLock is the ID of a state lock held by a dead job of the
	// component, which the job may break (checkStateLock).
	staleLock string
	// env is RunEnv's environment, as the data of the job's Secret,
	// secret.
	env    map[string][]byte
	secret string
	// granted is what a vendor's plugin is granted (admitPlugin); nil
	// for other jobs.
	granted *schemas.PluginCapabilities
	// image is the plugin's container image, admitted, in the image
	// form; artifact the plugin's artifact, admitted, in the process
	// form. form is what its pod mounts, once staged (stage); staged
	// says a staged directory may exist, to remove.
	image    *plugin.Image
	artifact *plugin.Artifact
	form     *stagedForm
	staged   bool
}

// envName is what a Secret key and an environment variable may be named.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// envData turns KEY=VALUE entries into a Secret's data.
func envData(env []string) (map[string][]byte, error) {
	if len(env) == 0 {
		return nil, nil
	}
	data := make(map[string][]byte, len(env))
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !envName.MatchString(k) {
			// Never the entry itself: it may hold a secret.
			return nil, fmt.Errorf("job environment: entry %d is not NAME=VALUE", len(data))
		}
		data[k] = []byte(v)
	}
	return data, nil
}

func (k *Kube) newKubeRun(job *schemas.Job, dir string) (*kubeRun, error) {
	if k.Client == nil || k.Namespace == "" || k.Image == "" {
		return nil, errors.New("kubernetes runner: Client, Namespace and Image are required")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	r := &kubeRun{k: k, job: *job, dir: dir, name: KubeName(job.ID)}
	r.job.ResultFile = filepath.Join(dir, ResultFile)
	b, err := json.Marshal(&r.job)
	if err != nil {
		return nil, err
	}
	// The job process would refuse a manifest that does not validate.
	if _, err := schemas.DecodeJob(filepath.Join(dir, ManifestFile), b); err != nil {
		return nil, err
	}
	r.timeout, _ = time.ParseDuration(r.job.Timeout)
	r.logger = k.logger().With("install", job.Install, "component", job.Component, "job", job.ID, "plugin", job.Plugin, "kube_job", r.name)
	return r, nil
}

// prepareDir writes the manifest into dir and removes the result of an
// earlier run.
func (r *kubeRun) prepareDir(context.Context) error {
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return err
	}
	if err := os.Remove(r.job.ResultFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return atomicfile.WriteJSON(filepath.Join(r.dir, ManifestFile), &r.job)
}

// clearFinished deletes a finished Job of an earlier run of the job, and
// refuses to go on while one is still active.
func (r *kubeRun) clearFinished(ctx context.Context) error {
	api := r.k.api()
	old, err := api.getJob(ctx, r.name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, done := finished(old); !done && !ptr.Deref(old.Spec.Suspend, false) && !r.succeeded(ctx, old) {
		return fmt.Errorf("%w: Kubernetes Job %s/%s is still active", ErrRunning, r.k.Namespace, r.name)
	}
	// A suspended Job never started: its run stopped before its Secret
	// was made.
	r.logger.Info("deleting the finished Job of an earlier run")
	if err := r.delete(ctx); err != nil {
		return err
	}
	// The name is taken until the Job is gone.
	for {
		_, err := api.getJob(ctx, r.name)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.k.poll() / 4):
		}
	}
}

// create creates the manifest's ConfigMap, then the Job, then makes the
// Job the ConfigMap's owner. With RunEnv's environment the Job is created
// suspended, its Secret is created owned by it, and only then is the Job
// started: no pod runs before its Secret exists.
func (r *kubeRun) create(ctx context.Context) error {
	if r.env != nil {
		var suffix [4]byte
		_, _ = rand.Read(suffix[:])
		r.secret = r.name + "-env-" + hex.EncodeToString(suffix[:])
	}
	cm, job, err := r.k.objects(&r.job, r.name, r.staleLock, r.secret, r.granted, r.form)
	if err != nil {
		return err
	}
	suspend := r.env != nil || r.granted != nil
	if suspend {
		job.Spec.Suspend = ptr.To(true)
	}
	api := r.k.api()
	if err := api.createConfigMap(ctx, cm); apierrors.IsAlreadyExists(err) {
		if err := api.updateConfigMap(ctx, cm); err != nil {
			return fmt.Errorf("configmap %s: %w", r.name, err)
		}
	} else if err != nil {
		return fmt.Errorf("configmap %s: %w", r.name, err)
	}
	created, err := api.createJob(ctx, job)
	if err != nil {
		return fmt.Errorf("kubernetes job %s: %w", r.name, err)
	}
	r.obj = created
	owner := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: created.Name, UID: created.UID}
	if suspend {
		if err := r.start(ctx, created, owner); err != nil {
			if derr := r.delete(context.WithoutCancel(ctx)); derr != nil {
				r.logger.Warn("delete the job", "error", derr)
			}
			return err
		}
	}
	r.logger.Info("job started", "namespace", r.k.Namespace, "operation", r.job.Operation)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{owner}}})
	if err := api.mergePatchConfigMap(ctx, r.name, patch); err != nil {
		r.logger.Warn("configmap owner", "error", err)
	}
	return nil
}

// start creates what the suspended Job's pod needs before it runs, owned
// by the Job (the garbage collector deletes them with it), then lets the
// Job start: a plugin job's NetworkPolicy, and RunEnv's Secret.
func (r *kubeRun) start(ctx context.Context, created *batchv1.Job, owner metav1.OwnerReference) error {
	api := r.k.api()
	if r.granted != nil {
		// Named afresh for every run, as the Secret: one of an earlier
		// run of the job may wait for the collector still.
		var suffix [4]byte
		_, _ = rand.Read(suffix[:])
		np := r.k.networkPolicy(r.name+"-net-"+hex.EncodeToString(suffix[:]), created, owner, r.granted)
		if err := api.createNetworkPolicy(ctx, np); err != nil {
			return fmt.Errorf("networkpolicy %s: %w", np.Name, err)
		}
	}
	if r.env != nil {
		if err := r.createEnvSecret(ctx, created, owner); err != nil {
			return err
		}
	}
	if err := api.mergePatchJob(ctx, r.name, []byte(`{"spec":{"suspend":false}}`)); err != nil {
		return fmt.Errorf("start kubernetes job %s: %w", r.name, err)
	}
	return nil
}

// createEnvSecret creates the job's Secret, holding RunEnv's environment.
// The Secret is immutable, and named afresh for every run: one of an
// earlier run of the job may wait for the collector still.
func (r *kubeRun) createEnvSecret(ctx context.Context, created *batchv1.Job, owner metav1.OwnerReference) error {
	api := r.k.api()
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: r.secret, Namespace: r.k.Namespace,
			Labels: created.Labels, Annotations: map[string]string{AnnotationJobID: r.job.ID},
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Type:      corev1.SecretTypeOpaque,
		Immutable: ptr.To(true),
		Data:      r.env,
	}
	if err := api.createSecret(ctx, sec); err != nil {
		return fmt.Errorf("secret %s: %w", sec.Name, err)
	}
	names := make([]string, 0, len(r.env))
	for k := range r.env {
		names = append(names, k)
	}
	slices.Sort(names)
	r.logger.Info("job environment in its secret", "secret", r.secret, "variables", names)
	return nil
}

// objects returns the ConfigMap and the Job that run job; a secret names
// the job's own Secret (RunEnv's), whose keys become its container's
// environment. granted, for a job of a vendor's plugin, narrows its pod
// to what the plugin is granted.
func (k *Kube) objects(job *schemas.Job, name, staleLock, secret string, granted *schemas.PluginCapabilities, form *stagedForm) (*corev1.ConfigMap, *batchv1.Job, error) {
	pod := *job
	pod.ResultFile = PodResultFile
	manifest, err := json.MarshalIndent(&pod, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	labels := map[string]string{
		LabelJob:       idHash(job.ID),
		LabelInstall:   labelValue(job.Install),
		LabelComponent: labelValue(job.Component),
		labelManagedBy: "nuon",
	}
	meta := metav1.ObjectMeta{
		Name:        name,
		Namespace:   k.Namespace,
		Labels:      labels,
		Annotations: map[string]string{AnnotationJobID: job.ID},
	}
	cm := &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{ManifestFile: string(manifest) + "\n"}}

	timeout, _ := time.ParseDuration(job.Timeout)
	deadline := int64(math.Ceil((timeout + k.timeoutMargin()).Seconds()))
	mounts := []corev1.VolumeMount{
		{Name: "manifest", MountPath: PodManifestDir, ReadOnly: true},
		{Name: "result", MountPath: PodResultDir},
	}
	volumes := []corev1.Volume{
		{Name: "manifest", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: name},
		}}},
		{Name: "result", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	mounts = append(mounts, corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"})
	if !covered(job.StateDir, k.VolumeMounts) {
		volumes = append(volumes, corev1.Volume{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "state", MountPath: job.StateDir})
	}
	volumes = append(volumes, k.Volumes...)
	mounts = append(mounts, k.VolumeMounts...)
	// The job's container fetches its artifacts: the registry's pull
	// settings (a vendor's plugin's pod, which fetches nothing, drops
	// them).
	volumes = append(volumes, k.RegistryVolumes...)
	mounts = append(mounts, k.RegistryMounts...)
	var envFrom []corev1.EnvFromSource
	if k.SecretName != "" {
		envFrom = append(envFrom, corev1.EnvFromSource{
			Prefix:    redact.EnvPrefix,
			SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: k.SecretName}, Optional: ptr.To(true)},
		})
	}
	if secret != "" {
		envFrom = append(envFrom, corev1.EnvFromSource{
			SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: secret}},
		})
	}
	podMeta := metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{AnnotationJobID: job.ID}}
	kj := &batchv1.Job{
		ObjectMeta: meta,
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To[int32](0),
			ActiveDeadlineSeconds:   ptr.To(deadline),
			TTLSecondsAfterFinished: ptr.To(int32(k.ttl().Seconds())),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: podMeta,
				Spec: corev1.PodSpec{
					RestartPolicy:      corev1.RestartPolicyNever,
					ServiceAccountName: k.serviceAccount(),
					ImagePullSecrets:   slices.Clone(k.ImagePullSecrets),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:                     jobContainer,
						Image:                    k.Image,
						Command:                  append(append([]string{}, k.command()...), podManifestFile),
						Env:                      append(append(append([]corev1.EnvVar{}, k.Env...), k.RegistryEnv...), k.stateEnv(job, staleLock)...),
						EnvFrom:                  envFrom,
						VolumeMounts:             mounts,
						Resources:                k.Resources,
						TerminationMessagePath:   jobrun.TerminationMessagePath,
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
					Volumes: volumes,
				},
			},
		},
	}
	switch {
	case granted != nil && form == nil:
		return nil, nil, fmt.Errorf("plugin %s: nothing staged for its pod", job.Plugin)
	case granted != nil && form.image != nil:
		k.imagePod(&kj.Spec.Template.Spec, job, granted, form, secret)
	case granted != nil:
		k.pluginPod(&kj.Spec.Template.Spec, job, granted, form)
	}
	return cm, kj, nil
}

// finished reports whether the Job ended, and whether it succeeded.
func finished(j *batchv1.Job) (succeeded, done bool) {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, true
		case batchv1.JobFailed:
			return false, true
		}
	}
	return false, false
}

// failure is the reason and message of a failed Job.
func failure(j *batchv1.Job) (reason, message string) {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return c.Reason, c.Message
		}
	}
	return "", ""
}

// wait polls the Job until it finished or its pod's job container
// succeeded (succeeded), ctx ended, or it overran its deadline by a margin
// Kubernetes should have enforced itself; in the last two cases it
// deletes the Job.
func (r *kubeRun) wait(ctx context.Context) {
	start := time.Now()
	if r.obj != nil && !r.obj.CreationTimestamp.IsZero() {
		start = r.obj.CreationTimestamp.Time
	}
	deadline := time.NewTimer(time.Until(start.Add(r.timeout + 2*r.k.timeoutMargin())))
	defer deadline.Stop()
	tick := time.NewTicker(r.k.poll())
	defer tick.Stop()
	api := r.k.api()
	var failures int
	for {
		j, err := api.getJob(ctx, r.name)
		switch {
		case err == nil:
			r.obj, failures = j, 0
			if _, done := finished(j); done || r.succeeded(ctx, j) {
				return
			}
		case apierrors.IsNotFound(err):
			r.waitErr = fmt.Errorf("kubernetes job %s/%s disappeared before it finished", r.k.Namespace, r.name)
			return
		case ctx.Err() == nil:
			failures++
			r.logger.Warn("read the job", "error", err)
			if failures >= 10 {
				r.waitErr = err
				return
			}
		}
		select {
		case <-tick.C:
			continue
		case <-ctx.Done():
			r.cause = ctx.Err()
		case <-deadline.C:
			r.cause, r.timedOut = context.DeadlineExceeded, true
		}
		if r.keepOnCancel && !r.timedOut {
			return
		}
		r.logger.Info("stopping job", "reason", r.cause)
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if err := r.delete(stopCtx); err != nil {
			r.logger.Warn("delete the job", "error", err)
		}
		cancel()
		return
	}
}

// succeeded reports whether a pod of the Job j (owned by it: a pod of an
// earlier Job of the same name may linger) has its job container ended
// with exit 0. The Job's outcome is then final (backoffLimit 0,
// restartPolicy Never) and its result written, though the Job controller
// may take another second or two to mark it complete: the runner
// collects it without waiting for that. A failure is left to the Job's
// conditions, which say why (its deadline, say).
func (r *kubeRun) succeeded(ctx context.Context, j *batchv1.Job) bool {
	pods, err := r.k.api().listPods(ctx, labelJobName+"="+j.Name)
	if err != nil {
		return false
	}
	for _, p := range pods.Items {
		if !slices.ContainsFunc(p.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == j.UID }) {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == jobContainer && cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0 {
				return true
			}
		}
	}
	return false
}

// delete deletes the Job, its pods and its ConfigMap.
func (r *kubeRun) delete(ctx context.Context) error {
	api := r.k.api()
	err := api.deleteJob(ctx, r.name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	err = api.deleteConfigMap(ctx, r.name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// outcome collects the pod's log and result into dir and turns how the
// Job ended into Run's result and error.
func (r *kubeRun) outcome(ctx context.Context) (*schemas.JobResult, error) {
	id := r.job.ID
	collectCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	res, log, err := r.collect(collectCtx)
	if err == nil && res != nil {
		if res.Job != id {
			res, err = nil, fmt.Errorf("result is for job %q", res.Job)
		} else if werr := atomicfile.WriteJSON(r.job.ResultFile, res); werr != nil {
			err = fmt.Errorf("write result: %w", werr)
		}
	}
	tail := ""
	if log != "" {
		tail = "; last lines of the log:\n" + lastLines(log, tailLines)
	}
	var reason, message string
	if r.obj != nil {
		reason, message = failure(r.obj)
	}
	switch {
	case r.timedOut || reason == batchv1.JobReasonDeadlineExceeded:
		return res, fmt.Errorf("job %s: %w: timed out after %s: %w", id, ErrJobFailed, r.timeout, context.DeadlineExceeded)
	case r.cause != nil:
		return res, fmt.Errorf("job %s: stopped: %w", id, r.cause)
	case r.waitErr != nil:
		return res, fmt.Errorf("job %s: %w", id, r.waitErr)
	case err != nil:
		return nil, fmt.Errorf("job %s: %w: %w", id, ErrJobFailed, err)
	case res != nil && res.Error != "":
		return res, fmt.Errorf("job %s: %w: %s", id, ErrJobFailed, res.Error)
	case reason != "":
		return res, fmt.Errorf("job %s: %w: kubernetes job failed (%s: %s)%s", id, ErrJobFailed, reason, message, tail)
	case res == nil:
		return nil, fmt.Errorf("job %s: %w: exited without a result%s", id, ErrJobFailed, tail)
	}
	r.logger.Info("job succeeded", "changed", res.Changed)
	return res, nil
}

// collect reads the newest pod of the Job: its log, appended to dir/log
// (and Kube.Log), and its result, from the termination message or the
// last result line of the log.
func (r *kubeRun) collect(ctx context.Context) (*schemas.JobResult, string, error) {
	api := r.k.api()
	pods, err := api.listPods(ctx, labelJobName+"="+r.name)
	if err == nil && len(pods.Items) == 0 {
		pods, err = api.listPods(ctx, labelJobNameOlder+"="+r.name)
	}
	if err != nil {
		return nil, "", fmt.Errorf("list the job's pods: %w", err)
	}
	var pod *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if pod == nil || p.CreationTimestamp.After(pod.CreationTimestamp.Time) {
			pod = p
		}
	}
	var log, note string
	if pod == nil {
		note = "no pod"
	} else {
		b, err := api.podLog(ctx, pod.Name, jobContainer, maxLogBytes)
		if err != nil {
			note = "log unavailable: " + err.Error()
		} else {
			log = string(b)
		}
	}
	r.appendLog(pod, log, note)

	var res *schemas.JobResult
	if pod != nil {
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == jobContainer && cs.State.Terminated != nil {
				res = parseResult(cs.State.Terminated.Message)
			}
		}
	}
	if res == nil {
		res = lastResultLine(log)
	}
	return res, log, nil
}

// appendLog appends the pod's log to dir/log, after a header line as
// Local writes, and copies it to Kube.Log.
func (r *kubeRun) appendLog(pod *corev1.Pod, log, note string) {
	f, err := os.OpenFile(filepath.Join(r.dir, LogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		r.logger.Warn("job log", "error", err)
		return
	}
	defer f.Close()
	where := "kubernetes job " + r.k.Namespace + "/" + r.name
	if pod != nil {
		where += ", pod " + pod.Name
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "==> %s job %s: %s %s (%s) in %s\n",
		time.Now().UTC().Format(time.RFC3339), r.job.ID, r.job.Operation, r.job.Component, r.job.Plugin, where)
	if note != "" {
		fmt.Fprintf(&b, "(%s)\n", note)
	}
	b.WriteString(log)
	if log != "" && !strings.HasSuffix(log, "\n") {
		b.WriteByte('\n')
	}
	if _, err := f.Write(b.Bytes()); err != nil {
		r.logger.Warn("job log", "error", err)
	}
	if r.k.Log != nil {
		r.k.Log.Write(b.Bytes())
	}
}

// parseResult reads a JobResult from JSON, or returns nil.
func parseResult(s string) *schemas.JobResult {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "{") {
		return nil
	}
	var res schemas.JobResult
	if err := json.Unmarshal([]byte(s), &res); err != nil || res.Kind != schemas.KindJobResult {
		return nil
	}
	return &res
}

// lastResultLine finds the last result line in a job's log.
func lastResultLine(log string) *schemas.JobResult {
	var res *schemas.JobResult
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 64<<10), maxLogBytes)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), jobrun.ResultLinePrefix); ok {
			if r := parseResult(line); r != nil {
				res = r
			}
		}
	}
	return res
}

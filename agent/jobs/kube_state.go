package jobs

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"nuon.dev/nuon/internal/tfstate"
	"nuon.dev/nuon/schemas"
)

// DefaultStateNamespace holds the terraform state of the Kubernetes
// runner's jobs (manifests/ creates it): a namespace of its own, so that
// the jobs' service account may read and write Secrets there without
// seeing any other Secret of the install.
const DefaultStateNamespace = "nuon-state"

func (k *Kube) stateNamespace() string {
	if k.StateNamespace != "" {
		return k.StateNamespace
	}
	return DefaultStateNamespace
}

// stateEnv is the environment that sends a terraform job's state to
// Terraform's kubernetes backend (reconciler/terraform), with the lock
// the agent found held by a dead job, if any.
func (k *Kube) stateEnv(job *schemas.Job, staleLock string) []corev1.EnvVar {
	if job.Plugin != schemas.TypeTerraform {
		return nil
	}
	env := []corev1.EnvVar{
		{Name: tfstate.EnvStateNamespace, Value: k.stateNamespace()},
		{Name: tfstate.EnvStateSecretSuffix, Value: tfstate.StateSecretSuffix(job.Install, job.Component)},
	}
	if staleLock != "" {
		env = append(env, corev1.EnvVar{Name: tfstate.EnvStaleLock, Value: staleLock})
	}
	return env
}

// checkStateLock looks, before a terraform job starts, at the lock of its
// component's state (the kubernetes backend's Lease). A lock is left by a
// job that was killed before terraform could release it. While another
// job of the component is alive (its Kubernetes Job not finished, or one
// of its pods neither succeeded nor failed), the lock may be its own: the
// runner waits for that job to end, and never breaks its lock. Once every
// job of the component is dead (its Job finished, failed or gone, its pods
// terminated or gone), a lock still there is a dead job's: its ID goes to
// the new job (tfstate.EnvStaleLock), which breaks that lock, and only
// that one, with `terraform force-unlock`.
func (r *kubeRun) checkStateLock(ctx context.Context) error {
	if r.job.Plugin != schemas.TypeTerraform {
		return nil
	}
	api := r.k.api()
	lease := tfstate.StateLeaseName(tfstate.StateSecretSuffix(r.job.Install, r.job.Component))
	ns := r.k.stateNamespace()
	waited := false
	for {
		l, err := api.getLease(ctx, ns, lease)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if apierrors.IsForbidden(err) {
			// An agent whose Role predates the state locks: the job
			// still waits for any lock, it just breaks none.
			r.logger.Warn("cannot read the state lock; a dead job's lock will not be broken", "namespace", ns, "lease", lease, "error", err)
			return nil
		}
		if err != nil {
			return fmt.Errorf("state lock %s/%s: %w", ns, lease, err)
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return nil
		}
		lock, err := tfstate.ParseLeaseLock(l.Annotations[tfstate.LeaseLockAnnotation])
		if err != nil {
			lock = tfstate.LockInfo{ID: *l.Spec.HolderIdentity}
		}
		alive, err := r.liveJobs(ctx)
		if err != nil {
			return fmt.Errorf("state lock %s/%s: %w", ns, lease, err)
		}
		if len(alive) == 0 {
			r.staleLock = lock.ID
			r.logger.Warn("the component's state is locked by a job that is no longer running; the job will break the lock",
				"lock", lock.ID, "who", lock.Who, "operation", lock.Operation, "created", lock.Created)
			return nil
		}
		if !waited {
			r.logger.Info("the component's state is locked and another of its jobs is running; waiting for it",
				"lock", lock.ID, "running", alive)
			waited = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("state locked (%s) by a running job of the component (%v): %w", lock, alive, ctx.Err())
		case <-time.After(r.k.poll()):
		}
	}
}

// liveJobs names the Kubernetes Jobs and pods of the job's component that
// are not known dead.
func (r *kubeRun) liveJobs(ctx context.Context) ([]string, error) {
	api := r.k.api()
	selector := LabelInstall + "=" + labelValue(r.job.Install) + "," + LabelComponent + "=" + labelValue(r.job.Component)
	jobs, err := api.listJobs(ctx, selector)
	if err != nil {
		return nil, err
	}
	var alive []string
	for i := range jobs.Items {
		if !jobDead(&jobs.Items[i]) {
			alive = append(alive, "job/"+jobs.Items[i].Name)
		}
	}
	pods, err := api.listPods(ctx, selector)
	if err != nil {
		return nil, err
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			alive = append(alive, "pod/"+p.Name)
		}
	}
	return alive, nil
}

// jobDead reports whether a Job can run nothing any more: it finished
// (complete or failed) and has no active pod.
func jobDead(j *batchv1.Job) bool {
	_, done := finished(j)
	return done && j.Status.Active == 0
}

package jobs

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"nuon.dev/nuon/plugin"
	"nuon.dev/nuon/schemas"
)

// PluginAdmission checks a job of a vendor's plugin before any object of
// it is created, and returns the plugin's artifact, verified, and what
// its plugin is granted (its signed manifest's needs, within job.Grants):
// plugin.Admit, with the install registry's client and the vendor's key.
type PluginAdmission func(ctx context.Context, job *schemas.Job) (*plugin.Artifact, schemas.PluginCapabilities, error)

// admitPlugin asks Kube.AdmitPlugin (or Kube.AdmitPluginImage, for a job
// that pins the plugin's image) about a job of a vendor's plugin and
// keeps what the plugin is granted; a refusal fails the job before
// anything of it exists in the cluster.
func (r *kubeRun) admitPlugin(ctx context.Context) error {
	if r.job.Grants == nil {
		return nil
	}
	k := r.k
	if k.AdmitPlugin == nil {
		return fmt.Errorf("%w: plugin %s: the kubernetes runner has no vendor key to admit a vendor's plugin with (Kube.AdmitPlugin: nuon agent --vendor-key)", ErrJobFailed, r.job.Plugin)
	}
	var granted schemas.PluginCapabilities
	var err error
	if k.AdmitPluginImage != nil && plugin.PinsImage(&r.job) {
		r.image, granted, err = k.AdmitPluginImage(ctx, &r.job)
	} else {
		r.artifact, granted, err = k.AdmitPlugin(ctx, &r.job)
	}
	if err != nil {
		r.logger.Warn("plugin refused: no object created", "error", err)
		return fmt.Errorf("%w: %w", ErrJobFailed, err)
	}
	r.granted = &granted
	if r.env != nil && !granted.CloudRole {
		// The cloud role's credentials are for plugins granted it.
		r.logger.Info("cloud credentials withheld: the plugin is not granted cloudRole")
		r.env = nil
	}
	form := "process"
	if r.image != nil {
		form = "image " + r.image.Ref.String()
	}
	r.logger.Info("plugin admitted", "form", form, "network", granted.Network, "secrets", granted.Secrets,
		"cloud_role", granted.CloudRole, "writable_state", granted.WritableState, "env", granted.Env)
	return nil
}

// networkPolicy is the NetworkPolicy named name of a plugin job's pod,
// created owned by the Job: it selects the Job's pods by the Job's own
// selector (its UID), lets nothing in, and lets out everything with the
// network granted, nothing at all without it, not even a DNS query: no
// container of the pod reaches the registry or anything else for nuon's
// sake, as the agent staged what the job reads.
func (k *Kube) networkPolicy(name string, created *batchv1.Job, owner metav1.OwnerReference, granted *schemas.PluginCapabilities) *networkingv1.NetworkPolicy {
	sel := metav1.LabelSelector{MatchLabels: map[string]string{LabelJob: created.Labels[LabelJob]}}
	if created.Spec.Selector != nil {
		sel = *created.Spec.Selector.DeepCopy()
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: k.Namespace,
			Labels: created.Labels, Annotations: map[string]string{AnnotationJobID: created.Annotations[AnnotationJobID]},
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: sel,
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{},
			Egress:      []networkingv1.NetworkPolicyEgressRule{},
		},
	}
	if granted.Network {
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{}}
	}
	return np
}

// pluginPod narrows the pod of a job of a vendor's plugin in the process
// form to what the plugin is granted: no service account token (the job
// reaches no API server), no registry credential (it reads the plugin
// and its artifacts from the staged directory, form's mount, read-only),
// the job's secrets only with secrets, the state volume only with
// writableState and then only the component's own directory; the command
// runs the plugin staged and leaves the network to the pod's
// NetworkPolicy (a restricted pod may not make the network namespace the
// process runner gives a plugin).
func (k *Kube) pluginPod(spec *corev1.PodSpec, job *schemas.Job, granted *schemas.PluginCapabilities, form *stagedForm) {
	spec.AutomountServiceAccountToken = ptr.To(false)
	// Nor the cluster's Services' addresses in its environment.
	spec.EnableServiceLinks = ptr.To(false)
	c := &spec.Containers[0]
	if !granted.Secrets {
		c.EnvFrom = slices.DeleteFunc(c.EnvFrom, func(e corev1.EnvFromSource) bool {
			return e.SecretRef != nil && e.SecretRef.Name == k.SecretName
		})
	}
	// Nothing of the registry: the job pulls nothing.
	c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool {
		return slices.ContainsFunc(k.RegistryEnv, func(r corev1.EnvVar) bool { return r.Name == e.Name })
	})
	// Only the volumes of the job itself: none of Kube.Volumes (the
	// agent's workdir, other components' state) but, with writableState,
	// the component's own state directory in it, and the staged
	// directory alone.
	drop := slices.Concat(k.Volumes, k.RegistryVolumes)
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool {
		return slices.ContainsFunc(drop, func(kv corev1.Volume) bool { return kv.Name == v.Name })
	})
	dropMounts := slices.Concat(k.VolumeMounts, k.RegistryMounts)
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return slices.ContainsFunc(dropMounts, func(km corev1.VolumeMount) bool { return km.Name == m.Name && km.MountPath == m.MountPath })
	})
	spec.Volumes = append(spec.Volumes, form.volume)
	c.VolumeMounts = append(c.VolumeMounts, form.in)
	if mount, ok := stateMount(job.StateDir, k.VolumeMounts); ok && granted.WritableState {
		// The staged directory's volume holds the state too.
		if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name }) {
			i := slices.IndexFunc(k.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
			if i >= 0 {
				spec.Volumes = append(spec.Volumes, k.Volumes[i])
			}
		}
		if slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name }) {
			c.VolumeMounts = append(c.VolumeMounts, mount)
		}
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return path.Clean(m.MountPath) == path.Clean(job.StateDir) }) {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "state", MountPath: job.StateDir})
	}
	c.Command = append(k.pluginCommand(), "--plugin-staged", PodPluginIn, "--plugin-shared-network", podManifestFile)
}

// stateMount is the mount of the directory dir alone, through the one of
// mounts that holds it (a subPath of its volume).
func stateMount(dir string, mounts []corev1.VolumeMount) (corev1.VolumeMount, bool) {
	dir = path.Clean(dir)
	for _, m := range mounts {
		mp := path.Clean(m.MountPath)
		if dir != mp && !strings.HasPrefix(dir, mp+"/") {
			continue
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(dir, mp), "/")
		return corev1.VolumeMount{Name: m.Name, MountPath: dir, SubPath: path.Join(m.SubPath, rel)}, true
	}
	return corev1.VolumeMount{}, false
}

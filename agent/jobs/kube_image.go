package jobs

import (
	"context"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"nuon.dev/nuon/jobrun"
	"nuon.dev/nuon/plugin"
	"nuon.dev/nuon/schemas"
)

// A job of a vendor's plugin whose release has a container image
// (schemas.PluginImageArtifactName) runs, with Kube.AdmitPluginImage set,
// in the image form: the plugin's image runs as a container of its own,
// on the request the agent staged (kube_stage.go); nuon's image copies
// the executor before it and reads its answer after it, in containers the
// plugin never shares.
const (
	// PodPluginIn is where the pod of a vendor's plugin's job mounts
	// the run's staged directory, read-only: the job's artifacts, and the
	// plugin's request (the image form) or its artifact (the process
	// form).
	PodPluginIn = "/nuon/plugin/in"
	// PodPluginOut holds the plugin's response, stderr and exit, written
	// by the executor in the plugin's container.
	PodPluginOut = "/nuon/plugin/out"
	// PodPluginBin holds the executor, read-only to the plugin's
	// container.
	PodPluginBin = "/nuon/plugin/bin"
	// PodPluginState is the plugin's state directory in its container:
	// the component's own with writableState, an empty one otherwise.
	PodPluginState = "/nuon/plugin/state"
	// podPluginWork is the plugin's scratch directory.
	podPluginWork = "/tmp"
	// The image form's containers.
	executorContainer = "executor"
	pluginContainer   = "plugin"
	// PluginUser is the user and group the plugin's container runs as.
	PluginUser = 65532
)

// PluginContainerPaths are the paths the plugin's container sees.
var PluginContainerPaths = plugin.ContainerPaths{In: PodPluginIn, State: PodPluginState, Work: podPluginWork}

// PluginImageAdmission checks a job of a vendor's plugin that pins the
// plugin's container image before any object of it is created, and
// returns the image and what its plugin is granted: plugin.AdmitImage,
// with the install registry's client and the vendor's key.
type PluginImageAdmission func(ctx context.Context, job *schemas.Job) (*plugin.Image, schemas.PluginCapabilities, error)

// executor is the path of the executor in Kube.Image: beside nuon
// (Kube.Command's first word), or on PATH as nuon is.
func (k *Kube) executor() string {
	nuon := k.command()[0]
	if !strings.Contains(nuon, "/") {
		return jobrun.ExecutorName
	}
	return path.Join(path.Dir(nuon), jobrun.ExecutorName)
}

// imagePod makes spec, the pod of a job of a vendor's plugin, the image
// form's (see Kube, "Plugin images"): the init container executor (nuon's
// image, nothing mounted but the volume it copies into) copies the
// executor, the init container plugin (the plugin's image, by its digest
// in the install registry) runs the executor on the staged request with
// only what the plugin is granted, and the job's container reads the
// plugin's answer last.
func (k *Kube) imagePod(spec *corev1.PodSpec, job *schemas.Job, granted *schemas.PluginCapabilities, form *stagedForm, secret string) {
	img := form.image
	spec.AutomountServiceAccountToken = ptr.To(false)
	spec.EnableServiceLinks = ptr.To(false)
	job0 := spec.Containers[0]
	restricted := func() *corev1.SecurityContext {
		return &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		}
	}
	emptyDir := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	}
	spec.Volumes = []corev1.Volume{
		spec.Volumes[0], // the manifest's ConfigMap
		emptyDir("result"), emptyDir("tmp"), emptyDir("job-state"),
		emptyDir("plugin-out"), emptyDir("plugin-bin"), emptyDir("plugin-tmp"),
		form.volume, // the staged directory's, mounted by subPath
	}
	manifest := corev1.VolumeMount{Name: "manifest", MountPath: PodManifestDir, ReadOnly: true}
	tmp := corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"}

	// The plugin's state: the component's own directory alone with
	// writableState, an empty one otherwise.
	state := corev1.VolumeMount{Name: "plugin-state", MountPath: PodPluginState}
	if mount, ok := stateMount(job.StateDir, k.VolumeMounts); ok && granted.WritableState {
		i := slices.IndexFunc(k.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
		if i >= 0 {
			if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name }) {
				spec.Volumes = append(spec.Volumes, k.Volumes[i])
			}
			state = corev1.VolumeMount{Name: mount.Name, MountPath: PodPluginState, SubPath: mount.SubPath}
		}
	}
	if state.Name == "plugin-state" {
		spec.Volumes = append(spec.Volumes, emptyDir("plugin-state"))
	}

	// What the plugin is granted, and only that: the variables its grant
	// names (from Kube.Env), the install's secrets, the cloud role's
	// credentials.
	var environ []string
	for _, e := range k.Env {
		if e.ValueFrom == nil {
			environ = append(environ, e.Name+"="+e.Value)
		}
	}
	var env []corev1.EnvVar
	for _, kv := range plugin.Environ(environ, *granted, podPluginWork) {
		name, value, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: name, Value: value})
	}
	var envFrom []corev1.EnvFromSource
	for _, ef := range job0.EnvFrom {
		if ef.SecretRef == nil {
			continue
		}
		if (ef.SecretRef.Name == k.SecretName && granted.Secrets) || (ef.SecretRef.Name == secret && secret != "" && granted.CloudRole) {
			envFrom = append(envFrom, ef)
		}
	}
	argv := []string{PodPluginBin + "/" + jobrun.ExecutorName, "--in", PodPluginIn, "--out", PodPluginOut}
	if job.Timeout != "" {
		argv = append(argv, "--timeout", job.Timeout)
	}
	argv = append(append(argv, "--"), img.Entrypoint...)
	spec.InitContainers = []corev1.Container{{
		Name:                     executorContainer,
		Image:                    k.Image,
		Command:                  []string{k.executor(), "--copy-to", PodPluginBin},
		VolumeMounts:             []corev1.VolumeMount{{Name: "plugin-bin", MountPath: PodPluginBin}},
		Resources:                k.Resources,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext:          restricted(),
	}, {
		Name:            pluginContainer,
		Image:           img.Ref.String(),
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         argv,
		Env:             env,
		EnvFrom:         envFrom,
		VolumeMounts: []corev1.VolumeMount{
			form.in,
			{Name: "plugin-out", MountPath: PodPluginOut},
			{Name: "plugin-bin", MountPath: PodPluginBin, ReadOnly: true},
			{Name: "plugin-tmp", MountPath: podPluginWork},
			state,
		},
		Resources:                k.Resources,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: func() *corev1.SecurityContext {
			sc := restricted()
			sc.RunAsUser, sc.RunAsGroup, sc.RunAsNonRoot = ptr.To[int64](PluginUser), ptr.To[int64](PluginUser), ptr.To(true)
			return sc
		}(),
	}}

	// The job's container reads the answer and writes the result: the
	// install's secrets and the cloud role's credentials only when the
	// plugin has them (to redact them from what it answers).
	c := &spec.Containers[0]
	c.Command = append(k.pluginCommand(), "--plugin-exchange-in", PodPluginIn, "--plugin-exchange-out", PodPluginOut, podManifestFile)
	c.Env = nil
	c.EnvFrom = envFrom
	c.VolumeMounts = []corev1.VolumeMount{manifest, tmp,
		{Name: "result", MountPath: PodResultDir},
		{Name: "job-state", MountPath: job.StateDir},
		form.in,
		{Name: "plugin-out", MountPath: PodPluginOut, ReadOnly: true},
	}
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/plugin"
	"nuon.dev/nuon/schemas"
)

// kubeJobOptions are the agent's flags for the install's cluster: the
// kubeconfig its jobs use, and the Kubernetes Job runner.
type kubeJobOptions struct {
	kubeconfig     string
	mode           string
	image          string
	namespace      string
	serviceAccount string
	secret         string
	stateClaim     string
	stateNamespace string
	// A vendor's plugin's jobs: the image form.
	pluginImage bool
	// registrySecret holds pull-only credentials for the pods;
	// pullSecret is the pods' imagePullSecrets.
	registrySecret string
	pullSecret     []string
	err            error
}

// podRegistryDir is where a job's fetching container mounts
// --job-registry-secret.
const podRegistryDir = "/nuon/registry"

func (k *kubeJobOptions) flags(f *pflag.FlagSet) {
	f.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig of the install's cluster, for the helm and manifests jobs and the kube runner (default: KUBECONFIG, ~/.kube/config, in-cluster)")
	f.StringVar(&k.mode, "job-runner", "local", "run jobs as child processes (local) or as Kubernetes Jobs (kube)")
	f.StringVar(&k.image, "job-image", "", "with --job-runner kube: the image that runs nuon jobs (required)")
	f.StringVar(&k.namespace, "job-namespace", "nuon-system", "with --job-runner kube: namespace of the Jobs")
	f.StringVar(&k.serviceAccount, "job-service-account", jobs.DefaultJobServiceAccount, "with --job-runner kube: service account of the Jobs")
	f.StringVar(&k.secret, "job-secret", "", "with --job-runner kube: Secret whose keys become the jobs' NUON_SECRET_<KEY> variables")
	f.StringVar(&k.stateClaim, "job-state-claim", "", "with --job-runner kube: PersistentVolumeClaim mounted at --workdir in the Jobs, for component state")
	f.BoolVar(&k.pluginImage, "job-plugin-image", true, "with --job-runner kube and --vendor-key: run a vendor's plugin whose release has a container image as a container of its own, holding only what it is granted (false: as a process of --job-image, as a plugin released without an image runs); either way the agent stages what the job reads on --job-state-claim, which a vendor's plugin's job needs, and its pod is let out nowhere without the network granted")
	f.StringVar(&k.registrySecret, "job-registry-secret", "", "with --job-runner kube: a Secret in --job-namespace holding PULL-ONLY credentials for the install registry, key password (the password of --registry-username) and, with --registry-ca, key ca.crt; the container of a built-in plugin's job, which fetches its artifacts, mounts it at "+podRegistryDir+" (a vendor's plugin's pod never does: the agent stages what it reads). Without it a job's pod has no registry password and no --registry-ca file (paths of the agent's machine are not passed)")
	f.StringArrayVar(&k.pullSecret, "job-image-pull-secret", nil, "with --job-runner kube: a Secret of type kubernetes.io/dockerconfigjson in --job-namespace the kubelet pulls the jobs' images with, --job-image and a vendor's plugin's image (repeatable); no container sees it")
	f.StringVar(&k.stateNamespace, "job-state-namespace", jobs.DefaultStateNamespace, "with --job-runner kube: namespace of the terraform components' state (a Secret and a lock Lease each, Terraform's kubernetes backend)")
}

// jobArgs adds --kubeconfig to a local job's command line.
func (k *kubeJobOptions) jobArgs(argv []string) []string {
	if k.kubeconfig != "" {
		argv = append(argv, "--kubeconfig", k.kubeconfig)
	}
	return argv
}

// runner returns local, or the Kubernetes Job runner with --job-runner
// kube, whose pods run `nuon job run --pod` with local's flags but
// --kubeconfig (a pod uses its service account). A configuration error is
// left in k.err.
//
// With the agent's --vendor-key, a vendor's plugin's job is admitted
// (plugin.Admit, through the install registry) before any object of it
// is created, and the agent stages what it reads (the plugin's artifact,
// verified, and the job's artifacts) for its pod, which reads no
// registry.
func (k *kubeJobOptions) runner(local *jobs.Local, s *syncOptions, workdir string, log *slog.Logger) jobs.Runner {
	switch k.mode {
	case "local", "":
		return local
	case "kube":
	default:
		k.err = fmt.Errorf("--job-runner must be local or kube, not %q", k.mode)
		return local
	}
	if k.image == "" {
		k.err = errors.New("--job-runner kube needs --job-image")
		return local
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		k.err = fmt.Errorf("kubeconfig: %w", err)
		return local
	}
	client, err := jobs.NewKubeClient(cfg)
	if err != nil {
		k.err = err
		return local
	}
	r := &jobs.Kube{
		Client:         client,
		Namespace:      k.namespace,
		Image:          k.image,
		Command:        podCommand(local.Command, k.registrySecret != "" && s.registry.caFile != ""),
		PluginCommand:  withoutRegistry(podCommand(local.Command, false)),
		ServiceAccount: k.serviceAccount,
		SecretName:     k.secret,
		StateNamespace: k.stateNamespace,
		Logger:         log,
	}
	if s.vendorKey != "" {
		if err := pluginAdmission(r, s, k.pluginImage); err != nil {
			k.err = err
			return local
		}
	}
	if k.registrySecret != "" {
		r.RegistryVolumes = []corev1.Volume{{Name: "nuon-registry", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: k.registrySecret}}}}
		r.RegistryMounts = []corev1.VolumeMount{{Name: "nuon-registry", MountPath: podRegistryDir, ReadOnly: true}}
		r.RegistryEnv = []corev1.EnvVar{{Name: registryPasswordEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: k.registrySecret}, Key: "password", Optional: ptr.To(true)}}}}
	}
	for _, ps := range k.pullSecret {
		r.ImagePullSecrets = append(r.ImagePullSecrets, corev1.LocalObjectReference{Name: ps})
	}
	if k.stateClaim != "" {
		r.Volumes = []corev1.Volume{{Name: "nuon-state", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: k.stateClaim},
		}}}
		r.VolumeMounts = []corev1.VolumeMount{{Name: "nuon-state", MountPath: workdir}}
	}
	return r
}

// podCommand is the argv of a job's pod: nuon, then local's arguments
// without --kubeconfig, --tf-cli-config, --plugin-key and --registry-ca
// (paths of the agent's machine; the pod has its service account and its
// image's terraform configuration, and with --job-registry-secret the
// registry's CA in that Secret, caFromSecret), then --pod.
func podCommand(local []string, caFromSecret bool) []string {
	argv := []string{"nuon"}
	for i := 1; i < len(local); i++ {
		if local[i] == "--kubeconfig" || local[i] == "--tf-cli-config" || local[i] == "--plugin-key" || local[i] == "--registry-ca" {
			i++
			continue
		}
		argv = append(argv, local[i])
	}
	if caFromSecret {
		argv = append(argv, "--registry-ca", podRegistryDir+"/ca.crt")
	}
	return append(argv, "--pod")
}

// withoutRegistry is argv without the registry's flags: the command of a
// vendor's plugin's pod, which reads no registry.
func withoutRegistry(argv []string) []string {
	var out []string
	for i := 0; i < len(argv); i++ {
		switch argv[i] {
		case "--registry", "--registry-username", "--registry-ca":
			i++
			continue
		case "--ecr":
			continue
		}
		out = append(out, argv[i])
	}
	return out
}

// pluginAdmission gives r the check of a plugin job before its objects
// are created, with the vendor key of --vendor-key, and where it stages
// the job's artifacts from.
func pluginAdmission(r *jobs.Kube, s *syncOptions, images bool) error {
	v, err := oci.LoadPublicKey(s.vendorKey)
	if err != nil {
		return fmt.Errorf("--vendor-key: %w", err)
	}
	c, _, err := s.registry.Client()
	if err != nil {
		return err
	}
	r.AdmitPlugin = func(ctx context.Context, job *schemas.Job) (*plugin.Artifact, schemas.PluginCapabilities, error) {
		return plugin.Admit(ctx, c, job, v)
	}
	if r.PluginArtifacts, err = s.registry.ArtifactSource(""); err != nil {
		return err
	}
	if images {
		r.AdmitPluginImage = func(ctx context.Context, job *schemas.Job) (*plugin.Image, schemas.PluginCapabilities, error) {
			return plugin.AdmitImage(ctx, c, job, v)
		}
	}
	return nil
}

package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nuon.dev/nuon/reconciler"
)

// Labels and annotations on the objects of a Kubernetes job.
const (
	LabelJob          = "nuon.dev/job"
	LabelInstall      = "nuon.dev/install"
	LabelComponent    = "nuon.dev/component"
	AnnotationJobID   = "nuon.dev/job-id"
	labelManagedBy    = "app.kubernetes.io/managed-by"
	labelJobName      = "batch.kubernetes.io/job-name"
	labelJobNameOlder = "job-name"
)

// Paths inside a job's pod.
const (
	PodManifestDir  = "/nuon/manifest"
	PodResultDir    = "/nuon/result"
	PodResultFile   = PodResultDir + "/" + ResultFile
	podManifestFile = PodManifestDir + "/" + ManifestFile
	// jobContainer is the name of the Job's one container.
	jobContainer = "job"
)

// Defaults of the Kube fields.
const (
	// DefaultJobServiceAccount runs the Jobs (manifests/ creates it).
	DefaultJobServiceAccount = "nuon-job"
	// DefaultKubePoll is how often the runner looks at a running Job.
	DefaultKubePoll = 2 * time.Second
	// DefaultJobTTL is how long a finished Job and its pod stay for
	// inspection before Kubernetes deletes them.
	DefaultJobTTL = time.Hour
	// maxLogBytes bounds the log read from a job's pod.
	maxLogBytes = 8 << 20
)

// Kube runs each job as a Kubernetes Job in the install's cluster.
// Client, Namespace and Image are required.
//
// # Objects
//
// For a job Kube.Run creates, in Kube.Namespace, two objects with the same
// name (KubeName: "nuon-" and the job id made a DNS label, with a hash of
// the id):
//
//   - a ConfigMap holding the manifest as manifest.json, its resultFile
//     rewritten to PodResultFile;
//   - a batch/v1 Job, backoffLimit 0 (the agent decides about retries),
//     activeDeadlineSeconds the job's timeout plus Kube.TimeoutMargin,
//     whose one container runs Kube.Command (`nuon job run --pod`) on
//     /nuon/manifest/manifest.json, mounted from the ConfigMap, as
//     Kube.ServiceAccount. The keys of Kube.SecretName become the
//     NUON_SECRET_<KEY> variables the plugins resolve ${secrets.KEY}
//     from.
//
// A job run with RunEnv (the sandbox's, with the maintenance role's
// temporary credentials) gets a third object: a Secret of its own, named
// afresh for every run, immutable, owned by the Job, whose keys become the
// container's environment (envFrom). Its values are never in the Job's
// spec, the ConfigMap or a log. The Job is created suspended, the Secret
// after it (its owner reference needs the Job's UID), and the Job is then
// started: no pod runs before its Secret exists. A suspended Job left by
// a runner that stopped in between never started; Run and Recover delete
// it. The agent's service account may create Secrets in Kube.Namespace
// but never read one (manifests/).
//
// All of them carry the labels LabelJob (a hash of the job id: label values are
// too short for ids), LabelInstall and LabelComponent, and the annotation
// AnnotationJobID with the id itself. Recover finds the Job by LabelJob.
// The ConfigMap and the Secret are owned by the Job, so the garbage
// collector removes them with the Job, which Kubernetes deletes Kube.TTL after it finished.
//
// # Result
//
// The job process (PodMain) writes its result as usual, then prints it as
// the last line of its output, prefixed "nuon-result: ", and writes the
// same JSON to the container's termination message (/dev/termination-log)
// when it fits in Kubernetes' 4 KiB limit. When the Job has finished, or
// as soon as the job container of its pod has ended with exit 0 (the Job
// controller marks the Job complete a second or two later; a rerun's
// clearFinished deletes such a Job as a finished one), the runner reads
// the result from the termination message of the Job's pod, or else from
// the last such line of its log, copies the pod's log into dir/log and
// writes dir/result.json, so that the job directory looks as it does for
// a Local job. A failure waits for the Job's conditions, which say why.
//
// # State
//
// The pod sees job.StateDir at the same path. Without a volume of
// Kube.Volumes mounted there (Kube.VolumeMounts), it is an emptyDir: fine
// for helm, whose state is the release history in the cluster, and for
// terraform, whose state never lives there: the runner sets
// NUON_TF_STATE_NAMESPACE (Kube.StateNamespace) and
// NUON_TF_STATE_SECRET_SUFFIX (tfstate.StateSecretSuffix of the install
// and component) on a terraform job, and the plugin keeps the state in
// Terraform's kubernetes backend: a Secret per component, locked by a
// Lease, in a namespace that holds nothing else (manifests/ gives the
// jobs' service account exactly the Secret and Lease verbs the backend
// calls there). The manifests inventory still needs a shared volume.
//
// # Plugin jobs
//
// A job of a vendor's plugin (a component of type plugin: its manifest
// has Grants) runs in a pod that has only what its plugin is granted:
//
//   - Before any object of the job exists, Kube.AdmitPlugin (plugin.Admit)
//     checks the plugin the job pins: its signature with the vendor's key,
//     its digest, its signed manifest's name, protocols and needs against
//     Grants. A refusal fails the job (ErrJobFailed, with why) and creates
//     nothing. What it returns, the manifest's needs within Grants, is
//     what the pod gets.
//   - Then the agent stages what the pod reads, so that the pod reaches no
//     registry: the job's artifacts, extracted from Kube.PluginArtifacts
//     with the agent's own pull credential, and the plugin's artifact as
//     admitted (its manifest, config and content, by digest), in the
//     run's staged directory, StagedDir(dir), on the volume of
//     Kube.VolumeMounts that holds the job's directory (the agent's
//     workdir: --job-state-claim). The path must lie under that mount with
//     no symbolic link on the way (the pod's subPath is computed from
//     it); without such a volume the job fails, naming the flag, before
//     any object exists, as it does when staging fails. Nothing staged is
//     a secret. The staged directory is removed when the run ends,
//     whatever its outcome, and when Recover collects an orphaned run's
//     outcome.
//   - The Job is created suspended; a NetworkPolicy of the run's own
//     (named as the Job, "-net-" and a random suffix), owned by it,
//     selecting the Job's pods by the Job's own selector (its UID), is
//     created, and only then is the Job started. It denies all ingress.
//     With the network granted it allows all egress; without it, none at
//     all, not even a DNS query: no container of the pod needs the
//     network for nuon's sake, so the policy, which selects pods and not
//     containers, is exactly the plugin's grant. Enforcing it is the
//     cluster CNI's (Calico, Cilium, the VPC CNI's network policy agent); a
//     CNI that enforces none leaves the pod's network open whatever the
//     object says.
//   - The pod mounts no service account token, no registry credential
//     (none of Kube.RegistryEnv, RegistryMounts, RegistryVolumes) and no
//     Service's address is in its environment (enableServiceLinks: false)
//     but the API server's, which the kubelet adds to every container and
//     the plugin never gets (its environment is what it is granted). The
//     keys of Kube.SecretName reach it only with secrets granted, RunEnv's
//     environment (the cloud role's credentials) only with cloudRole:
//     otherwise no Secret is made at all. Of Kube.Volumes it mounts only
//     the staged directory, read-only, at PodPluginIn (its volume's
//     subPath), and, with writableState, the component's state directory
//     alone, at job.StateDir.
//   - In the process form (a plugin released without an image, or
//     AdmitPluginImage unset), the pod's one container runs as every
//     job's (restricted security context, read-only root filesystem),
//     Kube.PluginCommand with `--plugin-staged PodPluginIn`: it runs the
//     plugin (plugin.Staged) from the staged artifact only after checking
//     that its manifest hashes to the digest the job pins and its config
//     and content to the digests that manifest names, unpacked into its
//     own /tmp, as a process of the job's own, on the staged artifacts,
//     with `--plugin-shared-network`: a restricted pod may not make the
//     network namespace the process runner puts a plugin in, so the pod's
//     NetworkPolicy takes its place. The image form is below.
//
// Objects per plugin job: the Job, its ConfigMap (the manifest alone), its
// NetworkPolicy, its pod, and its Secret only with cloudRole granted and
// RunEnv used.
//
// # Plugin images
//
// With AdmitPluginImage set, a job of a vendor's plugin whose release has
// a container image (schemas.PluginImageArtifactName: the plugin's
// executable for linux/amd64 as an OCI image's entrypoint, signed with
// the vendor's key, the release of the artifact the job pins) runs in the
// image form. AdmitPluginImage (plugin.AdmitImage) checks the image as
// AdmitPlugin checks the artifact, before any object exists: its pin by
// digest, its signature, its tie to the artifact, its signed manifest's
// name, protocols and needs. The same objects are made, with the same
// Secret, admission and NetworkPolicy. The agent stages the job's
// artifacts as for the process form, and the plugin's request
// (plugin.Process.Prepare) instead of its artifact.
//
// The pod has three containers, run one after the other (two init
// containers, then the job's):
//
//   - executor, Image: `nuon-plugin-exec --copy-to /nuon/plugin/bin`
//     (the executor beside nuon in the image, a static binary of the
//     standard library alone) copies itself into the emptyDir
//     plugin-bin. It mounts nothing else and has no environment.
//   - plugin, the plugin's image by its digest in the install registry,
//     as user and group PluginUser: the executor feeds the request to the
//     image's entrypoint on stdin and writes its stdout, stderr and exit,
//     bounded, into the emptyDir plugin-out (package plugin/exchange). It
//     mounts the staged directory alone, read-only, at PodPluginIn,
//     plugin-bin read-only, plugin-out, its own /tmp and, at
//     PodPluginState, the component's state directory alone with
//     writableState or an empty one. Its environment is plugin.Environ of
//     Env's plain values for its grants; the install's secrets
//     (SecretName) only with secrets, RunEnv's Secret only with cloudRole;
//     the executor withholds the API server's variables the kubelet adds
//     to every container (exchange.ServiceEnviron). It holds no service
//     account token, no registry credential, no vendor key, no manifest
//     ConfigMap and no nuon binary.
//   - job, Image: Kube.PluginCommand with `--plugin-exchange-in
//     /nuon/plugin/in --plugin-exchange-out /nuon/plugin/out MANIFEST`
//     reads the answer as a plugin's stdout is read (plugin.Exchanged),
//     redacts it with the secrets the plugin had, and writes the result and
//     termination message as every job's container does.
//
// Every container runs restricted with a read-only root filesystem. The
// kubelet pulls both images with Kube.ImagePullSecrets, which no
// container sees.
//
// # State locks
//
// A job killed while terraform held the state lock leaves the Lease held,
// and every later terraform command fails with "Error acquiring the state
// lock". Before a terraform job starts, the runner reads that Lease. While
// another Kubernetes Job of the same install and component is alive (not
// finished, or with a pod neither succeeded nor failed), the lock may be
// that job's: the runner waits for it to end and never breaks its lock.
// Once every job of the component is dead (finished, failed or gone, its
// pods terminated or gone), a lock still held is a dead job's: the runner
// logs it and hands its ID to the new job (NUON_TF_STATE_STALE_LOCK). The
// plugin then runs `terraform force-unlock` for that ID, and that ID only,
// when terraform reports it, and reports the lock in the result
// (JobResult.BrokenLock, then the component's status). A lock with another
// ID was taken since by a live job: the plugin waits for it until the
// job's deadline. The Local runner needs none of this: its state file's
// lock is an fcntl lock, which the kernel drops when the process dies.
type Kube struct {
	// Client talks to the cluster the Jobs run in: NewKubeClient's, or
	// a *kubernetes.Clientset.
	Client KubeClient
	// Namespace the Jobs and their ConfigMaps are created in.
	Namespace string
	// StateNamespace holds the terraform jobs' state: a Secret and a
	// lock Lease per component (Terraform's kubernetes backend). Default
	// DefaultStateNamespace.
	StateNamespace string
	// Image runs the job: an image with nuon as its entrypoint or on PATH.
	Image string
	// Command is the container's argv before the manifest path. Default
	// []string{"nuon", "job", "run", "--pod"}.
	Command []string
	// ServiceAccount the Jobs run as. Default DefaultJobServiceAccount.
	ServiceAccount string
	// SecretName is a Secret whose keys become NUON_SECRET_<KEY>
	// variables; optional.
	SecretName string
	// Env is extra environment for the job's container.
	Env []corev1.EnvVar
	// Volumes and VolumeMounts are added to the Job's pod, for example
	// the volume that holds the components' state directories.
	Volumes      []corev1.Volume
	VolumeMounts []corev1.VolumeMount
	// Resources of the job's container.
	Resources corev1.ResourceRequirements
	// TTL keeps a finished Job this long. Default DefaultJobTTL.
	TTL time.Duration
	// PollInterval is how often a running Job is looked at. Default
	// DefaultKubePoll.
	PollInterval time.Duration
	// TimeoutMargin is added to the job's own timeout before the Job is
	// stopped. Default DefaultTimeoutMargin.
	TimeoutMargin time.Duration
	// Log, if set, receives a copy of each job's output.
	Log io.Writer
	// Logger receives the runner's events. Default: discard.
	Logger *slog.Logger

	// AdmitPlugin checks a job of a vendor's plugin (one with Grants)
	// before any object of it is created, and says what its plugin is
	// granted; see "Plugin jobs". Required for such jobs.
	AdmitPlugin PluginAdmission
	// AdmitPluginImage, when set, runs a job of a vendor's plugin whose
	// release has a container image in the image form: it checks the
	// image as AdmitPlugin checks the artifact, and the plugin runs as a
	// container of its own; see "Plugin images". Unset, such jobs run as
	// a process of the job's image, as every plugin without an image.
	AdmitPluginImage PluginImageAdmission
	// PluginArtifacts is where the runner extracts the artifacts of a job
	// of a vendor's plugin from (the install registry, with the agent's
	// own pull credential), into the run's staged directory. Required
	// for such jobs.
	PluginArtifacts reconciler.ArtifactSource
	// PluginCommand is Command for the pods of a vendor's plugin's jobs,
	// which read no registry: Command without the registry's flags (a
	// --registry-ca file of RegistryMounts they do not mount). Default
	// Command.
	PluginCommand []string
	// RegistryEnv, RegistryMounts and RegistryVolumes give the container
	// of a job that fetches artifacts itself (a built-in plugin's) what it
	// pulls from the install registry with: pull-only credentials and
	// the registry's CA (for example a Secret mounted read-only and the
	// flags' variables). No pod of a vendor's plugin has them.
	RegistryEnv     []corev1.EnvVar
	RegistryMounts  []corev1.VolumeMount
	RegistryVolumes []corev1.Volume
	// ImagePullSecrets are the pods' image pull secrets (Secrets of type
	// kubernetes.io/dockerconfigjson in Namespace): the kubelet pulls
	// the job's image and a plugin's image with them; no container sees
	// them.
	ImagePullSecrets []corev1.LocalObjectReference
}

var _ EnvRunner = (*Kube)(nil)

func (k *Kube) logger() *slog.Logger {
	if k.Logger != nil {
		return k.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (k *Kube) command() []string {
	if len(k.Command) > 0 {
		return k.Command
	}
	return []string{"nuon", "job", "run", "--pod"}
}

// pluginCommand is a fresh copy of PluginCommand, or of Command.
func (k *Kube) pluginCommand() []string {
	if len(k.PluginCommand) > 0 {
		return slices.Clone(k.PluginCommand)
	}
	return slices.Clone(k.command())
}

func (k *Kube) serviceAccount() string {
	if k.ServiceAccount != "" {
		return k.ServiceAccount
	}
	return DefaultJobServiceAccount
}

func (k *Kube) ttl() time.Duration {
	if k.TTL > 0 {
		return k.TTL
	}
	return DefaultJobTTL
}

func (k *Kube) poll() time.Duration {
	if k.PollInterval > 0 {
		return k.PollInterval
	}
	return DefaultKubePoll
}

func (k *Kube) timeoutMargin() time.Duration {
	if k.TimeoutMargin > 0 {
		return k.TimeoutMargin
	}
	return DefaultTimeoutMargin
}

// notDNS matches what a DNS label may not hold.
var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// KubeName is the name of the Job and ConfigMap of the job with id: a DNS
// label of at most 63 characters, unique per id.
func KubeName(id string) string {
	s := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(id), "-"), "-")
	if len(s) > 44 {
		s = strings.TrimRight(s[:44], "-")
	}
	return "nuon-" + s + "-" + idHash(id)[:12]
}

// idHash is the label value that identifies a job id.
func idHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])[:32]
}

// labelValue makes s a valid label value (at most 63 characters of
// [A-Za-z0-9._-], alphanumeric at both ends).
func labelValue(s string) string {
	s = regexp.MustCompile(`[^A-Za-z0-9._-]+`).ReplaceAllString(s, "-")
	if len(s) > 63 {
		s = s[:63]
	}
	return strings.Trim(s, "-._")
}

// covered reports whether dir lies under one of the mounts.
func covered(dir string, mounts []corev1.VolumeMount) bool {
	dir = path.Clean(dir)
	for _, m := range mounts {
		mp := path.Clean(m.MountPath)
		if dir == mp || strings.HasPrefix(dir, mp+"/") {
			return true
		}
	}
	return false
}

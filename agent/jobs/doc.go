// Package jobs runs plugin jobs for the agent: it starts each job as a
// process of its own (a child process, or a Kubernetes Job) and waits for
// its result. What runs inside that process, behind `nuon job run
// MANIFEST`, is package jobrun.
//
// # Process model
//
// The agent never runs a plugin itself. For every job it writes a
// manifest (schemas.Job) into the job's own directory and starts a job
// process that reads it, runs the plugin under the job's timeout and
// writes a schemas.JobResult. A plugin can then take as long and as much
// memory as it needs, crash, or be killed without taking the agent with
// it, and the agent can die and restart without killing the job.
//
// Runner is how the agent does this. Local starts `nuon job run` as a
// child process in a process group of its own; Kube does the same in a
// Kubernetes Job's pod. Both are EnvRunners: RunEnv gives one job extra
// environment (the sandbox's role credentials) that is never written to
// its manifest: Local adds it to the child's environment, Kube puts it
// in a Secret of the job's own, owned by its Job. The job's output goes straight into a file,
// not through a pipe to the agent, so a job that outlives the agent keeps
// its output and is not killed by SIGPIPE.
//
// # Job directory
//
// Each job has a directory of its own, named by the caller (one per job
// id):
//
//	manifest.json  the job, as the job process reads it; written atomically
//	result.json    the JobResult, written atomically by the job process
//	               when it ends, with Error set if it failed
//	log            the job's stdout and stderr, appended run after run,
//	               each run starting with a "==>" line
//	lock           the lock file described below; never remove it
//
// A job directory may be removed only while its lock is held.
//
// # Lock protocol
//
// Two processes of the same job must never run at once, even if the agent
// is killed at any instant and restarted. The guarantee comes from an
// flock(2) lock on dir/lock, which the kernel ties to the open file
// rather than to a process and drops when the last descriptor of that
// open file is closed, including when its holders die:
//
//  1. Run opens dir/lock and takes an exclusive lock without waiting. If
//     it cannot, a process of the job is still alive and Run fails with
//     ErrRunning.
//  2. Holding the lock, Run removes an earlier result.json and writes
//     manifest.json.
//  3. Run starts the job process with the lock's descriptor as its fd 3.
//     The child now holds the same open file, and so the lock, for as
//     long as it lives; so does every process it starts that inherits
//     fd 3, as a terraform or helm process does.
//  4. When the job process exits, Run drops its own descriptor. If the
//     lock is still held, processes the job started outlived it: Run
//     stops what is left of the job's process group, so that once Run
//     returns no process of the job is running.
//
// If the agent dies before step 3, the kernel drops its lock and no job
// process exists. If it dies after, the job process keeps the lock until
// it and its descendants are gone. Either way, a restarted agent calls
// Recover, which waits until it can take the lock itself: at that point
// no process of the job can be running, and none can start but through
// the agent. result.json then tells whether the job finished: a result
// is written atomically at the very end, so its presence means the job
// ran to completion, and its absence means it must run again
// (ErrNotFinished). A result from an earlier run of the job is removed in
// step 2, before a new process can start; if the agent died before that,
// Recover reports the earlier run's result, a genuine outcome of the job.
//
// # Cancellation and timeouts
//
// The job process enforces job.Timeout on the plugin's context and
// reports a timeout in its result. The runner gives it that long plus
// Local.TimeoutMargin before it steps in. When the runner's context ends
// or the margin is used up, it sends SIGTERM to the job's whole process
// group, which cancels the plugin's context (the job process turns
// SIGTERM into cancellation), and SIGKILL after Local.KillGrace. Run's
// error then satisfies errors.Is with context.Canceled, or with
// context.DeadlineExceeded and ErrJobFailed for a timeout.
//
// # Secrets
//
// A job's output and result are redacted inside the job process (package
// jobrun), so dir/log and result.json hold no secret. Run's errors quote
// the job's result and the end of its log; the agent redacts them again,
// with the secrets it holds, before they leave it.
//
// # Vendors' plugins in Kubernetes: who enforces what
//
// A job of a vendor's plugin gets, in Kube, a pod narrowed to its grants
// (see Kube, "Plugin jobs"). Each limit is enforced by a different part,
// and this package only asks for it:
//
//   - the plugin's admission (signature, digest, name, protocol, needs
//     within grants): the runner, before any object exists
//     (Kube.AdmitPlugin); the job process in the pod runs only the
//     plugin whose staged files hash to the digest the job pins;
//   - non-root, no privilege escalation, no capabilities, RuntimeDefault
//     seccomp, no host namespaces: the API server's Pod Security
//     admission, because the namespace is labelled
//     pod-security.kubernetes.io/enforce=restricted (manifests/);
//   - the read-only root filesystem, the dropped capabilities and the
//     seccomp profile: the node's container runtime;
//   - egress and ingress: the NetworkPolicy, enforced only where the
//     cluster's CNI enforces NetworkPolicies. On a CNI that does not,
//     the object exists and nothing is enforced: the plugin has the
//     network. Check with a pod in the namespace before trusting it;
//   - secrets, cloud credentials, the registry's credential, the service
//     account token, the shared state volume: absent from the pod spec,
//     which nothing in the pod can change.
//
// The agent stages what either form's pod reads (Kube, "Plugin jobs"):
// the job's artifacts, and the plugin's artifact or request, on the
// jobs' volume, mounted read-only by subPath. No container of the pod
// reaches a registry, so without the network granted the NetworkPolicy
// lets nothing out at all, not even DNS: the policy selects pods, not
// containers, and no container needs more than the plugin is granted.
//
// A plugin released without a container image is a process inside the
// job's pod, from nuon's job image: the pod's limits bound the job
// process and the plugin together, and the process runner's own limits
// (environment, bounds, state directory) hold inside it, but the plugin
// can read what the job process holds: the job's manifest and what the
// agent staged, none of it a secret.
//
// A plugin released with its image runs, with Kube.AdmitPluginImage, as
// a container of its own (Kube, "Plugin images"), as Tekton and Argo
// Workflows inject their entrypoint: nuon's image copies a small
// executor in an init container, through a read-only emptyDir, which runs
// the plugin in its image on the staged request, and reads the answer
// after. The plugin's container has no credential, key, token, manifest
// or nuon binary, its own environment, and read-only request and
// executor.
//
// What this machine shows and what it cannot: it has no kubelet,
// container runtime or CNI. The test kubelet runs an image's container
// (the plugin's, in the image form) as root is allowed to: the image
// pulled by digest and unpacked into a root of its own, the container's
// volumes bound into it in a mount namespace of its own (read-only where
// the pod says), the root read-only, chroot, the pod's user and group,
// then its command; TestKubePluginImage's spy plugin walks that root and
// reports what it sees. It shares the host's network and PID namespace
// and has no seccomp profile. TestKubePlugin runs the real kube-apiserver
// and controller manager (the Job controller creates the pods, so
// admission is real: the pod is admitted under restricted, and copies of
// it made to escape are refused; the garbage collector deletes the
// NetworkPolicy with its Job), and a test kubelet runs each pod's command
// as a local process, as root, on the host's network and filesystem. So
// the pod spec, the NetworkPolicy object, the admission and the objects'
// lifecycle are tested against the real API server; the NetworkPolicy's
// effect is tested by evaluating its rules, not by sending packets, and
// the read-only root filesystem and the seccomp profile are not exercised.
//
// # Errors
//
// ErrJobFailed means the job ran and failed: rerunning it as is fails
// again. schemas.ErrInvalidJob and jobrun.ErrUnknownPlugin mean the job
// cannot run on this agent at all. ErrNotFinished and ErrRunning are not outcomes:
// the job must be run again, or waited for.
package jobs

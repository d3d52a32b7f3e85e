// Package plugin is the plugin protocol: the versioned contract between a
// job and a plugin that applies one component type as a process of its
// own, the runner that starts such a process, the server a Go plugin
// answers behind, and plugins released as signed artifacts. Package
// plugintest is the test kit for plugin authors.
//
// # The protocol
//
// One process per request. The job writes one JSON document on the
// plugin's stdin, a PluginRequest (schemas/plugin-request.schema.json):
// the protocol version, the operation, the job manifest, the component's
// state directory, a scratch directory, the job's artifacts already
// pulled, verified by digest and extracted, and the capabilities granted.
// The plugin writes one JSON document on its stdout, a PluginResponse
// (schemas/plugin-response.schema.json): outputs and the names of
// sensitive ones, whether it changed anything, a plan record (opaque to
// the protocol), drift findings, health, a debug answer, or an error with
// a code. Its logs go to stderr, which becomes the job's log (redacted by
// the job process, bounded by Runner.MaxLog).
//
// Operations: handshake, plan, apply, destroy, drift, health, debug. A
// job's create and update are an apply, its delete a destroy.
//
// # Versions and the handshake
//
// A handshake comes first. The job offers the protocol versions it
// speaks; the plugin answers in the newest both speak, with its manifest
// (schemas/plugin-manifest.schema.json): name, version, protocols,
// operations and the capabilities it needs. A plugin that answers in a
// version the job did not offer fails with ErrVersion. When the job knows
// the manifest already (a built-in served by the job's own binary, a
// plugin whose manifest came with its signed artifact) there is no
// handshake, which halves the processes a job starts.
//
// # Exit codes
//
//	0  ExitOK           the response is the answer
//	1  ExitFailed       the operation ran and failed; it may succeed later
//	2  ExitInvalid      the request was invalid
//	3  ExitUnsupported  no such operation or protocol version
//	4  ExitRefused      a debug command off the plugin's allow-list
//
// A response with an error fails the operation whatever the exit code (an
// *Error, which errors.Is matches to ErrFailed, ErrInvalid,
// ErrUnsupported or debugcmd.ErrRefused). A non-zero exit without an
// error in the response, no response, garbage, a second document, an
// unknown field or a response to another operation break the protocol
// (ErrProtocol): the job fails with what was wrong and where.
//
// # Capabilities
//
// A manifest declares what the plugin needs: network, secrets (the
// install's NUON_SECRET_* variables), cloudRole (AWS_* credentials),
// writableState (the component's state directory; without it the plugin
// gets an empty directory of its own for the request) and env, further
// variables by name. The job grants what it allows. A plugin that needs
// more than it is granted is refused before any request that could change
// anything is sent (ErrNotGranted). The process gets a clean environment:
// PATH, LANG, HOME and TMPDIR in its scratch directory,
// NUON_PLUGIN_PROTOCOL, and only the variables granted. A plugin not
// granted the network runs in a network namespace of its own, with
// nothing in it (as root directly, otherwise inside a user namespace that
// maps the job's own user); where namespaces are not allowed the job
// fails unless the runner's SharedNetwork says otherwise. writableState
// is enforced by handing the plugin a directory of its own; a plugin may
// still write where the job's user may, which a container runner (a
// read-only root filesystem) closes.
//
// # Bounds
//
// Each request is bounded in time by its context: when it ends the
// plugin's process group gets SIGTERM, then SIGKILL after
// Runner.KillGrace; whatever the plugin left running in its group is
// killed when it exits. Stdout is bounded by Runner.MaxResponse (16 MiB):
// past it the group is killed and the job fails with ErrTooLarge.
//
// # Plugins as artifacts
//
// A released plugin is one OCI image manifest with its own media types:
// its config (ConfigMediaType) is its manifest, its one layer
// (ContentMediaType) its directory with an executable per platform, as
// the manifest's executables name them. It is signed with the vendor's
// cosign key like every artifact and pinned by digest. Fetch verifies the
// signature before reading anything else, then every digest, and unpacks
// the executable for this platform.
//
// # A plugin's container image
//
// A release also has a container image when its manifest names a
// linux/amd64 executable (PackageImage, `nuon plugin release`): an OCI
// image of standard media types, its one added layer the plugin's
// directory at ImageDir on a base the vendor pins by digest (a script's
// interpreter; none for a static executable), its config's Entrypoint
// that executable, its config label ImageManifestLabel the manifest, its
// manifest annotation ImageArtifactAnnotation the digest of the
// artifact of the same release. It is signed like the artifact, recorded
// beside it as schemas.PluginImageArtifactName, synced by digest like any
// artifact, and AdmitImage checks it as Admit checks the artifact, and
// that it is that artifact's release. The Kubernetes runner runs it as a
// container of its own: Prepare writes the request into files, the
// executor cmd/nuon-plugin-exec (package exchange) runs the entrypoint on
// it in the plugin's container, and Exchanged reads the answer, bounded
// and parsed as a plugin's stdout.
//
// # A component's plugin, from signed state
//
// A component of type plugin names its plugin and grants in nuon.yaml
// (plugin: {name, grants}); each release of the component pins the
// plugin's artifact, named schemas.PluginArtifactName, by digest (`nuon
// plugin release --component`). The renderer writes both into the
// install's signed desired state, the agent syncs the artifact into the
// install's registry like any other (once per digest), and the job's
// manifest carries the grants. Pinned is the job's side: it fetches the
// pinned artifact from the install registry, verified with the vendor's
// key, refuses a manifest that names another plugin, speaks no protocol
// of ours or needs more than the grants, and grants the plugin what its
// signed manifest needs of them (Intersect) and nothing else. Granting a
// capability is thus a reviewed change on main; a plugin release cannot
// widen its own. A plugin upgrade is a release and a channel pin: no
// agent changes.
//
// Admit is Pinned without unpacking: the same checks, from the signed
// manifest in the artifact's config alone. The Kubernetes runner
// (agent/jobs.Kube) calls it before it creates any object of the job,
// sizes the job's pod to what it returns, and stages the artifact it
// returns for the pod (Artifact.Stage, Staged).
//
// # Who enforces what
//
// As a process (the Local runner, or inside a job's pod), this package
// enforces the environment (only granted variables), the state directory
// (a directory of the request's own without writableState), the bounds
// above, and, where the kernel lets it make namespaces, the network (a
// namespace with nothing in it). It cannot stop a plugin from reading
// what the job's user may read, its parent's environment
// (/proc/PPID/environ) included: that is why the Kubernetes runner keeps
// ungranted secrets and credentials out of the pod altogether, not just
// out of the plugin's environment.
//
// In Kubernetes (agent/jobs, "Plugin jobs") the plugin runs as a process
// in the job's pod, which has only what the plugin is granted: the API
// server's admission enforces the namespace's restricted Pod Security
// Standard (non-root, no privilege escalation, all capabilities dropped,
// RuntimeDefault seccomp) and the container runtime the read-only root
// filesystem; the pod has no service account token and no registry
// credential, and the install's secrets and the cloud credentials only
// when granted. The agent admits the plugin (Admit) and stages its
// artifact (Artifact.Stage) and the job's artifacts (Process.Stage) on a
// volume the pod mounts read-only; the pod runs the plugin from there
// (Staged), only once the staged files hash to the digest the job pins,
// and reads no registry. So its NetworkPolicy, enforced by the cluster's
// CNI (Calico, Cilium, the AWS VPC CNI with network policies on, …; not
// flannel alone), lets it reach nothing at all unless it is granted the
// network. A restricted pod may not make network namespaces (the
// runtime's seccomp profile refuses unshare), so the pod runs the plugin
// with SharedNetwork (`nuon job run --plugin-shared-network`) and the
// NetworkPolicy takes the namespace's place. A plugin released with its
// container image runs instead as a container of its own, holding only
// what it is granted: see agent/jobs.
//
// # The built-ins
//
// terraform, helm and manifests implement reconciler.Plugin in Go. Server
// serves any reconciler.Plugin behind the protocol: `nuon plugin serve
// NAME` is the built-in NAME in a process of its own, and `nuon job run
// --plugin-process NAME` runs jobs that way. Process is the other side: a
// plugin behind the protocol, seen by the job process as a
// reconciler.Plugin.
//
// # Measured
//
// A built-in behind the protocol costs a job one more nuon process.
// BenchmarkPluginRoundTrip (cmd/nuon), on this project's 2-core machine
// while it ran at a load of 13 to 17: 34–43 ms of that process's CPU per
// job with the manifest known (69–86 ms wall, mostly waiting for a core),
// 68–86 ms with a handshake (two processes), against 0.03–0.08 ms for the
// same call in the job process. Most of it is starting a 160 MB binary
// (package initialisation alone ~30 ms). A small Go plugin
// (BenchmarkProcess) costs 35–50 ms wall at that load; its own network
// namespace adds nothing measurable. Again at a load of 21 to 25: the
// built-in 41.5 ms CPU per job (102 ms wall); the Perl zonefile plugin
// 28–30 ms CPU; fetching a pinned plugin from the registry (Pinned:
// verify, pull by digest, unpack) adds 3–10 ms (BenchmarkPinned).
package plugin

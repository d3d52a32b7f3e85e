// Package reconciler turns an install's desired state and what its agent
// applied into work, and defines the plugins that do the work.
//
// # Plan
//
// NewPlan makes one Step per component: every desired component is an
// Apply step after the components it depends on; every applied component no
// longer desired is a Delete step, after all the applies and after the
// deletes of the components that depended on it.
//
// Whether an Apply step runs a job is decided late, when its dependencies
// have finished: Resolve replaces ${components.NAME.outputs.OUTPUT} in its
// inputs with the outputs just produced, and Decide compares the hash of
// that resolved spec (SpecHash) with the one applied last. Equal hashes mean
// no job and no process. So a component reruns exactly when its own
// rendered spec changed or an output it consumes changed.
//
// # Plugins
//
// A Plugin applies one component type inside a job process (`nuon job
// run`), never inside the agent. It receives the job manifest and an Env:
// a persistent state directory and an ArtifactSource that yields the
// component's artifact content by digest. reconciler/terraform is the
// Terraform plugin.
//
// What the plugins share lives here. JobArtifact picks the job's artifact
// and ExtractFresh extracts it into an emptied directory, so nothing a
// previous job left survives. ResolveSecrets replaces each
// ${secrets.NAME} left in a job's inputs with the environment variable
// SecretEnv(NAME), and refuses a value too short to redact safely
// (redact.MinLen). Plugins do not redact: the job process (package jobrun)
// redacts everything they print and return before it leaves the job.
//
// # Operations beyond apply
//
// A job's operation may also be drift, health or debug (see
// schemas.ReadOnly): they change nothing. A plugin takes part through
// small optional interfaces, found by the job process with a type
// assertion: DriftChecker (what differs from the desired state, per
// resource, with at most one plan), HealthChecker (Ready, Progressing,
// Failed, Unknown) and Debugger (one read-only command parsed by package
// internal/debugcmd from a fixed allow-list). A plugin without one fails
// such a job with jobrun.ErrUnsupported. Correcting drift needs no
// interface: it is an Apply of the desired state. Package reconciler/kube
// holds what the Kubernetes plugins share: health from kstatus and the
// Kubernetes debug commands.
package reconciler

package schemas

import "time"

// Operations a job performs on a component.
const (
	OpCreate = "create"
	OpUpdate = "update"
	OpDelete = "delete"
	// OpDrift compares the install with the job's desired state and
	// changes nothing; the result's Drift says what differs and its
	// Health how the component stands.
	OpDrift = "drift"
	// OpHealth reports how the component stands (the result's Health) and
	// changes nothing.
	OpHealth = "health"
	// OpDebug runs one allow-listed, read-only debug command (the job's
	// Debug) and answers in the result's Answer.
	OpDebug = "debug"
)

// ReadOnly tells whether a job of operation op never changes the install.
func ReadOnly(op string) bool {
	return op == OpDrift || op == OpHealth || op == OpDebug
}

// Job is a job manifest: exactly what one plugin job does. The agent writes
// it, `nuon job run MANIFEST` executes it in its own process, and the status
// commit records it.
type Job struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// ID is unique per install; it names the job's files and log.
	ID        string `json:"id"`
	Install   string `json:"install"`
	Component string `json:"component"`
	// Operation is create, update, delete, drift, health or debug.
	Operation string `json:"operation"`
	// Plugin is the component type that runs it.
	Plugin  string `json:"plugin"`
	Version string `json:"version"`
	// Generation and Commit of the desired state the job comes from.
	Generation int64  `json:"generation"`
	Commit     string `json:"commit"`
	// Artifacts are install-registry references only.
	Artifacts []Artifact `json:"artifacts,omitempty"`
	// Inputs are fully resolved, with secrets still as references.
	Inputs    map[string]any     `json:"inputs,omitempty"`
	Terraform *TerraformSettings `json:"terraform,omitempty"`
	Helm      *HelmSettings      `json:"helm,omitempty"`
	Manifests *ManifestSettings  `json:"manifests,omitempty"`
	// State, on a terraform job, keeps the component's state in this S3
	// object instead of the local state file (the sandbox on AWS: the
	// install's sandbox.state). The credentials come with the job's
	// environment, never its manifest.
	State *S3State `json:"state,omitempty"`
	// Plan, on a terraform create or update, binds the job to a saved
	// plan: record it, or apply exactly it (JobPlan).
	Plan *JobPlan `json:"plan,omitempty"`
	// Grants, on a job of a vendor's plugin (a component of type plugin),
	// are the capabilities its desired state grants the plugin: the job
	// runs the plugin artifact of Artifacts named PluginArtifactName,
	// whose signed manifest may need no more, and grants it nothing else.
	Grants *PluginCapabilities `json:"grants,omitempty"`
	// Debug is the command of a debug job (operation debug only).
	Debug *DebugRequest `json:"debug,omitempty"`
	// Timeout bounds the job, as a Go duration.
	Timeout string `json:"timeout"`
	// StateDir is the component's persistent directory in the install
	// (terraform state, plugin caches).
	StateDir string `json:"stateDir"`
	// ResultFile is where the job writes its JobResult.
	ResultFile string `json:"resultFile"`
}

// DefaultDebugMaxBytes bounds a debug answer when the request does not.
const DefaultDebugMaxBytes = 64 << 10

// DebugRequest is one read-only debug command. Its words are parsed
// against the plugin's allow-list (package internal/debugcmd): they are
// never run by a shell nor handed to a CLI.
type DebugRequest struct {
	// Command is the command's words, for example
	// ["logs", "api-7d9f", "--tail", "100"].
	Command []string `json:"command"`
	// Namespaces are the install's namespaces (those its components own):
	// Kubernetes commands are refused outside them. Empty means the
	// component's own namespace only.
	Namespaces []string `json:"namespaces,omitempty"`
	// MaxBytes bounds the answer; more is cut off and marked truncated.
	// Default DefaultDebugMaxBytes.
	MaxBytes int `json:"maxBytes,omitempty"`
	// Timeout bounds the command, as a Go duration, within the job's
	// timeout; default the job's timeout.
	Timeout string `json:"timeout,omitempty"`
}

// EffectiveMaxBytes is d.MaxBytes or DefaultDebugMaxBytes.
func (d *DebugRequest) EffectiveMaxBytes() int {
	if d == nil || d.MaxBytes <= 0 {
		return DefaultDebugMaxBytes
	}
	return d.MaxBytes
}

// KindJobResult is the kind of a JobResult.
const KindJobResult = "JobResult"

// JobResult is what a finished job reports back to the agent.
type JobResult struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Job        string `json:"job"`
	// Outputs of the component; sensitive ones are kept out (see Sensitive).
	Outputs map[string]any `json:"outputs,omitempty"`
	// Sensitive names outputs that exist but whose values never leave the
	// install.
	Sensitive []string `json:"sensitive,omitempty"`
	// Changed reports whether the job changed anything.
	Changed bool   `json:"changed"`
	Error   string `json:"error,omitempty"`
	// Refused is set when Error is a refusal (a debug command off the
	// allow-list or outside the install): the job would be refused again,
	// and the agent answers the request with Error as the reason.
	Refused bool `json:"refused,omitempty"`
	// Drift lists what differs from the desired state, per resource, as a
	// drift job found it; empty means no drift (or no drift check).
	Drift []ResourceDrift `json:"drift,omitempty"`
	// Health is how the component stands after an apply, a drift or a
	// health job, when the plugin can tell.
	Health *Health `json:"health,omitempty"`
	// Answer is a debug job's output.
	Answer *Answer `json:"answer,omitempty"`
	// BrokenLock is the state lock this job broke before it could run:
	// one held by a job the agent knew was dead (killed before terraform
	// released it).
	BrokenLock *StateLock `json:"brokenLock,omitempty"`
	// Plan is the record of the plan a plan-bound job saved or applied.
	Plan *PlanRecord `json:"plan,omitempty"`
}

// StateLock is a Terraform state lock, as Terraform describes it.
type StateLock struct {
	ID        string `json:"id"`
	Operation string `json:"operation,omitempty"`
	Who       string `json:"who,omitempty"`
	// Created is when the lock was taken (RFC 3339).
	Created string `json:"created,omitempty"`
}

// Drift actions: how a resource differs from the desired state.
const (
	// DriftChanged: the resource exists, but fields the desired state sets
	// differ.
	DriftChanged = "changed"
	// DriftMissing: the desired state has the resource, the install does
	// not.
	DriftMissing = "missing"
	// DriftExtra: the install has a resource the desired state does not
	// (terraform would delete it).
	DriftExtra = "extra"
)

// ResourceDrift is one resource that differs from the desired state.
// Terraform resources have an Address; Kubernetes objects a Kind,
// Namespace and Name.
type ResourceDrift struct {
	Address   string `json:"address,omitempty"`
	Kind      string `json:"kind,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// Action is changed, missing or extra.
	Action string `json:"action"`
	// Fields are the paths that differ, at most a few.
	Fields []string `json:"fields,omitempty"`
	// Diff is a short human-readable diff, when fields are not enough.
	Diff string `json:"diff,omitempty"`
}

// Health statuses, as kstatus computes them for Kubernetes objects.
const (
	HealthReady       = "Ready"
	HealthProgressing = "Progressing"
	HealthFailed      = "Failed"
	HealthUnknown     = "Unknown"
)

// Health is how a component stands: the worst of its resources' statuses.
type Health struct {
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
	// Resources are the resources that are not Ready, or all of them when
	// the plugin checks each.
	Resources []ResourceHealth `json:"resources,omitempty"`
}

// ResourceHealth is one resource's health.
type ResourceHealth struct {
	Address   string `json:"address,omitempty"`
	Kind      string `json:"kind,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Status    string `json:"status"`
	Message   string `json:"message,omitempty"`
}

// Answer is a debug command's output, bounded.
type Answer struct {
	// Command is the command as parsed, in its canonical words.
	Command []string `json:"command"`
	// Output is at most the request's MaxBytes of the command's output.
	Output string `json:"output"`
	// Truncated is set when the output was cut off at MaxBytes.
	Truncated bool `json:"truncated,omitempty"`
	// Bytes is the size of the output before truncation; a streamed
	// output (a pod's log) stops being read once it is past MaxBytes, so
	// for it Bytes is a lower bound.
	Bytes int `json:"bytes"`
}

// Component phases in a status.
const (
	PhaseApplied  = "Applied"
	PhaseFailed   = "Failed"
	PhaseBlocked  = "Blocked" // a dependency failed
	PhasePending  = "Pending"
	PhaseDeleted  = "Deleted"
	PhaseNotReady = "Unsupported" // no plugin on this agent for the type
)

// Install phases in a status.
const (
	InstallReady    = "Ready"
	InstallDegraded = "Degraded"
	InstallRefused  = "Refused"
)

// Status is status.json on refs/heads/nuon/status/<id>: what the agent
// applied and how each component stands.
type Status struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Install    string `json:"install"`
	// Desired is the newest desired commit the agent saw.
	Desired string `json:"desired,omitempty"`
	// Applied is the desired commit whose state the components match.
	Applied    string `json:"applied,omitempty"`
	Generation int64  `json:"generation"`
	Phase      string `json:"phase"`
	// Refusal says why the agent refused the desired commit, if it did.
	Refusal *Refusal `json:"refusal,omitempty"`
	// Stale is true when the newest desired commit is past its signed
	// expiry (TrailerExpires): the tenant has not re-rendered in time, or
	// someone withholds newer state. The agent keeps running what it
	// applied and applies nothing expired.
	Stale bool `json:"stale,omitempty"`
	// Expires is the expiry of the newest desired commit, when it has one.
	Expires *time.Time `json:"expires,omitempty"`
	// Forged names a status commit on the status ref that this install's
	// key did not sign, which the agent replaced.
	Forged *Forged `json:"forged,omitempty"`
	// Deferred is set while the install holds the desired commit back on
	// purpose (a customer hold, no open maintenance window): deferred,
	// never failed.
	Deferred *Deferred `json:"deferred,omitempty"`
	// Vetoed lists the kinds of operations (RequestLogs, RequestDebug,
	// RequestDrift) the install's own `operations:` settings turned off,
	// so whoever reads the status sees the customer did, not a fault.
	Vetoed []string `json:"vetoed,omitempty"`
	// Heartbeat is set by a status commit the agent wrote only to show it
	// is alive (nothing else changed for HeartbeatEvery); the commit's own
	// time is the proof, this field makes its tree differ.
	Heartbeat *time.Time `json:"heartbeat,omitempty"`
	// HeartbeatEvery is the agent's heartbeat interval, as a Go duration:
	// it writes a status commit at least that often, and the fleet calls
	// an install whose last status commit is older than twice that
	// Unreachable. Empty when the agent sends no heartbeat.
	HeartbeatEvery string `json:"heartbeatEvery,omitempty"`
	// Requests are the operators' requests the agent answered or refused,
	// by id: each runs once, and a restarted agent does not run it again.
	// An entry stays until a day after the request's deadline.
	Requests map[string]RequestState `json:"requests,omitempty"`
	// Artifacts says whether the agent that wrote the status verifies
	// artifacts before it deploys them: ArtifactsVerified, or
	// ArtifactsUnverified when it runs with verification switched off.
	// Empty in statuses written before agents reported it.
	Artifacts  string                     `json:"artifacts,omitempty"`
	Components map[string]ComponentStatus `json:"components"`
}

// States of a request, in the status and in `nuon requests`.
const (
	// RequestPending: filed, not answered yet.
	RequestPending = "pending"
	// RequestAnswered: the agent ran it; the answer is in the status tree.
	RequestAnswered = "answered"
	// RequestRefused: the agent would not run it; Reason says why.
	RequestRefused = "refused"
	// RequestExpired: its deadline passed before the agent saw it.
	RequestExpired = "expired"
)

// AnswersDir is the folder of the status tree that holds request
// answers, answers/<id>.txt: large answers are blobs, never in the commit
// message.
const AnswersDir = "answers"

// RequestState is how the agent dealt with one request.
type RequestState struct {
	// State is answered or refused.
	State     string    `json:"state"`
	Type      string    `json:"type"`
	Component string    `json:"component,omitempty"`
	Requester string    `json:"requester"`
	Deadline  time.Time `json:"deadline"`
	// At is when the agent answered or refused.
	At time.Time `json:"at"`
	// Reason says why it was refused.
	Reason string `json:"reason,omitempty"`
	// Answer is the answer's path in the status tree
	// (answers/<id>.txt); Bytes its size before truncation, Truncated
	// whether it was cut at the request's bound.
	Answer    string `json:"answer,omitempty"`
	Bytes     int    `json:"bytes,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	// Job is the debug job that answered.
	Job string `json:"job,omitempty"`
}

// Kinds of operations an install's `operations:` settings can turn off,
// and of requests an operator can file.
const (
	RequestLogs  = "logs"
	RequestDebug = "debug"
	RequestDrift = "drift"
)

// Forged records a commit the agent found on its status ref that it did
// not write. The agent's next status commit is a merge whose first parent
// is its own last verified status and whose second parent is Commit, so
// the forged commit stays reachable for audit and the ref only moves
// forward.
type Forged struct {
	Commit string `json:"commit"`
	Reason string `json:"reason"`
}

// Artifact verification of an agent, in a status.
const (
	// ArtifactsVerified: every artifact is deployed only after its
	// signature by the vendor's key was verified.
	ArtifactsVerified = "Verified"
	// ArtifactsUnverified: the agent was told to deploy artifacts without
	// verifying them (--insecure-skip-artifact-verification).
	ArtifactsUnverified = "Unverified"
)

// Refusal records a desired commit the agent would not apply.
type Refusal struct {
	Commit string `json:"commit"`
	Reason string `json:"reason"`
}

// ComponentStatus is how one component stands in the install.
type ComponentStatus struct {
	Phase   string `json:"phase"`
	Version string `json:"version,omitempty"`
	// Digests of the artifacts applied, by artifact name.
	Digests map[string]string `json:"digests,omitempty"`
	// Spec is the hash of the rendered component file that was applied;
	// the planner compares it with the desired one.
	Spec      string         `json:"spec,omitempty"`
	Outputs   map[string]any `json:"outputs,omitempty"`
	Sensitive []string       `json:"sensitive,omitempty"`
	Job       string         `json:"job,omitempty"`
	Error     string         `json:"error,omitempty"`
	// Health is how the component stands, as its last apply, drift or
	// health job found; shown next to the phase.
	Health *Health `json:"health,omitempty"`
	// Drift is what differed from the desired state at the last drift
	// check; empty when nothing did.
	Drift []ResourceDrift `json:"drift,omitempty"`
	// Corrected says the Drift above was corrected: the component's mode
	// is correct and the agent re-applied its applied spec.
	Corrected bool `json:"corrected,omitempty"`
	// BrokenLock is the state lock of a dead job that the last apply
	// broke before it ran.
	BrokenLock *StateLock `json:"brokenLock,omitempty"`
	// Plan is the saved plan that waits for approval (phase
	// AwaitingApproval), or was refused or rejected.
	Plan *PlanRecord `json:"plan,omitempty"`
}

package schemas

import "time"

// Operations a job performs on a component.
const (
	OpCreate = "create"
	OpUpdate = "update"
	OpDelete = "delete"
)

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
	// Operation is create, update or delete.
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
	// Timeout bounds the job, as a Go duration.
	Timeout string `json:"timeout"`
	// StateDir is the component's persistent directory in the install
	// (terraform state, plugin caches).
	StateDir string `json:"stateDir"`
	// ResultFile is where the job writes its JobResult.
	ResultFile string `json:"resultFile"`
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
	Forged     *Forged                    `json:"forged,omitempty"`
	Components map[string]ComponentStatus `json:"components"`
}

// Forged records a commit the agent found on its status ref that it did
// not write. The agent's next status commit is a merge whose first parent
// is its own last verified status and whose second parent is Commit, so
// the forged commit stays reachable for audit and the ref only moves
// forward.
type Forged struct {
	Commit string `json:"commit"`
	Reason string `json:"reason"`
}

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
}

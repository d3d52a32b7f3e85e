package schemas

import "time"

// APIVersion is the version written into every rendered, job and status file.
const APIVersion = "nuon.dev/v1"

// Component types. Each names the plugin that applies it.
const (
	TypeTerraform = "terraform"
	TypeHelm      = "helm"
	TypeManifests = "manifests"
	TypeImage     = "image"
	// TypePlugin is a component applied by a vendor's plugin: the
	// component's plugin settings name it and what it is granted, and
	// each release of the component pins the plugin's artifact (named
	// PluginArtifactName) by digest.
	TypePlugin = "plugin"
)

// App is nuon.yaml on main: the application and its components.
type App struct {
	// Name names the application.
	Name string `yaml:"name" json:"name"`
	// Components in the order they are declared; the order has no meaning:
	// dependsOn decides what runs first.
	Components []Component `yaml:"components" json:"components"`
	// Freshness bounds how long rendered state is trusted as current;
	// nil: it never expires.
	Freshness *Freshness `yaml:"freshness,omitempty" json:"freshness,omitempty"`
	// Sandbox, when set, makes the install's sandbox a component the
	// agent manages: released as releases/sandbox.yaml, pinned by every
	// channel as the component SandboxComponent, applied before every
	// other component, its outputs read as ${install.sandbox.outputs.…}.
	Sandbox *AppSandbox `yaml:"sandbox,omitempty" json:"sandbox,omitempty"`
}

// SandboxComponent is the sandbox's name wherever components are named:
// channel pins, install overrides, releases/sandbox.yaml, the rendered
// components/sandbox.json and the agent's status. No component of
// nuon.yaml may take it when the app declares a sandbox.
const SandboxComponent = "sandbox"

// AppSandbox is nuon.yaml's sandbox: the Terraform module (sandboxes/)
// every install runs on, versioned and released like a component. A
// release holds one artifact per sandbox name (local, aws-eks); an install
// gets the one its sandbox.name names.
type AppSandbox struct {
	// Repository is where the sandbox's artifacts come from unless a
	// release artifact names its own.
	Repository string `yaml:"repository" json:"repository"`
	// Inputs are the module's variables common to every install; they may
	// reference ${install.id} and ${install.inputs.NAME}. An install's
	// sandbox.inputs are added to them and win; install_id is always the
	// install's id.
	Inputs map[string]any `yaml:"inputs,omitempty" json:"inputs,omitempty"`
	// Terraform tunes the terraform plugin for the sandbox's jobs.
	Terraform *TerraformSettings `yaml:"terraform,omitempty" json:"terraform,omitempty"`
}

// SandboxOutputs is the sandboxes' outputs contract (sandboxes/README.md):
// each output an object with these keys. ${install.sandbox.outputs.…} may
// name only these.
var SandboxOutputs = map[string][]string{
	"cluster":  {"name", "endpoint", "certificate_authority", "arn"},
	"vpc":      {"id", "public_subnet_ids", "private_subnet_ids"},
	"registry": {"url", "repository_prefix", "region"},
	"dns":      {"domain", "public_zone_id", "private_zone_id"},
	"agent":    {"role_arn", "namespace", "service_account"},
}

// Freshness is the tenant's freshness bound (see app.schema.json).
type Freshness struct {
	// ValidFor is how long a signed per-install commit is fresh.
	ValidFor string `yaml:"validFor" json:"validFor"`
	// RenewBefore is when, before expiry, the renderer re-signs; default
	// a third of ValidFor.
	RenewBefore string `yaml:"renewBefore,omitempty" json:"renewBefore,omitempty"`
}

// Durations returns ValidFor and RenewBefore (defaulted); f must have
// passed the schema.
func (f *Freshness) Durations() (validFor, renewBefore time.Duration) {
	validFor, _ = time.ParseDuration(f.ValidFor)
	renewBefore, _ = time.ParseDuration(f.RenewBefore)
	if renewBefore <= 0 || renewBefore >= validFor {
		renewBefore = validFor / 3
	}
	return validFor, renewBefore
}

// Component is one deployable part of the app.
type Component struct {
	Name string `yaml:"name" json:"name"`
	Type string `yaml:"type" json:"type"`
	// Repository is the vendor OCI repository its artifacts come from, for
	// example registry.vendor.example/app/api.
	Repository string   `yaml:"repository" json:"repository"`
	DependsOn  []string `yaml:"dependsOn,omitempty" json:"dependsOn,omitempty"`
	// Inputs are the component's variables (terraform) or values (helm).
	// Strings may hold references: ${install.inputs.NAME},
	// ${install.id}, ${components.NAME.outputs.OUTPUT} (resolved in the
	// install) and ${secrets.NAME} (resolved in the install, never rendered).
	Inputs map[string]any `yaml:"inputs,omitempty" json:"inputs,omitempty"`
	// Outputs names the outputs other components may reference.
	Outputs []string `yaml:"outputs,omitempty" json:"outputs,omitempty"`

	Terraform *TerraformSettings `yaml:"terraform,omitempty" json:"terraform,omitempty"`
	Helm      *HelmSettings      `yaml:"helm,omitempty" json:"helm,omitempty"`
	Manifests *ManifestSettings  `yaml:"manifests,omitempty" json:"manifests,omitempty"`
	// Plugin, on a component of type plugin, names the vendor's plugin
	// that applies it and the capabilities it is granted.
	Plugin *PluginSettings `yaml:"plugin,omitempty" json:"plugin,omitempty"`
	// Drift says whether and how often the agent checks the component for
	// drift; absent means the defaults of DriftSettings.
	Drift *DriftSettings `yaml:"drift,omitempty" json:"drift,omitempty"`
	// Approval says when a change waits for a signed approval of its
	// exact plan; absent means every plan applies at once.
	Approval *ApprovalSettings `yaml:"approval,omitempty" json:"approval,omitempty"`
}

// Drift modes of a component.
const (
	// DriftOff: the agent never checks the component between jobs.
	DriftOff = "off"
	// DriftReport: the agent checks and reports what differs, and changes
	// nothing.
	DriftReport = "report"
	// DriftCorrect: the agent checks, reports, and re-applies exactly the
	// desired state when something differs.
	DriftCorrect = "correct"
)

// Defaults of DriftSettings.
const (
	// DefaultDriftMode is report: a hand edit is noticed, never undone
	// without asking.
	DefaultDriftMode = DriftReport
	// DefaultDriftSchedule is how often a component is checked: at most
	// one plan per component per hour.
	DefaultDriftSchedule = "1h"
)

// DriftSettings are a component's drift detection: a check is a
// read-only job (operation drift) that compares the install with the
// desired state.
type DriftSettings struct {
	// Mode is off, report or correct; default DefaultDriftMode.
	Mode string `yaml:"mode,omitempty" json:"mode,omitempty"`
	// Schedule is the time between two checks, as a Go duration; default
	// DefaultDriftSchedule.
	Schedule string `yaml:"schedule,omitempty" json:"schedule,omitempty"`
}

// EffectiveMode is d's mode, or DefaultDriftMode when d or its mode is
// empty.
func (d *DriftSettings) EffectiveMode() string {
	if d == nil || d.Mode == "" {
		return DefaultDriftMode
	}
	return d.Mode
}

// EffectiveSchedule is d's schedule, or DefaultDriftSchedule when d or its
// schedule is empty or not a positive duration.
func (d *DriftSettings) EffectiveSchedule() time.Duration {
	if d != nil {
		if v, err := time.ParseDuration(d.Schedule); err == nil && v > 0 {
			return v
		}
	}
	v, _ := time.ParseDuration(DefaultDriftSchedule)
	return v
}

// TerraformSettings tune the terraform plugin.
type TerraformSettings struct {
	// Timeout bounds one job, as a Go duration; default 30m.
	Timeout string `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Health names a check the component must pass after every apply;
	// none by default (health then follows the apply's outcome).
	Health *TerraformHealth `yaml:"health,omitempty" json:"health,omitempty"`
}

// TerraformHealth is a terraform component's health check.
type TerraformHealth struct {
	// Output names a module output that must be true: false (or missing,
	// or not a boolean) makes the component Failed.
	Output string `yaml:"output" json:"output"`
}

// HelmSettings tune the helm plugin.
type HelmSettings struct {
	// Release is the Helm release name; default the component name.
	Release   string `yaml:"release,omitempty" json:"release,omitempty"`
	Namespace string `yaml:"namespace,omitempty" json:"namespace,omitempty"`
	Timeout   string `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Wait makes an apply wait until the release's resources are Ready
	// (kstatus), within the job's timeout; off by default, as in helm.
	Wait bool `yaml:"wait,omitempty" json:"wait,omitempty"`
}

// ManifestSettings tune the manifests plugin.
type ManifestSettings struct {
	Namespace string `yaml:"namespace,omitempty" json:"namespace,omitempty"`
	// Wait for the applied objects to become healthy.
	Wait bool `yaml:"wait,omitempty" json:"wait,omitempty"`
	// Recreate allows deleting and recreating an object whose immutable
	// fields changed.
	Recreate bool   `yaml:"recreate,omitempty" json:"recreate,omitempty"`
	Timeout  string `yaml:"timeout,omitempty" json:"timeout,omitempty"`
}

// Channel is channels/<name>.yaml: which version of each component the
// installs on this channel run. Promotion is a pull request that edits a pin.
type Channel struct {
	// Components maps component name to version.
	Components map[string]string `yaml:"components" json:"components"`
	// Rollout, when set, declares the waves a change of this channel's
	// pins reaches its installs in (package rollout); nil: every install
	// at once.
	Rollout *Rollout `yaml:"rollout,omitempty" json:"rollout,omitempty"`
}

// Release is releases/<component>.yaml: every released version of one
// component and its artifacts' digests. Vendor CI appends to it.
type Release struct {
	Component string           `yaml:"component" json:"component"`
	Versions  []ReleaseVersion `yaml:"versions" json:"versions"`
}

// ReleaseVersion is one released version.
type ReleaseVersion struct {
	Version string `yaml:"version" json:"version"`
	// Artifacts maps an artifact name (for example "chart" or "module")
	// to its digest.
	Artifacts map[string]ReleaseArtifact `yaml:"artifacts" json:"artifacts"`
}

// ReleaseArtifact is one OCI artifact of a release.
type ReleaseArtifact struct {
	// Repository defaults to the component's repository.
	Repository string `yaml:"repository,omitempty" json:"repository,omitempty"`
	Digest     string `yaml:"digest" json:"digest"`
	MediaType  string `yaml:"mediaType,omitempty" json:"mediaType,omitempty"`
}

// Install is installs/<id>.yaml: one customer install. Its id is the file's
// name.
type Install struct {
	// ID may be omitted; when present it must equal the file's name.
	ID      string `yaml:"id,omitempty" json:"id,omitempty"`
	Channel string `yaml:"channel" json:"channel"`
	// Labels group installs for rollouts: a channel's rollout waves
	// select installs by them. Keys and values are Kubernetes label keys
	// and values. They stay on main: nothing in the install reads them,
	// so relabelling an install does not re-render it.
	Labels map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
	// Versions overrides the channel's pin for single components.
	Versions map[string]string `yaml:"versions,omitempty" json:"versions,omitempty"`
	// Inputs are the install's own values, referenced by components as
	// ${install.inputs.NAME}.
	Inputs  map[string]string `yaml:"inputs,omitempty" json:"inputs,omitempty"`
	Cloud   Cloud             `yaml:"cloud" json:"cloud"`
	Sandbox Sandbox           `yaml:"sandbox" json:"sandbox"`
	// Registry is the install's own OCI registry and path prefix, where the
	// agent copies artifacts before deploying them. It may be left out when
	// nuon.yaml declares a sandbox: the agent then copies into the
	// sandbox's registry output (url/repository_prefix). When both exist,
	// this one wins.
	Registry string `yaml:"registry,omitempty" json:"registry,omitempty"`
	// AgentKey is the OpenSSH public key the install's agent signs status
	// commits with.
	AgentKey string `yaml:"agentKey" json:"agentKey"`
	// Operations is the customer's veto on what the vendor may do in the
	// install besides applying its desired state; absent allows all.
	Operations *Operations `yaml:"operations,omitempty" json:"operations,omitempty"`
	// Deleted, set by `nuon install delete`, renders the install with no
	// components: its agent deletes every component it applied, in
	// reverse dependency order, and reports each in its status.
	Deleted bool `yaml:"deleted,omitempty" json:"deleted,omitempty"`
	// Approvals overrides nuon.yaml's approval rules per component, by
	// component name.
	Approvals map[string]*ApprovalSettings `yaml:"approvals,omitempty" json:"approvals,omitempty"`
}

// Operations turns kinds of vendor requests on or off for one install. A
// field left out allows that kind; the agent refuses a request of a kind
// set to false and says so in its status.
type Operations struct {
	// Logs allows log requests.
	Logs *bool `yaml:"logs,omitempty" json:"logs,omitempty"`
	// Debug allows debug commands.
	Debug *bool `yaml:"debug,omitempty" json:"debug,omitempty"`
	// Drift allows scheduled drift checks (and their corrections).
	Drift *bool `yaml:"drift,omitempty" json:"drift,omitempty"`
}

// Allows tells whether o lets the agent run requests of kind ("logs",
// "debug" or "drift"); a nil o or an unset field allows it.
func (o *Operations) Allows(kind string) bool {
	if o == nil {
		return true
	}
	var v *bool
	switch kind {
	case RequestLogs:
		v = o.Logs
	case RequestDebug:
		v = o.Debug
	case RequestDrift:
		v = o.Drift
	default:
		return false
	}
	return v == nil || *v
}

// Cloud says where an install runs.
type Cloud struct {
	Provider  string `yaml:"provider" json:"provider"`
	Region    string `yaml:"region,omitempty" json:"region,omitempty"`
	AccountID string `yaml:"accountID,omitempty" json:"accountID,omitempty"`
}

// Sandbox names the install's base infrastructure.
type Sandbox struct {
	// Name is the sandbox (local, aws-eks): which artifact of the
	// sandbox's release the install runs.
	Name string `yaml:"name" json:"name"`
	// Version overrides the channel's sandbox pin for this install.
	Version string `yaml:"version,omitempty" json:"version,omitempty"`
	// Inputs are the module's variables for this install; they win over
	// nuon.yaml's sandbox inputs.
	Inputs map[string]any `yaml:"inputs,omitempty" json:"inputs,omitempty"`
	// Role is the role the agent assumes to apply sandbox upgrades on AWS
	// (the stack's maintenance role); none on local.
	Role *SandboxRole `yaml:"role,omitempty" json:"role,omitempty"`
	// State is where the sandbox's Terraform state is on AWS: the S3
	// object nuon install create applied it with, which the agent's
	// sandbox jobs keep using (with Role's credentials). None locally:
	// the state is then a file in the agent's sandbox directory.
	State *S3State `yaml:"state,omitempty" json:"state,omitempty"`
}

// S3State is a Terraform state kept in an S3 object by Terraform's s3
// backend, locked by a lock file beside it (KEY.tflock, use_lockfile).
// Nothing here is a secret: the credentials come with the job.
type S3State struct {
	Bucket string `yaml:"bucket" json:"bucket"`
	Key    string `yaml:"key" json:"key"`
	Region string `yaml:"region" json:"region"`
}

// SandboxRole is a role the agent assumes, from its own identity, with
// stack.AssumeRole. Neither field is a secret: the ExternalId guards
// against a confused deputy, not against a reader of git.
type SandboxRole struct {
	ARN        string `yaml:"arn" json:"arn"`
	ExternalID string `yaml:"externalID" json:"externalID"`
}

// InstallState is installs/<id>/install.json in the rendered tree: the
// install-wide part of its desired state. The tree is a pure function of
// main's content, so it holds no generation and no source commit: those are
// trailers of the signed commit on refs/heads/nuon/installs/<id> (see
// Trailer…), which change only when the tree does.
type InstallState struct {
	APIVersion string  `json:"apiVersion"`
	Kind       string  `json:"kind"`
	Install    string  `json:"install"`
	App        string  `json:"app"`
	Channel    string  `json:"channel"`
	Cloud      Cloud   `json:"cloud"`
	Sandbox    Sandbox `json:"sandbox"`
	Registry   string  `json:"registry"`
	// Components lists the component names in dependency order.
	Components []string `json:"components"`
	// Operations is the install's veto on vendor requests, as
	// installs/<id>.yaml says.
	Operations *Operations `json:"operations,omitempty"`
	// Deleted says the install is being deleted; Components is then empty.
	Deleted bool `json:"deleted,omitempty"`
}

// ComponentState is installs/<id>/components/<name>.json in the rendered
// tree: everything an agent needs to apply one component.
type ComponentState struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Name       string     `json:"name"`
	Type       string     `json:"type"`
	Version    string     `json:"version"`
	DependsOn  []string   `json:"dependsOn,omitempty"`
	Artifacts  []Artifact `json:"artifacts,omitempty"`
	// Inputs with every ${install.…} reference resolved; references to other
	// components' outputs and to secrets remain, resolved in the install.
	Inputs    map[string]any     `json:"inputs,omitempty"`
	Terraform *TerraformSettings `json:"terraform,omitempty"`
	Helm      *HelmSettings      `json:"helm,omitempty"`
	Manifests *ManifestSettings  `json:"manifests,omitempty"`
	// Plugin, on a component of type plugin, is the plugin that applies
	// it and what it is granted; its artifact is the one of Artifacts
	// named PluginArtifactName.
	Plugin *PluginSettings `json:"plugin,omitempty"`
	// Drift is the component's drift detection, as nuon.yaml says.
	Drift *DriftSettings `json:"drift,omitempty"`
	// Approval is the component's approval rules: the install's override,
	// else nuon.yaml's.
	Approval *ApprovalSettings `json:"approval,omitempty"`
}

// Artifact is an OCI artifact pinned by digest.
type Artifact struct {
	Name string `json:"name"`
	// Source is the vendor reference, repository@digest.
	Source string `json:"source,omitempty"`
	// Local is the install-registry reference the agent deploys from.
	Local     string `json:"local"`
	Digest    string `json:"digest"`
	MediaType string `json:"mediaType,omitempty"`
}

// Kinds of rendered, job and status files.
const (
	KindInstallState   = "InstallState"
	KindComponentState = "ComponentState"
	KindJob            = "Job"
	KindStatus         = "InstallStatus"
)

package schemas

import "encoding/json"

// Schema names of the plugin protocol's documents.
const (
	SchemaPluginRequest  = "plugin-request.schema.json"
	SchemaPluginResponse = "plugin-response.schema.json"
	SchemaPluginManifest = "plugin-manifest.schema.json"
)

// Kinds of the plugin protocol's documents.
const (
	KindPluginRequest  = "PluginRequest"
	KindPluginResponse = "PluginResponse"
	KindPluginManifest = "Plugin"
)

// The plugin protocol's documents validate like every other format.
func init() {
	goTypes[SchemaPluginRequest] = func() any { return new(PluginRequest) }
	goTypes[SchemaPluginResponse] = func() any { return new(PluginResponse) }
	goTypes[SchemaPluginManifest] = func() any { return new(PluginManifest) }
}

// Plugin operations: what a PluginRequest asks. A job's create and update
// are an apply, its delete a destroy.
const (
	// PluginHandshake asks the plugin for its manifest: the protocol
	// versions it speaks, its operations and the capabilities it needs.
	// It comes before any other operation and carries no job.
	PluginHandshake = "handshake"
	// PluginPlan says what an apply would change and changes nothing.
	PluginPlan    = "plan"
	PluginApply   = "apply"
	PluginDestroy = "destroy"
	PluginDrift   = "drift"
	PluginHealth  = "health"
	PluginDebug   = "debug"
)

// PluginOperations lists every operation but the handshake, in a fixed
// order.
var PluginOperations = []string{PluginPlan, PluginApply, PluginDestroy, PluginDrift, PluginHealth, PluginDebug}

// PluginRequest is what a job hands a plugin process on its stdin.
type PluginRequest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Protocol is the request's protocol version: on a handshake the
	// newest the job speaks, afterwards the one the handshake agreed.
	Protocol int `json:"protocol"`
	// Protocols, on a handshake, are all the versions the job speaks.
	Protocols []int  `json:"protocols,omitempty"`
	Operation string `json:"operation"`
	// Job is the job manifest; its Plugin names the plugin. Absent on a
	// handshake.
	Job *Job `json:"job,omitempty"`
	// StateDir is the component's persistent directory.
	StateDir string `json:"stateDir,omitempty"`
	// WorkDir is a scratch directory of the request's own.
	WorkDir string `json:"workDir,omitempty"`
	// Artifacts are the job's artifacts, pulled, verified and extracted.
	Artifacts []PluginArtifact `json:"artifacts,omitempty"`
	// Granted is what the job lets the plugin use.
	Granted *PluginCapabilities `json:"granted,omitempty"`
}

// PluginArtifactName names, among a plugin component's release artifacts,
// the plugin's own artifact: `nuon plugin release` pushes and signs it,
// `nuon release COMPONENT --artifact plugin=REPO@DIGEST` records it.
const PluginArtifactName = "plugin"

// PluginImageArtifactName names, among a plugin component's release
// artifacts, the plugin's container image: the same release of the
// plugin as an OCI image whose entrypoint is its linux/amd64 executable,
// which the Kubernetes runner runs as a container of its own. `nuon
// plugin release` pushes and signs it beside the PluginArtifactName
// artifact and records both; the image names that artifact's digest, so
// the two are one release.
const PluginImageArtifactName = "plugin-image"

// PluginSettings are nuon.yaml's plugin of a component of type plugin.
// Granting a capability is a change on main, reviewed like any other: a
// new version of the plugin whose signed manifest needs more than Grants
// is refused by the job and applies nothing.
type PluginSettings struct {
	// Name is the plugin's name, as its signed manifest says.
	Name string `yaml:"name" json:"name"`
	// Grants are the capabilities the plugin may use; none by default.
	Grants *PluginCapabilities `yaml:"grants,omitempty" json:"grants,omitempty"`
}

// PluginArtifact is one of the job's artifacts, extracted to Dir after
// its digest was verified.
type PluginArtifact struct {
	Name      string `json:"name"`
	Digest    string `json:"digest"`
	MediaType string `json:"mediaType,omitempty"`
	Dir       string `json:"dir"`
}

// PluginResponse is what a plugin answers on its stdout.
type PluginResponse struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Protocol   int    `json:"protocol"`
	Operation  string `json:"operation"`
	// Plugin is the plugin's manifest, on a handshake.
	Plugin    *PluginManifest `json:"plugin,omitempty"`
	Outputs   map[string]any  `json:"outputs,omitempty"`
	Sensitive []string        `json:"sensitive,omitempty"`
	Changed   bool            `json:"changed,omitempty"`
	// Plan is the plan record of a plan (or an apply), opaque to the
	// protocol.
	Plan   json.RawMessage `json:"plan,omitempty"`
	Drift  []ResourceDrift `json:"drift,omitempty"`
	Health *Health         `json:"health,omitempty"`
	Answer *Answer         `json:"answer,omitempty"`
	// Error fails the operation, whatever the exit code.
	Error *PluginError `json:"error,omitempty"`
}

// Plugin error codes: how a job treats a failed operation.
const (
	// PluginFailed: the operation ran and failed; it may succeed later.
	PluginFailed = "failed"
	// PluginInvalid: the request was wrong; the same request fails again.
	PluginInvalid = "invalid"
	// PluginUnsupported: the plugin has no such operation or protocol.
	PluginUnsupported = "unsupported"
	// PluginRefused: a debug command the plugin refuses to run.
	PluginRefused = "refused"
)

// PluginError is why a plugin's operation failed.
type PluginError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// PluginManifest is what a plugin is and needs. It states it in its
// handshake and ships it beside its executables.
type PluginManifest struct {
	APIVersion   string             `json:"apiVersion"`
	Kind         string             `json:"kind"`
	Name         string             `json:"name"`
	Version      string             `json:"version"`
	Description  string             `json:"description,omitempty"`
	Protocols    []int              `json:"protocols"`
	Operations   []string           `json:"operations"`
	Capabilities PluginCapabilities `json:"capabilities"`
	// Executables are, for the process runner, the executable per
	// platform (linux/amd64) as a path inside the plugin's artifact.
	Executables map[string]string `json:"executables,omitempty"`
}

// PluginCapabilities are what a plugin may use beyond its request. A
// manifest declares what the plugin needs; the job grants what the
// desired state allows; a plugin that needs more is not run.
type PluginCapabilities struct {
	// Network: open connections (a cloud API, a cluster).
	Network bool `yaml:"network,omitempty" json:"network,omitempty"`
	// Secrets: receive the install's NUON_SECRET_* variables.
	Secrets bool `yaml:"secrets,omitempty" json:"secrets,omitempty"`
	// CloudRole: receive the install's cloud credentials (AWS_*).
	CloudRole bool `yaml:"cloudRole,omitempty" json:"cloudRole,omitempty"`
	// WritableState: write the component's state directory.
	WritableState bool `yaml:"writableState,omitempty" json:"writableState,omitempty"`
	// Env names further variables of the job's environment the plugin
	// receives.
	Env []string `yaml:"env,omitempty" json:"env,omitempty"`
}

package plugin

import (
	"fmt"
	"runtime/debug"

	"nuon.dev/nuon/schemas"
)

// Kubernetes' in-cluster configuration: where a pod finds its API server.
var kubeEnv = []string{"KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}

// builtinCapabilities are what the built-in plugins need: the network
// (a cluster, a cloud), the install's secrets, their state directory and
// the variables that point them at their tools and state. terraform also
// takes the cloud role (its providers and its s3 backend).
var builtinCapabilities = map[string]schemas.PluginCapabilities{
	schemas.TypeTerraform: {Network: true, Secrets: true, CloudRole: true, WritableState: true,
		Env: append([]string{"TF_CLI_CONFIG_FILE", "TF_PLUGIN_CACHE_DIR",
			"NUON_TF_STATE_NAMESPACE", "NUON_TF_STATE_SECRET_SUFFIX", "NUON_TF_STATE_STALE_LOCK"}, kubeEnv...)},
	schemas.TypeHelm:      {Network: true, Secrets: true, WritableState: true, Env: kubeEnv},
	schemas.TypeManifests: {Network: true, Secrets: true, WritableState: true, Env: kubeEnv},
}

// Builtin is the manifest of built-in plugin name, as this binary
// serves it (`nuon plugin serve NAME`); its operations are filled in
// by the Server from what the plugin implements.
func Builtin(name string) (schemas.PluginManifest, error) {
	caps, ok := builtinCapabilities[name]
	if !ok {
		return schemas.PluginManifest{}, fmt.Errorf("no built-in plugin %q", name)
	}
	return schemas.PluginManifest{APIVersion: schemas.APIVersion, Kind: schemas.KindPluginManifest,
		Name: name, Version: BuildVersion(), Description: "nuon's built-in " + name + " plugin",
		Protocols: Protocols, Capabilities: caps}, nil
}

// BuiltinGrant is what a job grants built-in plugin name: what it needs.
// The built-ins ship in nuon's own binary, which the job trusts already.
func BuiltinGrant(name string) schemas.PluginCapabilities {
	return builtinCapabilities[name]
}

// BuildVersion is this binary's version as a plugin version: its module
// version, or 0.0.0-dev with the commit it was built from.
func BuildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "0.0.0-dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return "0.0.0-dev+" + s.Value[:12]
		}
	}
	return "0.0.0-dev"
}

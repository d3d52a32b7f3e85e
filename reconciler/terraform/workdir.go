package terraform

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"nuon.dev/nuon/reconciler"
)

// ModuleArtifact names the artifact that holds the module when a job has
// more than one.
const ModuleArtifact = "module"

// Files in the component's state directory.
const (
	// moduleDir is where the module is extracted, afresh for every job.
	moduleDir = "module"
	// stateFile is terraform's state; it lives outside moduleDir so that
	// re-extracting the module never touches it.
	stateFile = "terraform.tfstate"
)

// Files the plugin writes into the module.
const (
	// overrideFile points the local backend at stateFile, or configures
	// the kubernetes or s3 backend. As an override file it replaces whatever
	// backend the module declares.
	overrideFile = "nuon_override.tf.json"
	// varFile holds the job's inputs; terraform loads *.auto.tfvars.json
	// by itself, in plan and destroy alike.
	varFile = "nuon.auto.tfvars.json"
	// planFile is the saved plan that apply carries out.
	planFile = "nuon.tfplan"
)

// extract replaces the working directory with the module from the job's
// artifact, the backend override and the variables file.
func (r *run) extract(ctx context.Context) error {
	a, err := reconciler.JobArtifact(r.job, ModuleArtifact)
	if err != nil {
		return err
	}
	if err := reconciler.ExtractFresh(ctx, r.env, a, r.dir); err != nil {
		return err
	}
	if err := writeBackend(filepath.Join(r.dir, overrideFile), r.backendConfig()); err != nil {
		return err
	}
	return writeVarFile(filepath.Join(r.dir, varFile), r.vars)
}

// backendConfig is the backend block's type and body: the s3 backend
// when the job names an S3 object, the kubernetes backend when the run
// has one, else the local state file.
func (r *run) backendConfig() map[string]any {
	if r.s3 != nil {
		return map[string]any{"s3": r.s3.config(r.lookup)}
	}
	if r.backend != nil {
		return map[string]any{"kubernetes": r.backend.config(r.lookup)}
	}
	return map[string]any{"local": map[string]any{"path": escapeTemplate(r.state)}}
}

// writeBackend writes a JSON-syntax override file with the backend block
// backend, which replaces any backend the module declares.
func writeBackend(path string, backend map[string]any) error {
	override := map[string]any{
		"terraform": map[string]any{"backend": backend},
	}
	b, err := json.MarshalIndent(override, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o600)
}

// escapeTemplate keeps terraform from reading ${ and %{ in s as template
// sequences.
func escapeTemplate(s string) string {
	return strings.NewReplacer("${", "$${", "%{", "%%{").Replace(s)
}

package terraform

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"nuon.dev/nuon/schemas"
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
	// overrideFile points the local backend at stateFile. As an override
	// file it replaces whatever backend the module declares.
	overrideFile = "nuon_override.tf.json"
	// varFile holds the job's inputs; terraform loads *.auto.tfvars.json
	// by itself, in plan and destroy alike.
	varFile = "nuon.auto.tfvars.json"
	// planFile is the saved plan that apply carries out.
	planFile = "nuon.tfplan"
)

// moduleArtifact picks the job's artifact named ModuleArtifact, or its only
// artifact.
func moduleArtifact(arts []schemas.Artifact) (schemas.Artifact, error) {
	for _, a := range arts {
		if a.Name == ModuleArtifact {
			return a, nil
		}
	}
	if len(arts) == 1 {
		return arts[0], nil
	}
	names := make([]string, len(arts))
	for i, a := range arts {
		names[i] = a.Name
	}
	return schemas.Artifact{}, fmt.Errorf("no %q artifact among %d: %v", ModuleArtifact, len(arts), names)
}

// extract replaces the working directory with the module from the job's
// artifact, the backend override and the variables file.
func (r *run) extract(ctx context.Context) error {
	a, err := moduleArtifact(r.job.Artifacts)
	if err != nil {
		return err
	}
	if r.env.Artifacts == nil {
		return fmt.Errorf("artifact %s: no artifact source", a.Name)
	}
	if err := os.RemoveAll(r.dir); err != nil {
		return err
	}
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return err
	}
	if err := r.env.Artifacts.Extract(ctx, a, r.dir); err != nil {
		return fmt.Errorf("artifact %s %s: %w", a.Name, a.Digest, err)
	}
	if err := writeBackend(filepath.Join(r.dir, overrideFile), r.state); err != nil {
		return err
	}
	return writeVarFile(filepath.Join(r.dir, varFile), r.vars)
}

// writeBackend writes a JSON-syntax override file that keeps the state in
// the local file state.
func writeBackend(path, state string) error {
	override := map[string]any{
		"terraform": map[string]any{
			"backend": map[string]any{
				"local": map[string]any{"path": escapeTemplate(state)},
			},
		},
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

package renderer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"nuon.dev/nuon/schemas"
)

// Files is one install's rendered state: path (relative to installs/<id>/)
// to content.
type Files map[string][]byte

// Install renders one install's desired state from the source. It is pure:
// the same source gives byte-identical files.
func Install(src *schemas.Source, id string) (Files, error) {
	in, ok := src.Installs[id]
	if !ok {
		return nil, fmt.Errorf("render %s: no such install", id)
	}
	return installFiles(src, id, in)
}

// installFiles renders the install id of src, loaded as in.
func installFiles(src *schemas.Source, id string, in schemas.Install) (Files, error) {
	order, err := Order(src.App.Components)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", id, err)
	}
	components := src.App.Components
	sandbox := src.App.Sandbox != nil
	if in.Deleted {
		// Nothing is desired: the agent deletes what it applied, and
		// leaves the sandbox to nuon install delete.
		order, components, sandbox = []string{}, nil, false
	}
	files := Files{}
	if sandbox {
		// The sandbox is applied before everything else.
		order = append([]string{schemas.SandboxComponent}, order...)
		cs, err := sandboxComponent(src, id, in)
		if err != nil {
			return nil, fmt.Errorf("render %s: sandbox: %w", id, err)
		}
		if files[schemas.ComponentStateFile(schemas.SandboxComponent)], err = encode(cs); err != nil {
			return nil, fmt.Errorf("render %s: sandbox: %w", id, err)
		}
	}
	state := schemas.InstallState{
		APIVersion: schemas.APIVersion,
		Kind:       schemas.KindInstallState,
		Install:    id,
		App:        src.App.Name,
		Channel:    in.Channel,
		Cloud:      in.Cloud,
		Sandbox:    in.Sandbox,
		Registry:   in.Registry,
		Components: order,
		Operations: in.Operations,
		Deleted:    in.Deleted,
	}
	if files[schemas.InstallStateFile], err = encode(state); err != nil {
		return nil, fmt.Errorf("render %s: %w", id, err)
	}
	for _, c := range components {
		if sandbox {
			// Every component depends on the sandbox, and may read its
			// outputs.
			c.DependsOn = append(slices.Clone(c.DependsOn), schemas.SandboxComponent)
		}
		cs, err := component(src, id, in, c)
		if err != nil {
			return nil, fmt.Errorf("render %s: component %s: %w", id, c.Name, err)
		}
		if files[schemas.ComponentStateFile(c.Name)], err = encode(cs); err != nil {
			return nil, fmt.Errorf("render %s: component %s: %w", id, c.Name, err)
		}
	}
	return files, nil
}

func component(src *schemas.Source, id string, in schemas.Install, c schemas.Component) (schemas.ComponentState, error) {
	version, ok := in.Versions[c.Name]
	if !ok {
		version, ok = src.Channels[in.Channel].Components[c.Name]
	}
	if !ok {
		return schemas.ComponentState{}, fmt.Errorf("channel %s pins no version", in.Channel)
	}
	rel, ok := src.ReleaseOf(c.Name, version)
	if !ok {
		return schemas.ComponentState{}, fmt.Errorf("version %s has no release record", version)
	}
	cs := schemas.ComponentState{
		APIVersion: schemas.APIVersion,
		Kind:       schemas.KindComponentState,
		Name:       c.Name,
		Type:       c.Type,
		Version:    version,
		DependsOn:  sorted(c.DependsOn),
		Terraform:  c.Terraform,
		Helm:       c.Helm,
		Manifests:  c.Manifests,
		Drift:      c.Drift,
		Approval:   approvalOf(in, c),
		Plugin:     c.Plugin,
	}
	if c.Type == schemas.TypePlugin {
		// A vendor's plugin runs only from its artifact, pinned here by
		// digest with the grants main gives it.
		if _, ok := rel.Artifacts[schemas.PluginArtifactName]; !ok {
			return cs, fmt.Errorf("version %s has no artifact %q: a component of type plugin releases its plugin's artifact under that name", version, schemas.PluginArtifactName)
		}
	}
	names := make([]string, 0, len(rel.Artifacts))
	for n := range rel.Artifacts {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		a := rel.Artifacts[n]
		repo := a.Repository
		if repo == "" {
			repo = c.Repository
		}
		cs.Artifacts = append(cs.Artifacts, schemas.Artifact{
			Name:      n,
			Source:    repo + "@" + a.Digest,
			Local:     LocalRepository(installRegistry(src, in), repo) + "@" + a.Digest,
			Digest:    a.Digest,
			MediaType: a.MediaType,
		})
	}
	if len(c.Inputs) > 0 {
		inputs, err := installInputs(id, in, c.Inputs)
		if err != nil {
			return cs, err
		}
		cs.Inputs = inputs
	}
	return cs, nil
}

// installInputs resolves the install references (${install.id},
// ${install.inputs.NAME}) in inputs; every other reference stays, for the
// agent.
func installInputs(id string, in schemas.Install, inputs map[string]any) (map[string]any, error) {
	out, err := schemas.WalkStrings(inputs, "", func(_, s string) (any, error) {
		return schemas.Substitute(s, func(r schemas.Ref) (any, bool) {
			switch r.Kind {
			case schemas.RefInstallID:
				return id, true
			case schemas.RefInstallInput:
				v, ok := in.Inputs[r.Name]
				return v, ok
			}
			return nil, false
		})
	})
	if err != nil {
		return nil, fmt.Errorf("inputs: %w", err)
	}
	return out.(map[string]any), nil
}

// sandboxRegistry is where the install's artifacts go when its file names
// no registry: the sandbox's registry output, which the agent resolves
// from the outputs it recorded when it applied the sandbox.
const sandboxRegistry = "${install.sandbox.outputs.registry.url}/${install.sandbox.outputs.registry.repository_prefix}"

// installRegistry is the install's registry: the one its file names, which
// wins, else the sandbox's registry output (as references).
func installRegistry(src *schemas.Source, in schemas.Install) string {
	if in.Registry == "" && src.App.Sandbox != nil {
		return sandboxRegistry
	}
	return in.Registry
}

// sandboxComponent renders the sandbox as a terraform component: the
// artifact of its pinned release named after the install's sandbox, as
// the module; nuon.yaml's sandbox inputs, then the install's, then
// install_id; drift checks off (a plan of the whole sandbox every hour
// is the vendor's to ask for, not a default).
func sandboxComponent(src *schemas.Source, id string, in schemas.Install) (schemas.ComponentState, error) {
	sb := src.App.Sandbox
	version, ok := src.SandboxVersion(in)
	if !ok {
		return schemas.ComponentState{}, fmt.Errorf("channel %s pins no version", in.Channel)
	}
	rel, ok := src.ReleaseOf(schemas.SandboxComponent, version)
	if !ok {
		return schemas.ComponentState{}, fmt.Errorf("version %s has no release record", version)
	}
	a, ok := rel.Artifacts[in.Sandbox.Name]
	if !ok {
		return schemas.ComponentState{}, fmt.Errorf("version %s has no artifact %q", version, in.Sandbox.Name)
	}
	repo := a.Repository
	if repo == "" {
		repo = sb.Repository
	}
	cs := schemas.ComponentState{
		APIVersion: schemas.APIVersion,
		Kind:       schemas.KindComponentState,
		Name:       schemas.SandboxComponent,
		Type:       schemas.TypeTerraform,
		Version:    version,
		Artifacts: []schemas.Artifact{{
			Name:      "module",
			Source:    repo + "@" + a.Digest,
			Local:     LocalRepository(installRegistry(src, in), repo) + "@" + a.Digest,
			Digest:    a.Digest,
			MediaType: a.MediaType,
		}},
		Terraform: sb.Terraform,
		Drift:     &schemas.DriftSettings{Mode: schemas.DriftOff},
	}
	inputs, err := installInputs(id, in, sb.Inputs)
	if err != nil {
		return cs, err
	}
	if inputs == nil {
		inputs = map[string]any{}
	}
	for k, v := range in.Sandbox.Inputs {
		inputs[k] = v
	}
	inputs["install_id"] = id
	cs.Inputs = inputs
	return cs, nil
}

// LocalRepository is where the install keeps its copy of a vendor
// repository: the install registry followed by the vendor repository's
// path without its host.
func LocalRepository(registry, vendorRepo string) string {
	p := vendorRepo
	if i := strings.IndexByte(vendorRepo, '/'); i >= 0 {
		p = vendorRepo[i+1:]
	}
	return strings.TrimSuffix(registry, "/") + "/" + p
}

// Order returns the component names in dependency order: every component
// after the ones it depends on, ties broken by name so the order is stable.
func Order(cs []schemas.Component) ([]string, error) {
	deps := map[string][]string{}
	for _, c := range cs {
		deps[c.Name] = c.DependsOn
	}
	var out []string
	done := map[string]bool{}
	for len(out) < len(cs) {
		var ready []string
		for _, c := range cs {
			if done[c.Name] {
				continue
			}
			ok := true
			for _, d := range deps[c.Name] {
				if !done[d] {
					ok = false
					break
				}
			}
			if ok {
				ready = append(ready, c.Name)
			}
		}
		if len(ready) == 0 {
			return nil, fmt.Errorf("dependency cycle among components")
		}
		slices.Sort(ready)
		for _, n := range ready {
			done[n] = true
		}
		out = append(out, ready...)
	}
	return out, nil
}

func sorted(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// encode is the one JSON encoding of rendered files: two-space indents,
// map keys sorted, no HTML escaping, a final newline.
func encode(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

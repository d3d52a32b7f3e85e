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
	order, err := Order(src.App.Components)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", id, err)
	}
	files := Files{}
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
	}
	if files[schemas.InstallStateFile], err = encode(state); err != nil {
		return nil, fmt.Errorf("render %s: %w", id, err)
	}
	for _, c := range src.App.Components {
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
			Local:     LocalRepository(in.Registry, repo) + "@" + a.Digest,
			Digest:    a.Digest,
			MediaType: a.MediaType,
		})
	}
	if len(c.Inputs) > 0 {
		inputs, err := schemas.WalkStrings(map[string]any(c.Inputs), "", func(_, s string) (any, error) {
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
			return cs, fmt.Errorf("inputs: %w", err)
		}
		cs.Inputs = inputs.(map[string]any)
	}
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

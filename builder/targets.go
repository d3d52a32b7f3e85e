package builder

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing/fstest"

	"nuon.dev/nuon/schemas"
)

// Layout is where a component's source lives under a source root, by
// component type: the layout of fixtures/.
//
//	terraform   modules/<component>     a Terraform module
//	helm        charts/<component>      a Helm chart
//	manifests   manifests/<component>   Kubernetes manifests
//	image       images/<component>      an OCI image layout
var Layout = map[string]string{
	schemas.TypeTerraform: "modules",
	schemas.TypeHelm:      "charts",
	schemas.TypeManifests: "manifests",
	schemas.TypeImage:     "images",
}

// SandboxesDir is where the sandboxes' modules live under a source root,
// one folder per sandbox (sandboxes/local, sandboxes/aws-eks): the layout
// of this repository's sandboxes/.
const SandboxesDir = "sandboxes"

// SourceDir is where Layout puts component c under root.
func SourceDir(root string, c schemas.Component) string {
	return filepath.Join(root, Layout[c.Type], c.Name)
}

// LoadApp reads and validates an app file (nuon.yaml). A file over the
// cap on a source file is refused from its size, before it is read.
func LoadApp(file string) (schemas.App, error) {
	f, err := os.Open(file)
	if err != nil {
		return schemas.App{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return schemas.App{}, err
	}
	if err := schemas.CheckSize(schemas.AppFile, fi.Size()); err != nil {
		return schemas.App{}, fmt.Errorf("%s: %w", file, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, schemas.DefaultMaxFileSize+1))
	if err != nil {
		return schemas.App{}, err
	}
	src, err := schemas.Load(fstest.MapFS{schemas.AppFile: {Data: data}})
	if err != nil {
		return schemas.App{}, fmt.Errorf("%s: %w", file, err)
	}
	return src.App, nil
}

// Targets picks the components named (all of them when names is empty,
// in the order nuon.yaml declares them) and their sources: sources[name]
// when given, else SourceDir(root, …). A component without a source is
// an error.
//
// The sandbox, when nuon.yaml declares one, is built as the component
// schemas.SandboxComponent: one terraform module per folder of its source
// (sources["sandbox"], else root/SandboxesDir), each artifact named after
// its folder (local, aws-eks), all in the sandbox's repository.
func Targets(app schemas.App, root string, sources map[string]string, names []string) ([]Target, error) {
	byName := map[string]schemas.Component{}
	for _, c := range app.Components {
		byName[c.Name] = c
	}
	for n := range sources {
		if _, ok := byName[n]; !ok && (n != schemas.SandboxComponent || app.Sandbox == nil) {
			return nil, fmt.Errorf("no component %q in %s", n, app.Name)
		}
	}
	if len(names) == 0 {
		for _, c := range app.Components {
			names = append(names, c.Name)
		}
		if app.Sandbox != nil {
			names = append(names, schemas.SandboxComponent)
		}
	}
	var out []Target
	var missing []string
	for _, n := range names {
		if n == schemas.SandboxComponent && app.Sandbox != nil {
			if slices.ContainsFunc(out, func(t Target) bool { return t.Component.Name == n }) {
				continue
			}
			ts, err := sandboxTargets(app, root, sources)
			if err != nil {
				return nil, err
			}
			if len(ts) == 0 {
				missing = append(missing, fmt.Sprintf("%s (no sandbox folders in %s)", n, sandboxSource(root, sources)))
			}
			out = append(out, ts...)
			continue
		}
		c, ok := byName[n]
		if !ok {
			return nil, fmt.Errorf("no component %q in %s", n, app.Name)
		}
		if slices.ContainsFunc(out, func(t Target) bool { return t.Component.Name == n }) {
			continue
		}
		src, ok := sources[n]
		if !ok && root != "" {
			src = SourceDir(root, c)
			if _, err := os.Stat(src); err != nil {
				missing = append(missing, fmt.Sprintf("%s (%s)", n, src))
				continue
			}
		}
		if src == "" {
			missing = append(missing, n)
			continue
		}
		out = append(out, Target{Component: c, Source: src})
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("no source for %s", strings.Join(missing, ", "))
	}
	return out, nil
}

func sandboxSource(root string, sources map[string]string) string {
	if src, ok := sources[schemas.SandboxComponent]; ok {
		return src
	}
	return filepath.Join(root, SandboxesDir)
}

// sandboxTargets are the sandbox's modules: one per folder of its source
// that holds a Terraform file, in name order.
func sandboxTargets(app schemas.App, root string, sources map[string]string) ([]Target, error) {
	dir := sandboxSource(root, sources)
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	c := schemas.Component{Name: schemas.SandboxComponent, Type: schemas.TypeTerraform, Repository: app.Sandbox.Repository}
	var out []Target
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		tfs, _ := filepath.Glob(filepath.Join(dir, e.Name(), "*.tf"))
		if len(tfs) == 0 {
			continue
		}
		out = append(out, Target{Component: c, Source: filepath.Join(dir, e.Name()), Artifact: e.Name()})
	}
	return out, nil
}

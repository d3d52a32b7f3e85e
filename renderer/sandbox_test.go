package renderer_test

import (
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/schemas"
)

// sandboxTenant is the fixture tenant with a sandbox declared in
// nuon.yaml, released with a local and an aws-eks module and pinned on
// both channels: acme names no registry (the sandbox's stands for it) and
// its maintenance role, globex keeps its registry (which wins) and
// overrides the sandbox's version, initech is being deleted. The API reads
// the sandbox's registry and DNS outputs.
func sandboxTenant(t *testing.T) *schemas.Source {
	t.Helper()
	fsys := fstest.MapFS{}
	for p, b := range gittest.Files(t, fixtureTenant) {
		fsys[p] = &fstest.MapFile{Data: b}
	}
	edit := func(file, old, new string) {
		t.Helper()
		s := string(fsys[file].Data)
		if strings.Count(s, old) != 1 {
			t.Fatalf("%s: %q is not there once", file, old)
		}
		fsys[file] = &fstest.MapFile{Data: []byte(strings.Replace(s, old, new, 1))}
	}
	edit("nuon.yaml", "name: shop\n", `name: shop
sandbox:
  repository: registry.vendor.example/shop/sandbox
  inputs:
    domain: ${install.inputs.domain}
    single_nat_gateway: true
  terraform:
    timeout: 45m
`)
	edit("nuon.yaml", "      replicas: 2\n", "      replicas: 2\n      image:\n        registry: ${install.sandbox.outputs.registry.url}/${install.sandbox.outputs.registry.repository_prefix}\n      dns: ${install.sandbox.outputs.dns}\n")
	fsys["releases/sandbox.yaml"] = &fstest.MapFile{Data: []byte(`component: sandbox
versions:
  - version: 0.4.0
    artifacts:
      local:
        digest: sha256:1111111111111111111111111111111111111111111111111111111111111111
      aws-eks:
        digest: sha256:2222222222222222222222222222222222222222222222222222222222222222
  - version: 0.5.0
    artifacts:
      aws-eks:
        repository: registry.vendor.example/shop/sandbox-eks
        digest: sha256:3333333333333333333333333333333333333333333333333333333333333333
`)}
	edit("channels/stable.yaml", "components:\n", "components:\n  sandbox: 0.4.0\n")
	edit("channels/beta.yaml", "components:\n", "components:\n  sandbox: 0.4.0\n")
	edit("installs/acme.yaml", "  version: 0.4.0\n", "  inputs:\n    region: us-east-1\n  role:\n    arn: arn:aws:iam::111111111111:role/nuon-acme-maintenance\n    externalID: nuon-acme-5f2c\n")
	edit("installs/acme.yaml", "registry: 111111111111.dkr.ecr.us-east-1.amazonaws.com/nuon-acme\n", "")
	edit("installs/globex.yaml", "  version: 0.4.0\n", "  version: 0.5.0\n")
	fsys["installs/initech.yaml"] = &fstest.MapFile{Data: append(fsys["installs/initech.yaml"].Data, "deleted: true\n"...)}
	src, err := schemas.Load(fsys)
	if err != nil {
		t.Fatalf("load:\n%v", err)
	}
	return src
}

// TestGoldenSandbox renders the sandbox tenant's installs and compares
// their files with testdata/sandbox/<id>/ (-update rewrites them): the
// sandbox is components/sandbox.json, first in install.json's order,
// every other component depends on it, and artifacts go to the install's
// registry or, when it names none, to the sandbox's registry output.
func TestGoldenSandbox(t *testing.T) {
	src := sandboxTenant(t)
	for _, id := range src.InstallIDs() {
		files, err := renderer.Install(src, id)
		if err != nil {
			t.Fatalf("render %s: %v", id, err)
		}
		got := map[string]string{}
		for p, b := range files {
			got[p] = string(b)
		}
		goldenDir(t, filepath.Join("testdata", "sandbox", id), got)
	}
}

// TestSandboxStateValidates checks the sandbox tenant's rendered files
// against their schemas.
func TestSandboxStateValidates(t *testing.T) {
	src := sandboxTenant(t)
	for _, id := range src.InstallIDs() {
		files, err := renderer.Install(src, id)
		if err != nil {
			t.Fatal(err)
		}
		for p, b := range files {
			schema := schemas.SchemaComponentState
			if p == schemas.InstallStateFile {
				schema = schemas.SchemaInstallState
			}
			if err := schemas.ValidateJSON(schema, b); err != nil {
				t.Errorf("%s %s: %v", id, p, err)
			}
		}
	}
}

package schemas

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// withSandbox declares a sandbox in the test tenant: nuon.yaml's sandbox,
// its release with a local and an aws-eks artifact, a pin on both
// channels, and the api reading the sandbox's registry and domain.
var withSandbox = []edit{
	appendTo("nuon.yaml", `
sandbox:
  repository: registry.vendor.example/shop/sandbox
  inputs:
    zone: ${install.inputs.domain}
`),
	write("releases/sandbox.yaml", `component: sandbox
versions:
  - version: 0.1.0
    artifacts:
      local:
        digest: sha256:1111111111111111111111111111111111111111111111111111111111111111
      aws-eks:
        digest: sha256:2222222222222222222222222222222222222222222222222222222222222222
  - version: 0.4.0
    artifacts:
      aws-eks:
        digest: sha256:3333333333333333333333333333333333333333333333333333333333333333
`),
	replace("channels/stable.yaml", "components:\n", "components:\n  sandbox: 0.1.0\n"),
	replace("channels/beta.yaml", "components:\n", "components:\n  sandbox: 0.4.0\n"),
	replace("nuon.yaml", "      replicas: 2\n", "      replicas: 2\n      registry: ${install.sandbox.outputs.registry.url}\n      dns: ${install.sandbox.outputs.dns}\n"),
}

// sandboxCases are load cases on the test tenant with withSandbox applied
// first; the fuzz targets take their files as seeds too.
var sandboxCases = []struct {
	name  string
	edits []edit
	want  []string
}{
	{name: "declared, pinned and referenced"},
	{
		name:  "unknown sandbox output",
		edits: []edit{replace("nuon.yaml", "${install.sandbox.outputs.dns}", "${install.sandbox.outputs.network}")},
		want:  []string{`nuon.yaml:37:12: components[3].inputs.dns: ${install.sandbox.outputs.network}: the sandbox has no output "network" (its outputs: agent, cluster, dns, registry, vpc)`},
	},
	{
		name:  "unknown key of a sandbox output",
		edits: []edit{replace("nuon.yaml", "${install.sandbox.outputs.registry.url}", "${install.sandbox.outputs.registry.host}")},
		want:  []string{`nuon.yaml:36:17: components[3].inputs.registry: ${install.sandbox.outputs.registry.host}: the sandbox's output registry has no key "host" (its keys: url, repository_prefix, region)`},
	},
	{
		name:  "local-only key is not in the contract",
		edits: []edit{replace("nuon.yaml", "${install.sandbox.outputs.registry.url}", "${install.sandbox.outputs.registry.password_file}")},
		want:  []string{`nuon.yaml:36:17: components[3].inputs.registry: ${install.sandbox.outputs.registry.password_file}: the sandbox's output registry has no key "password_file" (its keys: url, repository_prefix, region)`},
	},
	{
		name: "sandbox reference without a sandbox",
		edits: []edit{replace("nuon.yaml", "\nsandbox:\n  repository: registry.vendor.example/shop/sandbox\n  inputs:\n    zone: ${install.inputs.domain}\n", "\n"), remove("releases/sandbox.yaml"),
			replace("channels/stable.yaml", "  sandbox: 0.1.0\n", ""), replace("channels/beta.yaml", "  sandbox: 0.4.0\n", "")},
		want: []string{
			`nuon.yaml:36:17: components[3].inputs.registry: ${install.sandbox.outputs.registry.url}: nuon.yaml declares no sandbox (sandbox:), so there are no sandbox outputs`,
			`nuon.yaml:37:12: components[3].inputs.dns: ${install.sandbox.outputs.dns}: nuon.yaml declares no sandbox (sandbox:), so there are no sandbox outputs`,
		},
	},
	{
		name:  "sandbox inputs read only the install",
		edits: []edit{replace("nuon.yaml", "    zone: ${install.inputs.domain}\n", "    zone: ${install.sandbox.outputs.dns.domain}\n")},
		want:  []string{`nuon.yaml:59:11: sandbox.inputs.zone: ${install.sandbox.outputs.dns.domain}: the sandbox's inputs may reference only ${install.id} and ${install.inputs.NAME}: it is applied before anything else`},
	},
	{
		name:  "channel without a sandbox pin",
		edits: []edit{replace("channels/stable.yaml", "  sandbox: 0.1.0\n", "")},
		want:  []string{`channels/stable.yaml:2:1: components: no version pin for the sandbox (sandbox: VERSION): nuon.yaml declares one`},
	},
	{
		name:  "component named sandbox",
		edits: []edit{replace("nuon.yaml", "  - name: dashboards\n", "  - name: sandbox\n")},
		want: []string{
			`channels/beta.yaml:7:3: components.dashboards: component "dashboards" is not in nuon.yaml`,
			`channels/stable.yaml:8:3: components.dashboards: component "dashboards" is not in nuon.yaml`,
			`nuon.yaml:46:11: components[4].name: "sandbox" is the sandbox's name (nuon.yaml declares a sandbox); name the component otherwise`,
			`releases/dashboards.yaml:1:12: component: component "dashboards" is not in nuon.yaml`,
		},
	},
	{
		name:  "install overrides the sandbox version",
		edits: []edit{replace("installs/acme.yaml", "  version: 0.4.0\n", "  version: 0.9.0\n")},
		want:  []string{`installs/acme.yaml:12:12: sandbox.version: sandbox 0.9.0 is not released: releases/sandbox.yaml has no version "0.9.0"`},
	},
	{
		name:  "install overrides the sandbox through versions",
		edits: []edit{replace("installs/acme.yaml", "  version: 0.4.0\n", ""), appendTo("installs/acme.yaml", "versions:\n  sandbox: 0.2.0\n")},
		want:  []string{`installs/acme.yaml:15:3: versions.sandbox: the sandbox's version is overridden by sandbox.version, not versions`},
	},
	{
		name:  "release without the install's sandbox",
		edits: []edit{replace("installs/acme.yaml", "name: aws-eks", "name: local")},
		want:  []string{`installs/acme.yaml:11:9: sandbox.name: sandbox 0.4.0 has no artifact "local" (releases/sandbox.yaml has: aws-eks)`},
	},
	{
		name:  "registry optional with a sandbox",
		edits: []edit{replace("installs/acme.yaml", "registry: 111111111111.dkr.ecr.us-east-1.amazonaws.com/nuon-acme\n", "")},
	},
}

func TestLoadSandbox(t *testing.T) {
	for _, tc := range sandboxCases {
		t.Run(tc.name, func(t *testing.T) {
			fsys := tenant(t)
			for _, e := range withSandbox {
				e(t, fsys)
			}
			for _, e := range tc.edits {
				e(t, fsys)
			}
			_, err := Load(fsys)
			var ps Problems
			if err != nil && !errors.As(err, &ps) {
				t.Fatalf("Load: %v, want Problems", err)
			}
			var got []string
			for _, p := range ps {
				got = append(got, p.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadRegistryRequiredWithoutSandbox(t *testing.T) {
	fsys := tenant(t)
	replace("installs/acme.yaml", "registry: 111111111111.dkr.ecr.us-east-1.amazonaws.com/nuon-acme\n", "")(t, fsys)
	_, err := Load(fsys)
	want := "installs/acme.yaml:1:1: registry: is required: nuon.yaml declares no sandbox whose registry output could stand for it"
	if err == nil || err.Error() != want {
		t.Fatalf("Load: %v\nwant %s", err, want)
	}
}

func TestParseSandboxRefs(t *testing.T) {
	cases := []struct {
		in      string
		want    []Ref
		wantErr string
	}{
		{in: "${install.sandbox.outputs.registry.url}", want: []Ref{{Start: 0, End: 39, Kind: RefSandbox, Name: "registry", Output: "url"}}},
		{in: "${install.sandbox.outputs.dns}", want: []Ref{{Start: 0, End: 30, Kind: RefSandbox, Name: "dns"}}},
		{in: "${install.sandbox.outputs}", wantErr: "unknown reference ${install.sandbox.outputs}"},
		{in: "${install.sandbox.outputs.registry.url.host}", wantErr: "unknown reference"},
		{in: "${install.sandbox.outputs.registry.}", wantErr: "unknown reference"},
		{in: "${install.sandbox.registry.url}", wantErr: "unknown reference"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseRefs(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseRefs(%q) = %v, %v; want error %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseRefs (-want +got):\n%s", diff)
			}
			if s := "${" + got[0].String() + "}"; s != tc.in {
				t.Errorf("String() = %q, want %q", s, tc.in)
			}
		})
	}
	outs := map[string]any{"registry": map[string]any{"url": "127.0.0.1:5000", "repository_prefix": "nuon/acme"}}
	got, err := Substitute("${install.sandbox.outputs.registry.url}/${install.sandbox.outputs.registry.repository_prefix}/api", func(r Ref) (any, bool) {
		v, ok := outs[r.Name].(map[string]any)[r.Output]
		return v, ok
	})
	if err != nil || got != "127.0.0.1:5000/nuon/acme/api" {
		t.Errorf("Substitute = %v, %v", got, err)
	}
}

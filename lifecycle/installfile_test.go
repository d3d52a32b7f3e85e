package lifecycle

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"

	"nuon.dev/nuon/schemas"
)

// TestInstallFileHandOver checks what installs/<id>.yaml says: with a
// sandbox declared in nuon.yaml it names the sandbox and its inputs (none
// of this machine's paths: the agent gets those as flags) and
// leaves the registry to the sandbox's output (on AWS with the
// maintenance role the agent assumes and the S3 object create keeps the
// sandbox's state in); without one it copies the
// registry from the outputs, as before.
func TestInstallFileHandOver(t *testing.T) {
	outs := &Outputs{}
	outs.Registry.URL, outs.Registry.RepositoryPrefix = "127.0.0.1:5000", "nuon/acme"
	local := Options{ID: "acme", Dir: "/srv/acme", Channel: "beta", Cloud: CloudLocal, KubeAssets: "/cache/kube"}
	aws := Options{ID: "acme", Dir: "/srv/acme", Channel: "beta", Cloud: CloudAWS, AWS: AWSOptions{
		Account: "222222222222", ExternalID: "nuon-acme-x", Region: "eu-west-1", StateBucket: "nuon-acme-state",
		AvailabilityZones: []string{"eu-west-1a", "eu-west-1b"}, Domain: "acme.example.com"}}
	cases := []struct {
		name    string
		o       Options
		managed bool
		want    schemas.Install
	}{
		{name: "local, unmanaged", o: local, want: schemas.Install{Channel: "beta", Cloud: schemas.Cloud{Provider: "local"},
			Sandbox: schemas.Sandbox{Name: "local"}, Registry: "127.0.0.1:5000/nuon/acme", AgentKey: "ssh-ed25519 AAAA k"}},
		{name: "local, managed", o: local, managed: true, want: schemas.Install{Channel: "beta", Cloud: schemas.Cloud{Provider: "local"},
			Sandbox:  schemas.Sandbox{Name: "local"},
			AgentKey: "ssh-ed25519 AAAA k"}},
		{name: "aws, managed", o: aws, managed: true, want: schemas.Install{Channel: "beta", Cloud: schemas.Cloud{Provider: "aws"},
			Sandbox: schemas.Sandbox{Name: "aws-eks", Inputs: map[string]any{
				"region": "eu-west-1", "availability_zones": []any{"eu-west-1a", "eu-west-1b"}, "domain": "acme.example.com",
				"maintenance_role_arn": "arn:aws:iam::222222222222:role/nuon-acme-maintenance"},
				Role:  &schemas.SandboxRole{ARN: "arn:aws:iam::222222222222:role/nuon-acme-maintenance", ExternalID: "nuon-acme-x"},
				State: &schemas.S3State{Bucket: "nuon-acme-state", Key: "sandbox/terraform.tfstate", Region: "eu-west-1"}},
			AgentKey: "ssh-ed25519 AAAA k"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := installFile(&tc.o, "ssh-ed25519 AAAA k", outs, tc.managed)
			if err != nil {
				t.Fatal(err)
			}
			var got schemas.Install
			if err := yaml.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("installs/acme.yaml (-want +got):\n%s\n%s", d, b)
			}
			j, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if err := schemas.ValidateJSON(schemas.SchemaInstall, j); err != nil {
				t.Errorf("installs/acme.yaml is not valid: %v\n%s", err, b)
			}
		})
	}
	// This machine's paths go to the agent it starts, not into git.
	if d := cmp.Diff([]string{"--sandbox-input", "dir=/srv/acme/sandbox/run", "--sandbox-input", "kube_assets=/cache/kube"}, local.agentSandboxInputs()); d != "" {
		t.Errorf("local agent's sandbox inputs (-want +got):\n%s", d)
	}
	if got := aws.agentSandboxInputs(); got != nil {
		t.Errorf("AWS agent's sandbox inputs %v, want none", got)
	}
	if !managedSandbox([]byte("name: shop\nsandbox:\n  repository: r.example/shop/sandbox\ncomponents: []\n")) || managedSandbox([]byte("name: shop\ncomponents: []\n")) {
		t.Error("managedSandbox does not tell a declared sandbox")
	}
}

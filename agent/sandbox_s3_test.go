package agent_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/internal/s3test"
	"nuon.dev/nuon/internal/ststest"
	"nuon.dev/nuon/internal/testenv"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/stack"
)

// TestSandboxS3State: an install whose sandbox.state names an S3 object
// (what nuon install create writes on AWS) has its sandbox jobs keep the
// state there, reached by the real terraform's s3 backend with the
// maintenance role's credentials: the upgrade finds the state the first
// apply wrote (the resource is replaced, not created beside the old
// one), and nothing is kept in the sandbox directory. The module's
// creds_file, a path of this machine, comes from the agent's own
// SandboxInputs, not from git.
func TestSandboxS3State(t *testing.T) {
	if _, err := exec.LookPath("terraform"); err != nil {
		testenv.Missing(t, "terraform is not installed")
	}
	const bucket, key = "nuon-acme-state", "sandbox/terraform.tfstate"
	sts := ststest.New(t)
	sts.AddCaller(agentKeyID, agentPrincipal)
	sts.AddRole(ststest.Role{ARN: maintenance, TrustedAccount: "222222222222", ExternalID: sandboxExtID})
	s3 := s3test.New(t, sts.Secret, bucket)
	path, digests := moduleLayout(t, map[string]map[string]string{
		"sandbox-0.1.0": sandboxModule("0.1.0"), "sandbox-0.2.0": sandboxModule("0.2.0"), "web-1.0.0": webModule,
	})
	creds := filepath.Join(t.TempDir(), "creds")

	tn := newTenant(t)
	for _, c := range []string{"a", "b", "c", "d"} {
		os.Remove(filepath.Join(tn.src, "releases", c+".yaml"))
	}
	tn.write("nuon.yaml", `name: test
sandbox:
  repository: registry.test/app/sandbox
components:
  - name: web
    type: terraform
    repository: registry.test/app/web
    inputs: {registry: "${install.sandbox.outputs.registry.url}"}
`)
	tn.write("releases/web.yaml", "component: web\nversions:\n  - version: 1.0.0\n    artifacts: {module: {digest: "+digests["web-1.0.0"]+"}}\n")
	tn.write("releases/sandbox.yaml", fmt.Sprintf("component: sandbox\nversions:\n  - version: 0.1.0\n    artifacts: {local: {digest: %s}}\n  - version: 0.2.0\n    artifacts: {local: {digest: %s}}\n",
		digests["sandbox-0.1.0"], digests["sandbox-0.2.0"]))
	tn.write("channels/stable.yaml", "components: {sandbox: 0.1.0, web: 1.0.0}\n")
	tn.write("installs/acme.yaml", fmt.Sprintf(`channel: stable
cloud: {provider: aws, region: us-east-1, accountID: "222222222222"}
sandbox:
  name: local
  role: {arn: %s, externalID: %s}
  state: {bucket: %s, key: %s, region: us-east-1}
agentKey: %s
`, maintenance, sandboxExtID, bucket, key, tn.keys["acme"].AuthorizedKey()))
	os.Remove(filepath.Join(tn.src, "installs", "globex.yaml"))
	tn.commit("a sandbox with its state in S3")
	tn.renderMain()

	sandboxDir := t.TempDir()
	writeFile(t, filepath.Join(sandboxDir, "outputs.json"), `{"registry": {"url": "reg-0-1-0.test:5000", "repository_prefix": "nuon/acme", "region": "local"}}`)
	identity := func(context.Context) (aws.Config, error) {
		return aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider(agentKeyID, "agent-secret", "")}, nil
	}
	none := filepath.Join(t.TempDir(), "none")
	a := tn.agent("acme", func(cfg *agent.Config) {
		cfg.SandboxDir = sandboxDir
		// A path of this machine: the agent's, not the install file's.
		cfg.SandboxInputs = map[string]string{"creds_file": creds}
		cfg.AssumeRole = agent.AssumeRoleFrom(identity, stack.WithEndpoint(sts.URL))
		l := cfg.Runner.(*jobs.Local)
		l.Env = append(l.Env, "NUON_TEST_LAYOUT="+path, "AWS_ENDPOINT_URL_S3="+s3.URL, "AWS_ENDPOINT_URL_STS="+sts.URL,
			"AWS_CONFIG_FILE="+none, "AWS_SHARED_CREDENTIALS_FILE="+none, "AWS_EC2_METADATA_DISABLED=true")
		cfg.JobTimeout = 0
	})

	for _, version := range []string{"0.1.0", "0.2.0"} {
		if version != "0.1.0" {
			tn.write("channels/stable.yaml", "components: {sandbox: "+version+", web: 1.0.0}\n")
			tn.commit("sandbox " + version)
			tn.renderMain()
		}
		rep := a.reconcile(t)
		if sb := rep.Status.Components["sandbox"]; rep.Status.Phase != schemas.InstallReady || sb.Version != version {
			t.Fatalf("sandbox %s: phase %s, %+v", version, rep.Status.Phase, sb)
		}
		o, ok := s3.Object(bucket, key)
		if !ok || !strings.Contains(string(o.Body), `"`+version+`"`) {
			t.Fatalf("after %s the S3 state is %s", version, o.Body)
		}
		if n := strings.Count(string(o.Body), `"type": "terraform_data"`); n != 1 {
			t.Errorf("after %s the state holds %d terraform_data resources, want 1 (adopted, not created again)", version, n)
		}
	}
	if _, err := os.Stat(creds + ".0.2.0"); err != nil {
		t.Errorf("the sandbox job did not get the agent's own input creds_file: %v", err)
	}
	if strings.Contains(tn.git("show", "refs/heads/nuon/installs/acme:components/sandbox.json"), creds) {
		t.Error("the agent's own input is in the rendered state")
	}
	if _, err := os.Stat(filepath.Join(sandboxDir, "terraform.tfstate")); err == nil {
		t.Error("a local state file in the sandbox directory")
	}
	issued := map[string]bool{}
	for _, c := range sts.Issued() {
		issued[c.AccessKeyID] = true
	}
	for _, c := range s3.Calls() {
		if !issued[c.AccessKey] {
			t.Errorf("S3 call not signed by the maintenance role's credentials: %+v", c)
		}
	}
	if keys := s3.Keys(bucket); len(keys) != 1 {
		t.Errorf("bucket keys %v, want the state only (lock released)", keys)
	}
}

package agent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/internal/s3test"
	"nuon.dev/nuon/schemas"
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
	const bucket, key = "nuon-acme-state", "sandbox/terraform.tfstate"
	sa := newSandboxApp(t)
	tn, sts, creds, sandboxDir := sa.tn, sa.sts, sa.creds, sa.sandboxDir
	s3 := s3test.New(t, sts.Secret, bucket)
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

	none := filepath.Join(t.TempDir(), "none")
	a := sa.agent("us-east-1", func(cfg *agent.Config) {
		// A path of this machine: the agent's, not the install file's.
		cfg.SandboxInputs = map[string]string{"creds_file": creds}
		l := cfg.Runner.(*jobs.Local)
		l.Env = append(l.Env, "AWS_ENDPOINT_URL_S3="+s3.URL, "AWS_ENDPOINT_URL_STS="+sts.URL,
			"AWS_CONFIG_FILE="+none, "AWS_SHARED_CREDENTIALS_FILE="+none, "AWS_EC2_METADATA_DISABLED=true")
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

package sandboxes

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"

	"nuon.dev/nuon/stack"
)

// awsCLIConfig is the terraformrc of the schema-only aws provider mirror.
// Without it the tests skip, unless CI is set, when they fail: on CI every
// real part must run.
func awsCLIConfig(t *testing.T) string {
	t.Helper()
	rc := os.Getenv("NUON_TF_AWS_CLI_CONFIG")
	if rc != "" {
		if _, err := os.Stat(rc); err == nil {
			if _, err := exec.LookPath("terraform"); err == nil {
				return rc
			}
		}
	}
	msg := "the schema-only aws provider is not built (NUON_TF_AWS_CLI_CONFIG=" + rc + "): run `make tf-aws`"
	if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
		t.Fatalf("%s (CI=%s)", msg, ci)
	}
	t.Skip(msg)
	return ""
}

// module copies a module (without .terraform) into a temporary folder so
// tests never write into the source tree.
func module(t *testing.T, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), name)
	err := filepath.WalkDir(name, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(name, path)
		if d.IsDir() {
			if d.Name() == ".terraform" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if strings.HasPrefix(d.Name(), ".terraform") || strings.HasSuffix(d.Name(), ".tfstate") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// terraform runs terraform in dir and returns its combined output and how
// long it took.
func terraform(t *testing.T, rc, dir string, args ...string) (string, time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "terraform", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	return out.String(), time.Since(start), err
}

// TestAWSEKS validates sandboxes/aws-eks and runs its terraform tests
// against the real aws schema with a mock provider.
func TestAWSEKS(t *testing.T) {
	rc := awsCLIConfig(t)
	dir := module(t, "aws-eks")
	if out, _, err := terraform(t, rc, dir, "init", "-backend=false", "-input=false", "-no-color"); err != nil {
		t.Fatalf("terraform init: %v\n%s", err, out)
	}
	out, d, err := terraform(t, rc, dir, "validate", "-no-color")
	if err != nil {
		t.Fatalf("terraform validate: %v\n%s", err, out)
	}
	t.Logf("terraform validate: %s", d.Round(time.Millisecond))
	out, d, err = terraform(t, rc, dir, "test", "-no-color")
	if err != nil {
		t.Fatalf("terraform test: %v\n%s", err, out)
	}
	t.Logf("terraform test: %s", d.Round(time.Millisecond))
	if !strings.Contains(out, " passed, 0 failed.") {
		t.Fatalf("terraform test did not report success:\n%s", out)
	}
}

// TestAWSEKSSchemaBites checks that validation really runs against the
// aws schema: an argument the aws provider does not have, or a missing
// required block, is refused.
func TestAWSEKSSchemaBites(t *testing.T) {
	rc := awsCLIConfig(t)
	tests := []struct {
		name, file, content, want string
	}{
		{"unknown argument", "bad.tf", `resource "aws_eks_cluster" "bad" {
  name     = "x"
  role_arn = "y"
  public_endpoint = true
  vpc_config { subnet_ids = [] }
}`, `An argument named "public_endpoint" is not expected here`},
		{"missing block", "bad.tf", `resource "aws_eks_cluster" "bad" {
  name     = "x"
  role_arn = "y"
}`, `Insufficient vpc_config blocks`},
		{"unknown resource", "bad.tf", `resource "aws_eks_clusterz" "bad" {}`, `The provider hashicorp/aws does not support resource type "aws_eks_clusterz"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := module(t, "aws-eks")
			if err := os.WriteFile(filepath.Join(dir, tt.file), []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, _, err := terraform(t, rc, dir, "init", "-backend=false", "-input=false", "-no-color"); err != nil {
				t.Fatalf("terraform init: %v\n%s", err, out)
			}
			out, _, err := terraform(t, rc, dir, "validate", "-no-color")
			if err == nil {
				t.Fatalf("terraform validate accepted %s", tt.name)
			}
			if !strings.Contains(strings.Join(strings.Fields(out), " "), tt.want) {
				t.Errorf("terraform validate output lacks %q:\n%s", tt.want, out)
			}
		})
	}
}

// TestAWSEKSMatchesManifestsAndStack checks the sandbox against the two
// things it must agree with: the agent's service account in manifests/
// (the pod identity association binds the agent's role to it), and the
// roles the customer's stack lets the provision role create
// (stack.SandboxRoles).
func TestAWSEKSMatchesManifestsAndStack(t *testing.T) {
	vars, err := os.ReadFile(filepath.Join("aws-eks", "variables.tf"))
	if err != nil {
		t.Fatal(err)
	}
	def := func(name string) string {
		m := regexp.MustCompile(`(?s)variable "` + name + `" \{.*?default\s*=\s*"([^"]*)"`).FindSubmatch(vars)
		if m == nil {
			t.Fatalf("variables.tf: no string default for %s", name)
		}
		return string(m[1])
	}
	rbac, err := os.ReadFile(filepath.Join("..", "manifests", "10-agent-rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var sa struct {
		Kind     string
		Metadata struct{ Name, Namespace string }
	}
	found := false
	for _, doc := range strings.Split(string(rbac), "\n---") {
		if err := yaml.Unmarshal([]byte(doc), &sa); err == nil && sa.Kind == "ServiceAccount" {
			found = true
			break
		}
	}
	if !found {
		t.Fatal("manifests/10-agent-rbac.yaml: no ServiceAccount")
	}
	if got := def("agent_namespace") + "/" + def("agent_service_account"); got != sa.Metadata.Namespace+"/"+sa.Metadata.Name {
		t.Errorf("aws-eks binds the agent role to %s, manifests/ run the agent as %s/%s", got, sa.Metadata.Namespace, sa.Metadata.Name)
	}

	var roles []string
	files, _ := filepath.Glob(filepath.Join("aws-eks", "*.tf"))
	re := regexp.MustCompile(`(?s)resource "aws_iam_role" "\w+" \{\s*name\s*=\s*"\$\{local\.name\}-([a-z-]+)"`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			roles = append(roles, string(m[1]))
		}
	}
	sort.Strings(roles)
	want := append([]string(nil), stack.SandboxRoles...)
	sort.Strings(want)
	if diff := cmp.Diff(want, roles); diff != "" {
		t.Errorf("roles aws-eks makes vs stack.SandboxRoles (-stack +aws-eks):\n%s", diff)
	}
}

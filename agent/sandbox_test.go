package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/ststest"
	"nuon.dev/nuon/internal/testenv"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/stack"
)

const (
	agentKeyID     = "AKIAAGENT00000000001"
	agentPrincipal = "arn:aws:sts::222222222222:assumed-role/nuon-acme-agent/eks-pod"
	maintenance    = "arn:aws:iam::222222222222:role/nuon-acme-maintenance"
	sandboxExtID   = "nuon-acme-external-0001"
)

// sandboxModule is a sandbox of version v: its registry output names a
// host of that version, and an upgrade (a resource replaced per version)
// writes the AWS credentials terraform ran with to CREDS_FILE.v, as the
// aws provider would use them.
func sandboxModule(v string) map[string]string {
	return map[string]string{"main.tf": `
variable "install_id" { type = string }
variable "creds_file" { type = string }
resource "terraform_data" "upgrade" {
  triggers_replace = "` + v + `"
  provisioner "local-exec" {
    command     = "printf '%s %s %s' \"$AWS_ACCESS_KEY_ID\" \"$AWS_SESSION_TOKEN\" \"$AWS_REGION\" > \"$OUT\"; echo \"secret key $AWS_SECRET_ACCESS_KEY\""
    environment = { OUT = "${var.creds_file}.` + v + `" }
  }
}
output "registry" {
  value = { url = "reg-` + strings.ReplaceAll(v, ".", "-") + `.test:5000", repository_prefix = "nuon/${var.install_id}", region = "local" }
}
output "dns" {
  value = { domain = "${var.install_id}.nuon.localhost", public_zone_id = "local", private_zone_id = "local" }
}
`}
}

// webModule reads the sandbox's registry and outputs it.
var webModule = map[string]string{"main.tf": `
variable "registry" { type = string }
resource "terraform_data" "web" { input = var.registry }
output "registry" { value = terraform_data.web.output }
`}

// moduleLayout packages each module as nuon build does into one OCI image
// layout and returns its path and each module's digest.
func moduleLayout(t testing.TB, modules map[string]map[string]string) (string, map[string]string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(path, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	digests := map[string]string{}
	for name, files := range modules {
		src := t.TempDir()
		for f, content := range files {
			writeFile(t, filepath.Join(src, f), content)
		}
		img, err := oci.Package(oci.Terraform, src)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.AppendImage(img); err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests[name] = d.String()
	}
	return path, digests
}

// sandboxApp is what the sandbox upgrade tests share: the STS stand-in,
// which knows the agent's caller and the maintenance role; the sandbox
// (0.1.0, 0.2.0) and web (1.0.0) modules in one OCI layout; a tenant
// whose app is the sandbox and web, which reads the sandbox's registry
// output, on stable at sandbox 0.1.0 (its installs are the test's to
// write); and what nuon install create leaves: the sandbox's directory
// with its outputs (here before any state: create's apply is the agent's
// first).
type sandboxApp struct {
	tn         *tenant
	sts        *ststest.Server
	layout     string            // the modules' OCI layout
	digests    map[string]string // each module's digest, by name-version
	creds      string            // the sandbox writes the credentials it ran with to creds.VERSION
	sandboxDir string
}

func newSandboxApp(t *testing.T) *sandboxApp {
	t.Helper()
	if _, err := exec.LookPath("terraform"); err != nil {
		testenv.Missing(t, "terraform is not installed")
	}
	sa := &sandboxApp{sts: ststest.New(t), creds: filepath.Join(t.TempDir(), "creds")}
	sa.sts.AddCaller(agentKeyID, agentPrincipal)
	sa.sts.AddRole(ststest.Role{ARN: maintenance, TrustedAccount: "222222222222", ExternalID: sandboxExtID})
	sa.layout, sa.digests = moduleLayout(t, map[string]map[string]string{
		"sandbox-0.1.0": sandboxModule("0.1.0"), "sandbox-0.2.0": sandboxModule("0.2.0"), "web-1.0.0": webModule,
	})

	tn := newTenant(t)
	sa.tn = tn
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
	tn.write("releases/sandbox.yaml", fmt.Sprintf(`component: sandbox
versions:
  - version: 0.1.0
    artifacts: {local: {digest: %s}}
  - version: 0.2.0
    artifacts: {local: {digest: %s}}
`, sa.digests["sandbox-0.1.0"], sa.digests["sandbox-0.2.0"]))
	tn.write("releases/web.yaml", "component: web\nversions:\n  - version: 1.0.0\n    artifacts: {module: {digest: "+sa.digests["web-1.0.0"]+"}}\n")
	tn.write("channels/stable.yaml", "components: {sandbox: 0.1.0, web: 1.0.0}\n")

	sa.sandboxDir = t.TempDir()
	writeFile(t, filepath.Join(sa.sandboxDir, "outputs.json"), `{"registry": {"url": "reg-0-1-0.test:5000", "repository_prefix": "nuon/acme", "region": "local"}}`)
	return sa
}

// agent is acme's agent on the sandbox directory, which assumes roles
// through the STS stand-in (with opts) as the agent's caller in region
// and runs jobs from the modules' layout, with no job timeout; configure
// changes the rest.
func (sa *sandboxApp) agent(region string, configure func(*agent.Config), opts ...stack.AssumeOption) *installAgent {
	identity := func(context.Context) (aws.Config, error) {
		return aws.Config{Region: region, Credentials: credentials.NewStaticCredentialsProvider(agentKeyID, "agent-secret", "")}, nil
	}
	return sa.tn.agent("acme", func(cfg *agent.Config) {
		cfg.SandboxDir = sa.sandboxDir
		cfg.AssumeRole = agent.AssumeRoleFrom(identity, append([]stack.AssumeOption{stack.WithEndpoint(sa.sts.URL)}, opts...)...)
		l := cfg.Runner.(*jobs.Local)
		l.Env = append(l.Env, "NUON_TEST_LAYOUT="+sa.layout)
		cfg.JobTimeout = 0
		configure(cfg)
	})
}

// TestSandboxUpgrade runs the sandbox and a component that reads its
// registry output with the real terraform. The agent adopts the state in
// SandboxDir (finding the sandbox's registry in the outputs.json create
// left there), applies the sandbox before the component with the
// maintenance role's credentials from the STS stand-in, applies nothing
// while nothing changed, applies a sandbox version bumped on the channel
// with fresh credentials, and the new registry output flows into the
// component's input. A deleted install's sandbox is left in place.
func TestSandboxUpgrade(t *testing.T) {
	sa := newSandboxApp(t)
	tn, sts, digests, creds, sandboxDir := sa.tn, sa.sts, sa.digests, sa.creds, sa.sandboxDir
	acme := func(deleted bool) string {
		return fmt.Sprintf(`channel: stable
cloud: {provider: aws, region: eu-west-1, accountID: "222222222222"}
sandbox:
  name: local
  inputs: {creds_file: %s}
  role: {arn: %s, externalID: %s}
agentKey: %s
deleted: %v
`, creds, maintenance, sandboxExtID, tn.keys["acme"].AuthorizedKey(), deleted)
	}
	tn.write("installs/acme.yaml", acme(false))
	tn.write("installs/globex.yaml", "channel: stable\ncloud: {provider: local}\nsandbox: {name: local, inputs: {creds_file: /nonexistent}}\nregistry: 127.0.0.1:5000/globex\nagentKey: "+tn.keys["globex"].AuthorizedKey()+"\n")
	tn.commit("a sandbox")
	tn.renderMain()
	a := sa.agent("eu-west-1", func(*agent.Config) {}, stack.WithSessionName("nuon-agent-acme"))

	checkRun := func(t *testing.T, rep *agent.Report, version, registry string, calls int) {
		t.Helper()
		st := rep.Status
		if st.Phase != schemas.InstallReady {
			t.Fatalf("phase %s; components %+v", st.Phase, st.Components)
		}
		if sb := st.Components["sandbox"]; sb.Version != version {
			t.Errorf("sandbox version %s, want %s", sb.Version, version)
		}
		if got := st.Components["web"].Outputs["registry"]; got != registry {
			t.Errorf("web's registry %v, want the sandbox's %s", got, registry)
		}
		got := sts.Calls()
		if len(got) != calls {
			t.Fatalf("%d STS calls, want %d: %+v", len(got), calls, got)
		}
		last := got[len(got)-1]
		want := ststest.Call{Action: "AssumeRole", RoleARN: maintenance, RoleSessionName: "nuon-agent-acme", ExternalID: sandboxExtID, Caller: agentPrincipal}
		if d := cmp.Diff(want, last); d != "" {
			t.Errorf("STS call (-want +got):\n%s", d)
		}
		issued := sts.Issued()[calls-1]
		if got, want := readFile(t, creds+"."+version), issued.AccessKeyID+" "+issued.SessionToken+" eu-west-1"; got != want {
			t.Errorf("terraform ran with %q, want the maintenance role's credentials %q", got, want)
		}
		// What terraform printed is redacted in the job's log.
		jobLog := readFile(t, filepath.Join(a.workdir, "work", "jobs", st.Components["sandbox"].Job, "log"))
		if strings.Contains(jobLog, issued.SecretAccessKey) || !strings.Contains(jobLog, "secret key [redacted]") {
			t.Errorf("the sandbox job's log does not redact the role's secret key:\n%s", jobLog)
		}
		// No credential reaches git.
		if log := tn.git("log", "-p", "refs/heads/nuon/status/acme"); strings.Contains(log, issued.SecretAccessKey) || strings.Contains(log, issued.SessionToken) {
			t.Error("the status history holds the role's credentials")
		}
	}

	rep := a.reconcile(t)
	checkRun(t, rep, "0.1.0", "reg-0-1-0.test:5000", 1)
	if len(rep.Jobs) != 2 || rep.Jobs[0].Component != "sandbox" {
		t.Errorf("jobs %v, want the sandbox's, then web's", jobNames(rep))
	}
	if _, err := os.Stat(filepath.Join(sandboxDir, "terraform.tfstate")); err != nil {
		t.Errorf("the sandbox's state is not in its directory: %v", err)
	}
	var sbSpec schemas.ComponentState
	if err := json.Unmarshal([]byte(tn.git("show", "refs/heads/nuon/status/acme:applied/sandbox.json")), &sbSpec); err != nil {
		t.Fatal(err)
	}
	if want := "reg-0-1-0.test:5000/nuon/acme/app/sandbox@" + digests["sandbox-0.1.0"]; sbSpec.Artifacts[0].Local != want {
		t.Errorf("the sandbox deployed from %s, want %s", sbSpec.Artifacts[0].Local, want)
	}

	// Nothing changed: no job, no role assumed.
	if rep := a.reconcile(t); len(rep.Jobs) != 0 || len(sts.Calls()) != 1 {
		t.Fatalf("an unchanged sandbox: jobs %v, %d STS calls", jobNames(rep), len(sts.Calls()))
	}

	// The channel moves the sandbox to 0.2.0: the agent applies it with
	// fresh credentials, and web gets the new registry.
	tn.write("channels/stable.yaml", "components: {sandbox: 0.2.0, web: 1.0.0}\n")
	tn.commit("sandbox 0.2.0 on stable")
	tn.renderMain()
	rep = a.reconcile(t)
	checkRun(t, rep, "0.2.0", "reg-0-2-0.test:5000", 2)
	if got := jobNames(rep); !cmp.Equal(got, []string{"sandbox update", "web update"}) {
		t.Errorf("jobs %v, want the sandbox's update, then web's", got)
	}
	if rep := a.reconcile(t); len(rep.Jobs) != 0 {
		t.Fatalf("after the upgrade: jobs %v", jobNames(rep))
	}

	// The install is deleted: web is destroyed, the sandbox is not.
	tn.write("installs/acme.yaml", acme(true))
	tn.commit("delete acme")
	tn.renderMain()
	rep = a.reconcile(t)
	if got := jobNames(rep); !cmp.Equal(got, []string{"web delete"}) {
		t.Errorf("jobs %v, want web's delete only", got)
	}
	if len(rep.Status.Components) != 0 {
		t.Errorf("components left in the status: %v", rep.Status.Components)
	}
	if state := readFile(t, filepath.Join(sandboxDir, "terraform.tfstate")); !strings.Contains(state, `"terraform_data"`) {
		t.Errorf("the agent destroyed the sandbox:\n%s", state)
	}
}

func jobNames(rep *agent.Report) []string {
	var out []string
	for _, j := range rep.Jobs {
		out = append(out, j.Component+" "+j.Operation)
	}
	return out
}

// TestSandboxRoleRefused: a role the stand-in refuses (a wrong
// ExternalId) fails the sandbox, with STS's reason and no job, and blocks
// every other component.
func TestSandboxRoleRefused(t *testing.T) {
	sts := ststest.New(t)
	sts.AddCaller(agentKeyID, agentPrincipal)
	sts.AddRole(ststest.Role{ARN: maintenance, TrustedAccount: "222222222222", ExternalID: "the-stack's-own"})
	tn := newTenant(t)
	for _, c := range []string{"b", "c", "d"} {
		os.Remove(filepath.Join(tn.src, "releases", c+".yaml"))
	}
	tn.write("nuon.yaml", "name: test\nsandbox: {repository: registry.test/app/sandbox}\ncomponents:\n  - {name: a, type: terraform, repository: registry.test/app/a}\n")
	tn.write("channels/stable.yaml", "components: {sandbox: 0.1.0, a: 1.0.0}\n")
	tn.write("releases/sandbox.yaml", strings.Replace(release("sandbox", "0.1.0"), "module:", "local:", 1))
	for _, id := range []string{"acme", "globex"} {
		tn.write("installs/"+id+".yaml", fmt.Sprintf("channel: stable\ncloud: {provider: aws}\nsandbox: {name: local, role: {arn: %s, externalID: %s}}\nregistry: 127.0.0.1:5000/%s\nagentKey: %s\n",
			maintenance, sandboxExtID, id, tn.keys[id].AuthorizedKey()))
	}
	tn.commit("a sandbox with a role")
	tn.renderMain()
	identity := func(context.Context) (aws.Config, error) {
		return aws.Config{Region: "eu-west-1", Credentials: credentials.NewStaticCredentialsProvider(agentKeyID, "agent-secret", "")}, nil
	}
	a := tn.agent("acme", func(cfg *agent.Config) {
		cfg.AssumeRole = agent.AssumeRoleFrom(identity, stack.WithEndpoint(sts.URL))
	})
	rep := a.reconcile(t)
	sb, comp := rep.Status.Components["sandbox"], rep.Status.Components["a"]
	if sb.Phase != schemas.PhaseFailed || !strings.Contains(sb.Error, "access denied") || !strings.Contains(sb.Error, maintenance) {
		t.Errorf("sandbox: %s %q, want Failed, access denied to %s", sb.Phase, sb.Error, maintenance)
	}
	if comp.Phase != schemas.PhaseBlocked {
		t.Errorf("a: %s %q, want Blocked behind the sandbox", comp.Phase, comp.Error)
	}
	if got := runs(t, a.records); len(got) != 0 {
		t.Errorf("plugin calls %v, want none", got)
	}
	if calls := sts.Calls(); len(calls) != 1 || calls[0].Code != "AccessDenied" || calls[0].ExternalID != sandboxExtID {
		t.Errorf("STS calls %+v", calls)
	}
}

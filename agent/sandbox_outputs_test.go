package agent_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/internal/testenv"
	"nuon.dev/nuon/schemas"
)

// readoptSandbox is a sandbox whose registry is wherever the file
// url_file says: what a local sandbox recreated on a new port looks like
// to terraform.
var readoptSandbox = map[string]string{"main.tf": `
variable "install_id" { type = string }
variable "url_file" { type = string }
resource "terraform_data" "sandbox" { input = trimspace(file(var.url_file)) }
output "registry" {
  value = { url = terraform_data.sandbox.output, repository_prefix = "nuon/${var.install_id}", region = "local" }
}
`}

// TestSandboxOutputsChanged: the sandbox is made again under a running
// agent (nuon install create on a restarted machine: new ports, a new
// outputs.json). The agent notices on its next pass, though its desired
// ref did not move, re-adopts the sandbox from its state directory and
// re-applies the component that reads its registry with the new one; it
// does so once, and a rewrite of outputs.json with the same values
// changes nothing.
func TestSandboxOutputsChanged(t *testing.T) {
	if _, err := exec.LookPath("terraform"); err != nil {
		testenv.Missing(t, "terraform is not installed")
	}
	layoutDir, digests := moduleLayout(t, map[string]map[string]string{"sandbox-0.1.0": readoptSandbox, "web-1.0.0": webModule})
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
	tn.write("releases/sandbox.yaml", "component: sandbox\nversions:\n  - version: 0.1.0\n    artifacts: {local: {digest: "+digests["sandbox-0.1.0"]+"}}\n")
	tn.write("releases/web.yaml", "component: web\nversions:\n  - version: 1.0.0\n    artifacts: {module: {digest: "+digests["web-1.0.0"]+"}}\n")
	tn.write("channels/stable.yaml", "components: {sandbox: 0.1.0, web: 1.0.0}\n")
	urlFile := filepath.Join(t.TempDir(), "url")
	tn.write("installs/acme.yaml", fmt.Sprintf("channel: stable\ncloud: {provider: local}\nsandbox: {name: local, inputs: {url_file: %s}}\nagentKey: %s\n", urlFile, tn.keys["acme"].AuthorizedKey()))
	os.Remove(filepath.Join(tn.src, "installs", "globex.yaml"))
	tn.commit("a sandbox")
	tn.renderMain()

	sandboxDir := t.TempDir()
	// What nuon install create leaves: the sandbox made, its outputs.
	create := func(url string) {
		t.Helper()
		writeFile(t, urlFile, url+"\n")
		writeFile(t, filepath.Join(sandboxDir, agent.SandboxOutputsFile), fmt.Sprintf(`{"registry": {"url": %q, "repository_prefix": "nuon/acme", "region": "local"}}`, url))
	}
	create("reg-a.test:5000")
	a := tn.agent("acme", func(cfg *agent.Config) {
		cfg.SandboxDir = sandboxDir
		l := cfg.Runner.(*jobs.Local)
		l.Env = append(l.Env, "NUON_TEST_LAYOUT="+layoutDir)
		cfg.JobTimeout = 0
	})
	check := func(rep *agent.Report, registry string, jobs ...string) {
		t.Helper()
		if got := jobNames(rep); !cmp.Equal(got, jobs) {
			t.Errorf("jobs %v, want %v", got, jobs)
		}
		st := rep.Status
		if st.Phase != schemas.InstallReady {
			t.Fatalf("phase %s; components %+v", st.Phase, st.Components)
		}
		if got := st.Components["web"].Outputs["registry"]; got != registry {
			t.Errorf("web's registry %v, want %s", got, registry)
		}
	}
	check(a.reconcile(t), "reg-a.test:5000", "sandbox create", "web create")
	check(a.reconcile(t), "reg-a.test:5000")

	// The sandbox is made again, on another port.
	create("reg-b.test:5000")
	check(a.reconcile(t), "reg-b.test:5000", "sandbox update", "web update")
	if msg := tn.git("log", "-1", "--format=%B", "refs/heads/nuon/status/acme"); !strings.Contains(msg, "Sandbox outputs changed (registry in outputs.json)") {
		t.Errorf("the status commit does not say why:\n%s", msg)
	}
	check(a.reconcile(t), "reg-b.test:5000")

	// The same outputs written again, formatted otherwise: nothing runs.
	writeFile(t, filepath.Join(sandboxDir, agent.SandboxOutputsFile), `{"registry":{"region":"local","repository_prefix":"nuon/acme","url":"reg-b.test:5000"}}`)
	check(a.reconcile(t), "reg-b.test:5000")

	// A restarted agent with a fresh workdir adopts the remote status,
	// and compares it with outputs.json as well.
	create("reg-c.test:5000")
	b := tn.agent("acme", func(cfg *agent.Config) {
		cfg.SandboxDir = sandboxDir
		l := cfg.Runner.(*jobs.Local)
		l.Env = append(l.Env, "NUON_TEST_LAYOUT="+layoutDir)
		cfg.JobTimeout = 0
	})
	check(b.reconcile(t), "reg-c.test:5000", "sandbox update", "web update")
}

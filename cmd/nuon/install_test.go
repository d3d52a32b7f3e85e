package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/internal/oci/ocitest"
	"nuon.dev/nuon/internal/testenv"
)

// installTenant is a tenant repository with the sample app released from
// the fixtures into a vendor registry, and no install yet. The app
// declares a sandbox, released as 0.1.0 from this repository's
// sandboxes/ and pinned on beta, and the network reads the sandbox's
// registry output in a tag.
func installTenant(t *testing.T, env []string) (bare string) {
	t.Helper()
	root := repoRoot()
	vendor := ocitest.Start(t, ocitest.Options{})
	dir := t.TempDir()
	bare, src := filepath.Join(dir, "tenant.git"), filepath.Join(dir, "main")
	if err := os.CopyFS(src, os.DirFS(filepath.Join(root, "fixtures", "tenant"))); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(src, "releases"))
	os.RemoveAll(filepath.Join(src, "installs"))
	os.Remove(filepath.Join(src, "channels", "stable.yaml")) // pins versions only the previous build has
	app, _ := os.ReadFile(filepath.Join(src, "nuon.yaml"))
	appText := strings.Replace(string(app), "      cidr: ${install.inputs.cidr}\n", "      cidr: ${install.inputs.cidr}\n      tags:\n        registry: ${install.sandbox.outputs.registry.url}\n", 1)
	appText += "\nsandbox:\n  repository: registry.vendor.example/shop/sandbox\n"
	os.WriteFile(filepath.Join(src, "nuon.yaml"), []byte(strings.ReplaceAll(appText, "registry.vendor.example", vendor.Host)), 0o644)
	beta, _ := os.ReadFile(filepath.Join(src, "channels", "beta.yaml"))
	os.WriteFile(filepath.Join(src, "channels", "beta.yaml"), []byte(strings.Replace(string(beta), "components:\n", "components:\n  sandbox: 0.1.0\n", 1)), 0o644)
	gittest.InitBare(t, bare)
	gittest.CommitDir(t, bare, "main", src, "shop")
	current := nuon(t, env, 0, "build", "--app", filepath.Join(src, "nuon.yaml"), "--src", filepath.Join(root, "fixtures"),
		"--dir", "sandbox="+filepath.Join(root, "sandboxes"), "--key", filepath.Join(root, "fixtures", "keys", "cosign.key"), "-o", "json")
	os.WriteFile(filepath.Join(dir, "current.json"), []byte(current), 0o644)
	for _, c := range []string{"network:1.0.0", "database:1.1.0", "api-image:2.4.0", "api:2.4.0", "dashboards:1.2.0", "sandbox:0.1.0"} {
		name, version, _ := strings.Cut(c, ":")
		nuon(t, env, 0, "release", name, "--repo", bare, "--version", version, "--from", filepath.Join(dir, "current.json"))
	}
	return bare
}

type installEvent struct {
	Install, Phase, Result, Detail string
	Seconds                        float64
}

func installEvents(t *testing.T, out string) []installEvent {
	t.Helper()
	var evs []installEvent
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e installEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("progress line %q: %v", line, err)
		}
		evs = append(evs, e)
	}
	return evs
}

// processesUnder lists the pids of processes whose command line names dir.
func processesUnder(dir string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestInstallLocal runs `nuon install create --cloud local` for real:
// killed in the middle of its sandbox phase and run again (one API server,
// one registry, one agent), a third time with nothing to do; then the
// install is rendered and its agent process adopts the sandbox (the
// state create made, no process started twice) and applies every
// component, the network with the sandbox's registry output. Then
// `nuon install delete`: the agent deletes every component, the agent and
// the sandbox go (no process, no file but the state), and the install's
// history stays under refs/nuon/archive/acme/.
func TestInstallLocal(t *testing.T) {
	tf := testenv.TerraformConfig(t)
	ocitest.Require(t, "docker-registry", "htpasswd", "openssl", "python3", "curl")
	assets, err := kubetest.Assets()
	if err != nil {
		testenv.Missing(t, "%v", err)
	}
	root := repoRoot()
	agentBinary(t)
	env := []string{"COSIGN_PASSWORD=", "TF_CLI_CONFIG_FILE=" + tf, "NUON_TF_CLI_CONFIG=" + tf, "NUON_KUBE_ASSETS=" + assets,
		"NUON_SECRET_LICENSE_KEY=e2e-license", "NUON_SECRET_DB_PASSWORD=e2e-db-password", "CHECKPOINT_DISABLE=1",
		"GIT_AUTHOR_NAME=Vendor CI", "GIT_AUTHOR_EMAIL=ci@vendor.example"}
	bare := installTenant(t, env)
	dir := filepath.Join(t.TempDir(), "acme")
	t.Cleanup(func() { stopLocalInstall(t, dir) })

	args := []string{"install", "create", "acme", "--cloud", "local", "--repo", bare, "--dir", dir, "--commit",
		"--channel", "beta", "--input", "cidr=10.10.0.0/16", "--input", "domain=acme.shop.example",
		"--render-key", filepath.Join(root, "fixtures", "keys", "render.pub"),
		"--agent-flag=--vendor-key=" + filepath.Join(root, "fixtures", "keys", "cosign.pub"),
		"--agent-flag=--interval=1s", "--agent-flag=--max-backoff=2s", "--log-level", "warn", "-o", "json"}

	// Killed during the sandbox phase.
	cmd := exec.Command(nuonBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.Contains(line, `"phase":"keys"`) {
		t.Fatalf("first progress line %q: %v", line, err)
	}
	time.Sleep(1500 * time.Millisecond)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()

	start := time.Now()
	evs := installEvents(t, nuon(t, env, 0, args...))
	var phases []string
	for _, e := range evs {
		phases = append(phases, e.Phase)
	}
	if d := cmp.Diff([]string{"keys", "sandbox", "install-file", "agent"}, phases); d != "" {
		t.Fatalf("phases (-want +got):\n%s", d)
	}
	if evs[0].Result != "unchanged" {
		t.Errorf("keys after the kill: %s, want unchanged (the key made before the kill is kept)", evs[0].Result)
	}
	again := installEvents(t, nuon(t, env, 0, args...))
	for _, e := range again {
		if e.Result != "unchanged" {
			t.Errorf("third run: %s %s (%s), want unchanged", e.Phase, e.Result, e.Detail)
		}
	}
	for _, p := range []string{"sandbox/run/kube/etcd", "sandbox/run/kube/certs", "sandbox/run/registry/config.yml", "agent --repo"} {
		if n := len(processesUnder(filepath.Join(dir, p))); n != 1 && p != "agent --repo" {
			t.Errorf("%d processes for %s, want 1", n, p)
		}
	}
	if n := len(processesUnder("--workdir\x00" + filepath.Join(dir, "agent"))); n != 1 {
		t.Errorf("%d agents, want 1", n)
	}

	// installs/acme.yaml on main: one commit, naming the sandbox and no
	// registry (the hand-over).
	if log := gittest.Git(t, bare, "log", "--format=%s", "main", "--", "installs/acme.yaml"); strings.Count(log, "\n")+1 != 1 {
		t.Errorf("installs/acme.yaml commits:\n%s", log)
	}
	file := gittest.Git(t, bare, "show", "main:installs/acme.yaml")
	var outs struct {
		Registry struct {
			URL              string `json:"url"`
			RepositoryPrefix string `json:"repository_prefix"`
		} `json:"registry"`
	}
	b, _ := os.ReadFile(filepath.Join(dir, "sandbox", "outputs.json"))
	if err := json.Unmarshal(b, &outs); err != nil {
		t.Fatal(err)
	}
	pub, _ := os.ReadFile(filepath.Join(dir, "agent.key.pub"))
	for _, want := range []string{"name: local", "agentKey: " + strings.TrimSpace(string(pub)), "provider: local"} {
		if !strings.Contains(file, want) {
			t.Errorf("installs/acme.yaml lacks %q:\n%s", want, file)
		}
	}
	// The sandbox's machine-local inputs are the agent's flags: the tenant
	// repository holds nothing of one machine.
	if strings.Contains(file, dir) || strings.Contains(file, "kube_assets") {
		t.Errorf("installs/acme.yaml holds a path of this machine:\n%s", file)
	}
	if strings.Contains(file, "\nregistry:") {
		t.Errorf("installs/acme.yaml names a registry; the sandbox's output stands for it:\n%s", file)
	}
	if strings.Contains(gittest.Git(t, bare, "log", "-p", "--all"), "PRIVATE KEY") {
		t.Error("a private key reached git")
	}

	sandboxPIDs := processesUnder(filepath.Join(dir, "sandbox/run/kube/etcd"))
	nuon(t, env, 0, "render", "--repo", bare, "--key", filepath.Join(root, "fixtures", "keys", "render"))
	want := map[string]string{"sandbox": "Applied", "network": "Applied", "database": "Applied", "api-image": "Applied", "api": "Applied", "dashboards": "Applied"}
	got := waitPhases(t, env, bare, want, 4*time.Minute)
	if d := cmp.Diff(want, got); d != "" {
		log, _ := os.ReadFile(filepath.Join(dir, "agent.log"))
		t.Fatalf("component phases (-want +got):\n%s\nagent log:\n%s", d, tail(string(log), 4000))
	}
	// The agent adopted the sandbox create made: the same API server and
	// registry, no second one, and its outputs recorded in the status.
	for _, p := range []string{"sandbox/run/kube/etcd", "sandbox/run/registry/config.yml"} {
		if n := len(processesUnder(filepath.Join(dir, p))); n != 1 {
			t.Errorf("after the agent's sandbox apply: %d processes for %s, want 1", n, p)
		}
	}
	if now := processesUnder(filepath.Join(dir, "sandbox/run/kube/etcd")); !cmp.Equal(sandboxPIDs, now) {
		t.Errorf("the agent's sandbox apply restarted etcd: pids %v, then %v", sandboxPIDs, now)
	}
	var status struct {
		Components map[string]struct {
			Job     string
			Outputs map[string]any
		}
	}
	if err := json.Unmarshal([]byte(gittest.Git(t, bare, "show", "refs/heads/nuon/status/acme:status.json")), &status); err != nil {
		t.Fatal(err)
	}
	// Its first apply changed nothing: the state create made is adopted.
	var res struct{ Changed bool }
	if b, err := os.ReadFile(filepath.Join(dir, "agent", "jobs", status.Components["sandbox"].Job, "result.json")); err != nil || json.Unmarshal(b, &res) != nil || res.Changed {
		t.Errorf("the agent's sandbox job (%s): changed %v, %v; want an apply that changes nothing", status.Components["sandbox"].Job, res.Changed, err)
	}
	if reg, _ := status.Components["sandbox"].Outputs["registry"].(map[string]any); reg["url"] != outs.Registry.URL {
		got := status.Components["sandbox"].Outputs["registry"]
		t.Errorf("the sandbox's recorded registry output %v, want %s", got, outs.Registry.URL)
	}
	// The network ran with the sandbox's registry output as a tag, and
	// the sandbox module was copied into the sandbox's own registry.
	network := gittest.Git(t, bare, "show", "refs/heads/nuon/status/acme:applied/network.json")
	if !strings.Contains(network, `"registry": "`+outs.Registry.URL+`"`) {
		t.Errorf("applied/network.json lacks the sandbox's registry %s:\n%s", outs.Registry.URL, network)
	}
	sandbox := gittest.Git(t, bare, "show", "refs/heads/nuon/status/acme:applied/sandbox.json")
	if !strings.Contains(sandbox, `"local": "`+outs.Registry.URL+"/"+outs.Registry.RepositoryPrefix+"/shop/sandbox@sha256:") {
		t.Errorf("applied/sandbox.json does not deploy from the sandbox's registry:\n%s", sandbox)
	}
	t.Logf("install create to every component applied: %s", time.Since(start).Round(100*time.Millisecond))

	start = time.Now()
	del := []string{"install", "delete", "acme", "--repo", bare, "--dir", dir, "--render", filepath.Join(root, "fixtures", "keys", "render"),
		"--timeout", "3m", "--log-level", "warn", "-o", "json"}
	phases = nil
	for _, e := range installEvents(t, nuon(t, env, 0, del...)) {
		phases = append(phases, e.Phase+" "+e.Result)
	}
	t.Logf("install delete: %s", time.Since(start).Round(100*time.Millisecond))
	if d := cmp.Diff([]string{"mark-deleted done", "components done", "agent done", "sandbox done", "archive done"}, phases); d != "" {
		t.Errorf("delete phases (-want +got):\n%s", d)
	}
	if pids := processesUnder(dir); len(pids) != 0 {
		t.Errorf("processes left after delete: %v", pids)
	}
	var left []string
	entries, _ := os.ReadDir(filepath.Join(dir, "sandbox"))
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tfstate") || strings.HasSuffix(e.Name(), ".tfstate.backup") {
			left = append(left, e.Name())
		}
		if e.Name() == "run" {
			t.Error("the sandbox's run directory is left")
		}
	}
	if len(left) == 0 {
		t.Error("the sandbox's state is gone")
	}
	if _, err := os.Stat(filepath.Join(dir, "sandbox", "outputs.json")); !os.IsNotExist(err) {
		t.Errorf("the sandbox's outputs are left (%v)", err)
	}
	if out := gittest.Git(t, bare, "ls-tree", "--name-only", "main", "installs/"); strings.Contains(out, "acme.yaml") {
		t.Error("installs/acme.yaml is still on main")
	}
	refs := gittest.Git(t, bare, "for-each-ref", "--format=%(refname)")
	for _, r := range []string{"refs/nuon/archive/acme/installs", "refs/nuon/archive/acme/status"} {
		if !strings.Contains(refs, r+"\n") && !strings.HasSuffix(refs, r) {
			t.Errorf("%s missing; refs:\n%s", r, refs)
		}
	}
	for _, r := range []string{"refs/heads/nuon/installs/acme", "refs/heads/nuon/status/acme"} {
		if strings.Contains(refs, r) {
			t.Errorf("%s is still there", r)
		}
	}
	// The history: the last status lists no component, an earlier one all five.
	last := gittest.Git(t, bare, "show", "refs/nuon/archive/acme/status:status.json")
	var st struct{ Components map[string]any }
	if err := json.Unmarshal([]byte(last), &st); err != nil || len(st.Components) != 0 {
		t.Errorf("last archived status (%v):\n%s", err, last)
	}
	if n := strings.Count(gittest.Git(t, bare, "log", "--format=%H", "refs/nuon/archive/acme/status"), "\n") + 1; n < 2 {
		t.Errorf("archived status history has %d commits", n)
	}
	// Again: nothing to do.
	for _, e := range installEvents(t, nuon(t, env, 0, del...)) {
		if e.Result != "unchanged" {
			t.Errorf("delete again: %s %s (%s)", e.Phase, e.Result, e.Detail)
		}
	}
}

// waitPhases polls nuon status until acme's component phases are want, or
// timeout, and returns the last ones seen.
func waitPhases(t *testing.T, env []string, repo string, want map[string]string, timeout time.Duration) map[string]string {
	t.Helper()
	var got map[string]string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(time.Second) {
		got = map[string]string{}
		for _, row := range statusJSON(t, env, repo, "--cache-dir="+filepath.Join(t.TempDir(), "cache")) {
			if row.Install == "acme" {
				for _, c := range row.Components {
					got[c.Name] = c.Phase
				}
			}
		}
		if cmp.Equal(want, got) {
			break
		}
	}
	return got
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// stopLocalInstall stops whatever a local install in dir left running, so
// a failing test leaves no process behind.
func stopLocalInstall(t *testing.T, dir string) {
	if b, err := os.ReadFile(filepath.Join(dir, "agent.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	sb := filepath.Join(dir, "sandbox")
	mod := filepath.Join(sb, "module")
	_ = exec.Command(filepath.Join(mod, "kube-down.sh"), filepath.Join(sb, "run", "kube")).Run()
	_ = exec.Command(filepath.Join(mod, "registry.sh"), "down", filepath.Join(sb, "run", "registry")).Run()
	for _, pid := range processesUnder(dir) {
		t.Errorf("process %d still runs under %s; killing it", pid, dir)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sigstore/cosign/v2/pkg/cosign"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/oci/ocitest"
	"nuon.dev/nuon/internal/testenv"
	"nuon.dev/nuon/schemas"
)

// pluginTenant is a tenant repository made from fixtures/plugins/tenant
// with its registries pointed at the test's, and what a test drives it
// with.
type pluginTenant struct {
	t              *testing.T
	bare, src, dir string
	// exited is closed when the agent process ends.
	exited chan struct{}
	vendor *ocitest.Registry
	env    []string
}

func newPluginTenant(t *testing.T, vendor, install *ocitest.Registry) *pluginTenant {
	dir := t.TempDir()
	p := &pluginTenant{t: t, bare: filepath.Join(dir, "tenant.git"), src: filepath.Join(dir, "main"), dir: dir, vendor: vendor,
		env: []string{"COSIGN_PASSWORD=", "GIT_AUTHOR_NAME=Vendor CI", "GIT_AUTHOR_EMAIL=ci@vendor.example"}}
	if err := os.CopyFS(p.src, os.DirFS(filepath.Join(repoRoot(), "fixtures", "plugins", "tenant"))); err != nil {
		t.Fatal(err)
	}
	p.edit("nuon.yaml", "registry.vendor.example", vendor.Host)
	p.edit("installs/acme.yaml", "127.0.0.1:5000", install.Host)
	gittest.InitBare(t, p.bare)
	gittest.CommitDir(t, p.bare, "main", p.src, "zones")
	return p
}

// edit replaces old with new in the file of main's work tree.
func (p *pluginTenant) edit(file, old, new string) {
	p.t.Helper()
	path := filepath.Join(p.src, file)
	b, err := os.ReadFile(path)
	if err != nil {
		p.t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		p.t.Fatalf("%s has no %q", file, old)
	}
	if err := os.WriteFile(path, bytes.ReplaceAll(b, []byte(old), []byte(new)), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// release releases the plugin directory dir with the cosign key and
// records it as component dns's release; it returns the digest.
func (p *pluginTenant) release(dir, key string) string {
	p.t.Helper()
	out := nuon(p.t, p.env, 0, "plugin", "release", "-o", "json", "--repository", p.vendor.Host+"/acme/plugins/zonefile",
		"--key", key, "--repo", p.bare, "--component", "dns", dir)
	var rel struct {
		Digest  string
		Release struct{ Added []string }
	}
	if err := json.Unmarshal([]byte(out), &rel); err != nil || len(rel.Release.Added) != 1 {
		p.t.Fatalf("nuon plugin release: %v\n%s", err, out)
	}
	return rel.Digest
}

// pin moves the stable channel's pin of dns to version and renders.
func (p *pluginTenant) pin(version string) {
	p.t.Helper()
	// The release commits went to main meanwhile: take them first.
	rel := gittest.Git(p.t, p.bare, "show", "main:releases/dns.yaml")
	if err := os.MkdirAll(filepath.Join(p.src, "releases"), 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.src, "releases", "dns.yaml"), []byte(rel+"\n"), 0o644); err != nil {
		p.t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(p.src, "channels", "stable.yaml"))
	b = regexp.MustCompile(`(?m)^  dns: .*$`).ReplaceAll(b, []byte("  dns: "+version))
	if err := os.WriteFile(filepath.Join(p.src, "channels", "stable.yaml"), b, 0o644); err != nil {
		p.t.Fatal(err)
	}
	gittest.CommitDir(p.t, p.bare, "main", p.src, "stable: dns "+version)
	nuon(p.t, p.env, 0, "render", "--repo", p.bare, "--key", filepath.Join(repoRoot(), "fixtures", "keys", "render"))
}

// plugin copies the zonefile plugin into a directory of its own as
// version, with edit applied to its manifest and to its script.
func (p *pluginTenant) plugin(version string, manifest, script func(string) string) string {
	p.t.Helper()
	dir := filepath.Join(p.dir, "zonefile-"+version)
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(repoRoot(), "fixtures", "plugins", "zonefile"))); err != nil {
		p.t.Fatal(err)
	}
	for file, f := range map[string]func(string) string{"plugin.json": manifest, "zonefile": script} {
		path := filepath.Join(dir, file)
		b, _ := os.ReadFile(path)
		s := strings.ReplaceAll(string(b), "0.3.0", version)
		if f != nil {
			s = f(s)
		}
		st, _ := os.Stat(path)
		if err := os.WriteFile(path, []byte(s), st.Mode()); err != nil {
			p.t.Fatal(err)
		}
	}
	return dir
}

// status reads component dns's status from the install's status ref.
func (p *pluginTenant) status() (schemas.ComponentStatus, string) {
	cmd := exec.Command("git", "--git-dir", p.bare, "show", schemas.StatusRef("acme")+":"+schemas.StatusFile)
	out, err := cmd.Output()
	if err != nil {
		return schemas.ComponentStatus{}, ""
	}
	var st schemas.Status
	if err := json.Unmarshal(out, &st); err != nil {
		p.t.Fatalf("status: %v\n%s", err, out)
	}
	return st.Components["dns"], st.Desired
}

// await waits until dns's status is phase at version.
func (p *pluginTenant) await(phase, version string) schemas.ComponentStatus {
	p.t.Helper()
	return p.awaitFunc(phase+" "+version, func(cs schemas.ComponentStatus) bool { return cs.Phase == phase && cs.Version == version })
}

// awaitFunc waits until dns's status is what ok says.
func (p *pluginTenant) awaitFunc(what string, ok func(schemas.ComponentStatus) bool) schemas.ComponentStatus {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		cs, _ := p.status()
		if ok(cs) {
			return cs
		}
		select {
		case <-p.exited:
			p.t.Fatalf("the agent exited; dns is %+v", cs)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("dns did not reach %s: %+v", what, cs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestPluginComponentE2E is a vendor's plugin through the whole chain:
// the zonefile plugin (Perl) released with nuon plugin release (pushed,
// signed, recorded on main as component dns's release), rendered into
// the install's signed desired state pinned by digest with nuon.yaml's
// grants, synced by a real agent into the install's registry, and run by
// the job from there, which writes the DNS records into the zone dir.
// Then, with the same agent process still running: a plugin upgrade (a
// new release, the channel's pin moved) applies; a version that needs a
// capability nuon.yaml does not grant, one that speaks only an unknown
// protocol and one signed by another key are each refused, with the
// reason in the status and the zone untouched.
func TestPluginComponentE2E(t *testing.T) {
	ocitest.Require(t, ocitest.Binary)
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("perl is not installed")
	}
	root := repoRoot()
	keys := filepath.Join(root, "fixtures", "keys")
	vendor := ocitest.Start(t, ocitest.Options{})
	install := ocitest.Start(t, ocitest.Options{})
	p := newPluginTenant(t, vendor, install)
	cosignKey := filepath.Join(keys, "cosign.key")

	d1 := p.release(filepath.Join(root, "fixtures", "plugins", "zonefile"), cosignKey)
	// Recorded only for a component of type plugin that runs this plugin.
	mainBefore := gittest.Git(t, p.bare, "rev-parse", "main")
	nuon(t, p.env, 1, "plugin", "release", "--repository", vendor.Host+"/acme/plugins/zonefile", "--key", cosignKey,
		"--repo", p.bare, "--component", "nosuch", filepath.Join(root, "fixtures", "plugins", "zonefile"))
	if gittest.Git(t, p.bare, "rev-parse", "main") != mainBefore {
		t.Error("a refused release moved main")
	}
	p.pin("0.3.0")

	signers := filepath.Join(p.dir, "allowed_signers")
	pub, _ := os.ReadFile(filepath.Join(keys, "render.pub"))
	if err := os.WriteFile(signers, []byte("renderer "+string(pub)), 0o644); err != nil {
		t.Fatal(err)
	}
	zones := t.TempDir()
	zone := filepath.Join(zones, "acme.shop.internal.zone")
	install.Requests(t)
	agent := exec.Command(nuonBinary(t), "agent", "--repo", p.bare, "--install", "acme", "--trust", signers,
		"--key", filepath.Join(keys, "acme"), "--workdir", filepath.Join(p.dir, "agent"),
		"--vendor-key", filepath.Join(keys, "cosign.pub"), "--interval", "500ms", "--heartbeat", "0")
	// The agent's environment has the zone dir and a secret; the plugin is
	// granted only the former.
	tf := testenv.TerraformConfig(t)
	agent.Env = append(os.Environ(), "NUON_TF_CLI_CONFIG="+tf, "TF_CLI_CONFIG_FILE="+tf,
		"NUON_ZONE_DIR="+zones, "NUON_SECRET_API_TOKEN=plugin-must-not-see-this")
	var agentLog lockedBuffer
	agent.Stdout, agent.Stderr = &agentLog, &agentLog
	agent.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func() {
		_ = agent.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-agent.Process.Pid, syscall.SIGTERM)
		<-p.exited
		if t.Failed() {
			t.Logf("agent log:\n%s", agentLog.String())
		}
	})

	start := time.Now()
	cs := p.await(schemas.PhaseApplied, "0.3.0")
	t.Logf("0.3.0 released, rendered, synced and applied in %s", time.Since(start).Round(time.Millisecond))
	if cs.Digests[schemas.PluginArtifactName] != d1 {
		t.Errorf("status digests %v, want the plugin's %s", cs.Digests, d1)
	}
	if cs.Outputs["records"] != float64(2) {
		t.Errorf("outputs %v", cs.Outputs)
	}
	z, err := os.ReadFile(zone)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"api\t60\tIN\tA\t10.0.0.10", "@\t300\tIN\tTXT\t\"owner=acme\""} {
		if !strings.Contains(string(z), want) {
			t.Errorf("zone file has no %q:\n%s", want, z)
		}
	}
	// Synced once, by digest: the plugin's manifest and its signature
	// were each put into the install registry once, and polls after the
	// apply copy nothing.
	time.Sleep(2 * time.Second)
	puts := manifestPuts(install.Requests(t))
	if len(puts) != 2 {
		t.Errorf("manifest PUTs into the install registry for 0.3.0: %v, want the plugin's and its signature's", puts)
	}

	// The upgrade: 0.4.0 gives a record without a ttl an hour, not five
	// minutes. Released, pinned on main, applied by the same agent.
	pid := agent.Process.Pid
	d2 := p.release(p.plugin("0.4.0", nil, func(s string) string { return strings.Replace(s, "$ttl //= 300;", "$ttl //= 3600;", 1) }), cosignKey)
	p.pin("0.4.0")
	start = time.Now()
	cs = p.await(schemas.PhaseApplied, "0.4.0")
	t.Logf("0.4.0 pinned, rendered, synced and applied in %s", time.Since(start).Round(time.Millisecond))
	if cs.Digests[schemas.PluginArtifactName] != d2 || d2 == d1 {
		t.Errorf("status digests %v, want the new plugin's %s", cs.Digests, d2)
	}
	if z, _ = os.ReadFile(zone); !strings.Contains(string(z), "@\t3600\tIN\tTXT") {
		t.Errorf("the upgraded plugin did not apply:\n%s", z)
	}
	select {
	case <-p.exited:
		t.Fatal("the agent did not stay the same process")
	default:
	}
	if agent.Process.Pid != pid {
		t.Fatal("the agent did not stay the same process")
	}
	if puts := manifestPuts(install.Requests(t)); len(puts) != 2 {
		t.Errorf("manifest PUTs into the install registry for 0.4.0: %v", puts)
	}
	applied, _ := os.ReadFile(zone)

	// Refused, each with why, and nothing applied.
	other, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	otherKey := filepath.Join(p.dir, "other.key")
	if err := os.WriteFile(otherKey, other.PrivateBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		version  string
		manifest func(string) string
		key      string
		want     string
	}{
		{"0.5.0", func(s string) string {
			return strings.Replace(s, `"capabilities": {`, `"capabilities": {"network": true, `, 1)
		},
			cosignKey, "needs network: capability not granted by the install's desired state"},
		{"0.6.0", func(s string) string { return strings.Replace(s, `"protocols": [1]`, `"protocols": [7]`, 1) },
			cosignKey, "speaks protocols [7]; this job speaks [1]"},
		{"0.7.0", nil, otherKey, "no signature verifies with the vendor key"},
	} {
		p.release(p.plugin(tc.version, tc.manifest, nil), tc.key)
		p.pin(tc.version)
		// A job refuses the plugin (the component fails at its version);
		// the agent's sync refuses an artifact whose signature does not
		// verify before any job (the component fails where it stood).
		cs := p.awaitFunc(tc.version+" refused", func(cs schemas.ComponentStatus) bool {
			return cs.Phase == schemas.PhaseFailed && strings.Contains(cs.Error, tc.want)
		})
		t.Logf("%s refused: %s", tc.version, cs.Error)
		if z, _ := os.ReadFile(zone); !bytes.Equal(z, applied) {
			t.Errorf("%s: the zone changed:\n%s", tc.version, z)
		}
	}
	if strings.Contains(gittest.Git(t, p.bare, "log", "-p", "--all"), "plugin-must-not-see-this") {
		t.Error("a secret reached git")
	}

	// Back to 0.4.0: applied again.
	p.pin("0.4.0")
	p.await(schemas.PhaseApplied, "0.4.0")
}

// manifestPuts are the manifest uploads among registry requests.
func manifestPuts(requests []string) []string {
	var out []string
	for _, r := range requests {
		if strings.HasPrefix(r, "PUT ") && strings.Contains(r, "/manifests/") {
			out = append(out, r)
		}
	}
	return out
}

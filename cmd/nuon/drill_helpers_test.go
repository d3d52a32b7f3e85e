package main

import (
	"crypto"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/oci/ocitest"
	"nuon.dev/nuon/internal/trusttest"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// fleet is the rotation drill's running fleet: nuon server in front of
// the sample tenant (main in st.src, keys and the root's versions from
// the drill type of trustroot_e2e_test.go) and one long-running
// nuon-agent per install, each given what `nuon install create` hands an
// install once: its key (DIR/agent.key) and version 1 of the trust root
// (DIR/trust-root.json). Nothing in DIR is written by the drill except by
// `nuon install rotate-key`, whose job it is.
type fleet struct {
	st     *serverTenant
	d      *drill
	addr   string
	srv    *nuonServer
	ids    []string
	agents map[string]*exec.Cmd
	logs   map[string]*lockedBuffer
	layout string
	steps  []drillStep
}

// drillStep is one timed step of the drill, for the note.
type drillStep struct {
	name string
	took time.Duration
}

// dir is an install's own folder: the files it was given at creation.
func (f *fleet) dir(id string) string { return filepath.Join(f.st.work, id+"-dir") }

// serve (re)starts nuon server on the fleet's address, rendering with
// the render key named key; the agents keep their URL.
func (f *fleet) serve(t *testing.T, key string) {
	t.Helper()
	if f.srv != nil {
		f.srv.stop()
	}
	args := []string{"server", "--repo", f.st.repo, "--render-key", f.d.key(key), "--poll-interval", "200ms", "--listen", f.addr}
	f.srv = serverProcess(t, f.st.nuon, f.st.env, args, "http://"+f.addr)
	f.srv.waitReady(t, time.Minute)
}

// restartServer restarts nuon server with the same render key, after
// something moved refs behind its back (an attacker with write access to
// the server's storage: the ref table is read at start).
func (f *fleet) restartServer(t *testing.T) {
	t.Helper()
	f.srv.stop()
	f.srv = f.srv.restart(t)
	f.srv.waitReady(t, time.Minute)
}

// start starts the agent of install id with the files in its folder.
func (f *fleet) start(t *testing.T, id string) {
	t.Helper()
	cmd, log := startProcess(t, f.st.env, f.st.agent, "agent", "--server-auth",
		"--repo", "http://"+f.addr+"/tenant.git", "--install", id,
		"--trust-root", filepath.Join(f.dir(id), "trust-root.json"), "--key", filepath.Join(f.dir(id), "agent.key"),
		"--workdir", filepath.Join(f.st.work, id), "--artifacts", f.layout, "--insecure-skip-artifact-verification",
		"--interval", "1s", "--max-backoff", "2s")
	f.agents[id], f.logs[id] = cmd, log
}

// all is every log of the fleet, for a failure.
func (f *fleet) all() string {
	var b strings.Builder
	b.WriteString("server:\n" + tail(f.srv.log.String(), 60))
	for _, id := range f.ids {
		b.WriteString("\nagent " + id + ":\n" + tail(f.logs[id].String(), 40))
	}
	return b.String()
}

// desired is the tip of install id's desired ref.
func (f *fleet) desired(id string) string {
	out, _ := gittest.Run(f.st.repo, nil, "rev-parse", "--verify", "--quiet", schemas.InstallRef(id))
	return strings.TrimSpace(out)
}

// status reads the status install id's agent last pushed through the
// server (zero before the first).
func (f *fleet) status(id string) schemas.Status {
	var st schemas.Status
	out, err := gittest.Run(f.st.repo, nil, "show", schemas.StatusRef(id)+":"+schemas.StatusFile)
	if err == nil {
		_ = json.Unmarshal([]byte(out), &st)
	}
	return st
}

// converge waits until every install's agent reports its desired ref's
// tip taken, and returns how long that took.
func (f *fleet) converge(t *testing.T, what string, ids ...string) time.Duration {
	t.Helper()
	if len(ids) == 0 {
		ids = f.ids
	}
	start := time.Now()
	for _, id := range ids {
		waitFor(t, id+" to converge: "+what, 5*time.Minute, f.all, func() bool {
			st, want := f.status(id), f.desired(id)
			return want != "" && st.Desired == want && st.Refusal == nil
		})
	}
	return time.Since(start)
}

// step runs one drill step and keeps its time.
func (f *fleet) step(t *testing.T, name string, run func()) {
	t.Helper()
	start := time.Now()
	run()
	took := time.Since(start).Round(100 * time.Millisecond)
	f.steps = append(f.steps, drillStep{name, took})
	t.Logf("drill step %q: %s", name, took)
}

// configHashes hashes every file in each install's folder: what the
// install was given, which a rotation must not need to change.
func (f *fleet) configHashes(t *testing.T) map[string]string {
	t.Helper()
	sums := map[string]string{}
	for _, id := range f.ids {
		folderHashes(t, id, f.dir(id), sums)
	}
	return sums
}

// tips are the tips of every install's desired ref.
func (f *fleet) tips() map[string]string {
	tips := map[string]string{}
	for _, id := range f.ids {
		tips[id] = f.desired(id)
	}
	return tips
}

// moved waits until the server rendered every install again: each
// desired ref moved from was to a higher generation.
func (f *fleet) moved(t *testing.T, what string, was map[string]string) {
	t.Helper()
	waitFor(t, "the server to render "+what, 2*time.Minute, f.all, func() bool {
		for _, id := range f.ids {
			now := f.desired(id)
			if now == "" || now == was[id] {
				return false
			}
		}
		return true
	})
	for _, id := range f.ids {
		if was[id] != "" && gitGeneration(t, f.st.repo, f.desired(id)) <= gitGeneration(t, f.st.repo, was[id]) {
			t.Errorf("%s: the render of %s is not at a higher generation", id, what)
		}
	}
}

// sameConfig fails the test when a file in an install's folder changed,
// appeared or went away since before.
func sameConfig(t *testing.T, step string, before, after map[string]string) {
	t.Helper()
	for name, sum := range before {
		if after[name] != sum {
			t.Errorf("%s: %s changed inside the install", step, name)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			t.Errorf("%s: %s appeared inside the install", step, name)
		}
	}
}

// alive fails the test when an agent process of ids has exited.
func (f *fleet) alive(t *testing.T, step string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if f.agents[id].ProcessState != nil {
			t.Errorf("%s: %s's agent exited: %s", step, id, f.agents[id].ProcessState)
		}
		if err := f.agents[id].Process.Signal(syscall.Signal(0)); err != nil {
			t.Errorf("%s: %s's agent is gone: %v", step, id, err)
		}
	}
}

// note renders the step times as a table for the drill's note.
func (f *fleet) note() string {
	var b strings.Builder
	b.WriteString("| step | took |\n| --- | --- |\n")
	for _, s := range f.steps {
		fmt.Fprintf(&b, "| %s | %s |\n", s.name, s.took)
	}
	return b.String()
}

// releaseDrill is the setup of the drills that run vendor CI with the
// binaries on real registries: main holds the app's image alone (in the
// vendor registry, no release yet) and version 1 of the trust root;
// nuon build and nuon release make each release, nuon server follows
// main and renders with render-a, and acme's long-running nuon-agent
// behind it copies artifacts into its own registry (TLS, basic auth).
// acme's folder (folder) holds what it was given at creation: its key
// and version 1 of the root.
type releaseDrill struct {
	root, dir, keys, src, bare, folder string
	vendor, install                    *ocitest.Registry
	env                                []string
	// agentArgs are the agent's flags beyond the server, install, key,
	// root, registry and interval ones.
	agentArgs []string
	srv       *nuonServer
	agent     *exec.Cmd
	agentLog  *lockedBuffer
}

// newReleaseDrill starts the two registries and writes the root keys
// root-1, root-2 and the render key render-a under r.keys.
func newReleaseDrill(t *testing.T) *releaseDrill {
	t.Helper()
	ocitest.Require(t, "docker-registry")
	r := &releaseDrill{root: repoRoot(), keys: t.TempDir(), dir: t.TempDir()}
	r.vendor = ocitest.Start(t, ocitest.Options{})
	r.install = ocitest.Start(t, ocitest.Options{TLS: true, Username: "nuon", Password: "install-secret"})
	for _, k := range []string{"root-1", "root-2", "render-a"} {
		trusttest.WriteKey(t, r.keys, k)
	}
	r.env = []string{"COSIGN_PASSWORD=", "NUON_REGISTRY_PASSWORD=install-secret", "NUON_SECRET_LICENSE_KEY=e2e-license",
		"GIT_AUTHOR_NAME=Vendor CI", "GIT_AUTHOR_EMAIL=ci@vendor.example"}
	return r
}

// cosignKey makes a fresh cosign key pair, writes its private key to
// r.keys/name.key and returns the file and the public key as an
// authorized_keys line, the form the trust root names keys in.
func (r *releaseDrill) cosignKey(t *testing.T, name string) (file, authorized string) {
	t.Helper()
	kb, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(r.keys, name+".key")
	writeTestFile(t, file, kb.PrivateBytes)
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(kb.PublicBytes)
	if err != nil {
		t.Fatal(err)
	}
	spub, err := ssh.NewPublicKey(pub.(crypto.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	return file, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(spub)))
}

// main writes main (the sample tenant cut to acme and the api-image
// component, pinned on stable at 2.3.0) with root version v1, and acme's
// folder: v1 and acme's key.
func (r *releaseDrill) main(t *testing.T, v1 []byte) {
	t.Helper()
	r.bare, r.src, r.folder = filepath.Join(r.dir, "tenant.git"), filepath.Join(r.dir, "main"), filepath.Join(r.dir, "acme-dir")
	if err := os.CopyFS(r.src, os.DirFS(filepath.Join(r.root, "fixtures", "tenant"))); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(r.src, "releases"))
	os.Remove(filepath.Join(r.src, "channels", "beta.yaml"))
	for _, id := range []string{"globex", "initech"} {
		os.Remove(filepath.Join(r.src, "installs", id+".yaml"))
	}
	writeTestFile(t, filepath.Join(r.src, "nuon.yaml"), []byte("name: shop\ncomponents:\n  - name: api-image\n    type: image\n    repository: "+r.vendor.Host+"/shop/api\n"))
	r.pin(t, "2.3.0")
	acme := filepath.Join(r.src, "installs", "acme.yaml")
	writeTestFile(t, acme, regexp.MustCompile(`(?m)^registry: .*$`).ReplaceAll([]byte(readFileT(t, acme)), []byte("registry: "+r.install.Host+"/nuon-acme")))
	writeTestFile(t, filepath.Join(r.src, trust.FileName(1)), v1)
	writeTestFile(t, filepath.Join(r.folder, "trust-root.json"), v1)
	writeTestFile(t, filepath.Join(r.folder, "agent.key"), []byte(readFileT(t, filepath.Join(r.root, "fixtures", "keys", "acme"))))
	if err := os.Chmod(filepath.Join(r.folder, "agent.key"), 0o600); err != nil {
		t.Fatal(err)
	}
	gittest.InitBare(t, r.bare)
	gittest.CommitDir(t, r.bare, "main", r.src, "shop")
	r.env = append(r.env, e2eEnv(t)...)
}

// pin pins api-image at version on stable, in r.src.
func (r *releaseDrill) pin(t *testing.T, version string) {
	writeTestFile(t, filepath.Join(r.src, "channels", "stable.yaml"), []byte("components:\n  api-image: "+version+"\n"))
}

// build runs nuon build for api-image from the sources under from with
// args (the signing keys and provenance flags) and returns the build
// report's file and the image's digest.
func (r *releaseDrill) build(t *testing.T, name, from string, args ...string) (string, string) {
	t.Helper()
	args = append(append([]string{"build", "--app", filepath.Join(r.src, "nuon.yaml"), "--src", from, "-o", "json"}, args...), "api-image")
	out := nuon(t, r.env, 0, args...)
	var rep buildReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Artifacts) != 1 {
		t.Fatalf("build report %s: %v", out, err)
	}
	file := filepath.Join(r.dir, name+".json")
	writeTestFile(t, file, []byte(out))
	return file, rep.Artifacts[0].Digest
}

// start starts nuon server and acme's agent, given acme's folder.
func (r *releaseDrill) start(t *testing.T) {
	t.Helper()
	r.srv = startServer(t, nuonBinary(t), r.env, "--repo", r.bare, "--render-key", filepath.Join(r.keys, "render-a"), "--poll-interval", "200ms")
	r.srv.waitReady(t, time.Minute)
	args := append([]string{"agent", "--server-auth", "--repo", r.srv.url + "/tenant.git", "--install", "acme",
		"--trust-root", filepath.Join(r.folder, "trust-root.json"), "--key", filepath.Join(r.folder, "agent.key"),
		"--workdir", filepath.Join(r.dir, "agent"),
		"--registry", r.install.Host, "--registry-ca", r.install.CAFile, "--registry-username", "nuon", "--interval", "1s"}, r.agentArgs...)
	r.agent, r.agentLog = startProcess(t, r.env, agentBinary(t), args...)
}

// logs are the server's and the agent's last lines, for a failure.
func (r *releaseDrill) logs() string {
	return "server:\n" + tail(r.srv.log.String(), 40) + "\nagent:\n" + tail(r.agentLog.String(), 40)
}

// ref is the commit name names in the tenant repository ("" for none).
func (r *releaseDrill) ref(name string) string {
	out, _ := gittest.Run(r.bare, nil, "rev-parse", "--verify", "--quiet", name)
	return strings.TrimSpace(out)
}

// status is acme's last status pushed through the server.
func (r *releaseDrill) status() schemas.Status {
	var st schemas.Status
	if out, err := gittest.Run(r.bare, nil, "show", schemas.StatusRef("acme")+":"+schemas.StatusFile); err == nil {
		_ = json.Unmarshal([]byte(out), &st)
	}
	return st
}

// commit commits r.src to main as a change of the vendor's; the server
// (started with the first commit after main's first) renders it and the
// running agent takes it: commit returns api-image's status from the
// first status that names the new render, and how long after the render
// that status came.
func (r *releaseDrill) commit(t *testing.T, what string) (schemas.ComponentStatus, time.Duration) {
	t.Helper()
	was := r.ref(schemas.InstallRef("acme"))
	gittest.CommitDir(t, r.bare, "main", r.src, what)
	if r.srv == nil {
		r.start(t)
	}
	waitFor(t, "the server to render "+what, time.Minute, r.logs, func() bool {
		return r.ref(schemas.InstallRef("acme")) != was
	})
	tip, start := r.ref(schemas.InstallRef("acme")), time.Now()
	waitFor(t, "acme's status of "+what, 2*time.Minute, r.logs, func() bool { return r.status().Desired == tip })
	return r.status().Components["api-image"], time.Since(start)
}

// release records version from report and pins it on main, then commits
// as commit does.
func (r *releaseDrill) release(t *testing.T, version, report string) (schemas.ComponentStatus, time.Duration) {
	t.Helper()
	nuon(t, r.env, 0, "release", "api-image", "--repo", r.bare, "--version", version, "--from", report)
	gittest.Git(t, r.bare, "--work-tree", r.src, "checkout", "main", "--", "releases")
	r.pin(t, version)
	return r.commit(t, "api-image "+version)
}

// inInstall tells whether any repository of the install's registry
// holds digest.
func (r *releaseDrill) inInstall(t *testing.T, digest string) bool {
	t.Helper()
	opts := []crane.Option{crane.WithAuth(&authn.Basic{Username: "nuon", Password: "install-secret"}), crane.Insecure}
	repos, err := crane.Catalog(r.install.Host, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, repo := range repos {
		if _, err := crane.Head(r.install.Host+"/"+repo+"@"+digest, opts...); err == nil {
			return true
		}
	}
	return false
}

// folderHashes hashes every file under dir, by path relative to dir
// prefixed with name: what an install was given, which a rotation must
// not need to change.
func folderHashes(t *testing.T, name, dir string, sums map[string]string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		sum := sha256.Sum256(b)
		sums[filepath.Join(name, rel)] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

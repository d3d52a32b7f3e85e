package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	gitstorage "github.com/go-git/go-git/v5/storage"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
)

// tenant is a tenant repository served by a real smart-HTTP git server,
// with a small app whose components all use the test plugin:
//
//	a ← b ← c   (c uses b's output, b uses a's)
//	d           (independent)
type tenant struct {
	t      testing.TB
	srv    *gittest.Server
	bare   string
	src    string
	render *signature.Signer
	trust  *signature.AllowedSigners
	keys   map[string]*signature.Signer
	// now stamps the renderer's commits.
	now func() time.Time
}

const fixtureKeys = "../fixtures/keys"

func newTenant(t testing.TB, opts ...func(*tenant)) *tenant {
	t.Helper()
	tn := &tenant{t: t, srv: gittest.NewServer(t), src: t.TempDir(), keys: map[string]*signature.Signer{}, now: time.Now}
	for _, o := range opts {
		o(tn)
	}
	tn.bare = tn.srv.InitBare(t, "tenant.git")
	var err error
	if tn.render, err = signature.LoadSigner(filepath.Join(fixtureKeys, "render")); err != nil {
		t.Fatal(err)
	}
	if tn.trust, err = signature.ParseAllowedSigners([]byte("renderer " + tn.render.AuthorizedKey() + "\n")); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"acme", "globex"} {
		if tn.keys[id], err = signature.LoadSigner(filepath.Join(fixtureKeys, id)); err != nil {
			t.Fatal(err)
		}
	}
	tn.write("nuon.yaml", `name: test
components:
  - name: a
    type: terraform
    repository: registry.test/app/a
    inputs: {name: "a-${install.id}"}
    outputs: [id, token]
  - name: b
    type: terraform
    repository: registry.test/app/b
    dependsOn: [a]
    inputs:
      upstream: ${components.a.outputs.id}
      fail: ${install.inputs.fail_b}
      sleep: ${install.inputs.sleep_b}
    outputs: [id]
  - name: c
    type: terraform
    repository: registry.test/app/c
    dependsOn: [b]
    inputs: {upstream: "${components.b.outputs.id}"}
  - name: d
    type: terraform
    repository: registry.test/app/d
`)
	tn.write("channels/stable.yaml", "components: {a: 1.0.0, b: 1.0.0, c: 1.0.0, d: 1.0.0}\n")
	for _, c := range []string{"a", "b", "c", "d"} {
		tn.write("releases/"+c+".yaml", release(c, "1.0.0", "1.1.0"))
	}
	for id, k := range tn.keys {
		tn.setInstall(id, k, "false", "0s")
	}
	tn.commit("first")
	tn.renderMain()
	return tn
}

func release(c string, versions ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "component: %s\nversions:\n", c)
	for i, v := range versions {
		fmt.Fprintf(&b, "  - version: %s\n    artifacts:\n      module:\n        digest: sha256:%064x\n", v, len(c)*100+i)
	}
	return b.String()
}

func (tn *tenant) setInstall(id string, key *signature.Signer, failB, sleepB string) {
	tn.write("installs/"+id+".yaml", fmt.Sprintf(`channel: stable
inputs: {fail_b: "%s", sleep_b: "%s"}
cloud: {provider: local}
sandbox: {name: local}
registry: 127.0.0.1:5000/%s
agentKey: %s
`, failB, sleepB, id, key.AuthorizedKey()))
}

func (tn *tenant) write(name, content string) {
	tn.t.Helper()
	p := filepath.Join(tn.src, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tn.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		tn.t.Fatal(err)
	}
}

func (tn *tenant) commit(msg string) { gittest.CommitDir(tn.t, tn.bare, "main", tn.src, msg) }

// renderMain renders main into the bare repository, as `nuon render` does.
func (tn *tenant) renderMain() *renderer.Result {
	tn.t.Helper()
	repo, err := gitrepo.Open(tn.bare)
	if err != nil {
		tn.t.Fatal(err)
	}
	source, err := repo.Resolve("main")
	if err != nil {
		tn.t.Fatal(err)
	}
	prev := renderer.Previous{Installs: map[string]plumbing.Hash{}}
	prev.Rendered, _ = repo.Ref(plumbing.ReferenceName(schemas.RenderedRef))
	refs, _ := repo.Refs(schemas.InstallRefPrefix)
	for n, h := range refs {
		prev.Installs[strings.TrimPrefix(n.String(), schemas.InstallRefPrefix)] = h
	}
	reqs, _ := repo.Ref(plumbing.ReferenceName(requests.Ref))
	approvals, _ := repo.Ref(plumbing.ReferenceName(schemas.ApprovalsRef))
	res, err := renderer.Render(context.Background(), repo.Storer(), source, prev, renderer.Options{Signer: tn.render, Now: tn.now, Requests: reqs, Approvals: approvals})
	if err != nil {
		tn.t.Fatal(err)
	}
	if err := res.Objects.Flush(repo.Storer()); err != nil {
		tn.t.Fatal(err)
	}
	var ups []gitrepo.Update
	for _, u := range res.Updates {
		ups = append(ups, gitrepo.Update{Name: u.Name, Old: u.Old, New: u.New})
	}
	if err := repo.Apply(context.Background(), ups); err != nil {
		tn.t.Fatal(err)
	}
	return res
}

func (tn *tenant) git(args ...string) string { return gittest.Git(tn.t, tn.bare, args...) }

// installAgent is one install's agent under test.
type installAgent struct {
	*agent.Agent
	workdir string
	records string
}

func (tn *tenant) agent(id string, opts ...func(*agent.Config)) *installAgent {
	tn.t.Helper()
	dir := tn.t.TempDir()
	return tn.agentIn(id, dir, opts...)
}

func (tn *tenant) agentIn(id, dir string, opts ...func(*agent.Config)) *installAgent {
	tn.t.Helper()
	records := filepath.Join(dir, "records")
	cfg := agent.Config{
		Install: id,
		Remote:  agent.NewRemote(tn.srv.URL("tenant.git"), nil),
		Trust:   tn.trust,
		Key:     tn.keys[id],
		Workdir: filepath.Join(dir, "work"),
		Runner: &jobs.Local{
			Command:   []string{os.Args[0], "-test.run=^$"},
			Env:       []string{"NUON_AGENT_TEST_JOB=1", "NUON_TEST_RECORD=" + records, "GORACE=atexit_sleep_ms=0"},
			KillGrace: 2 * time.Second,
		},
		Plugins:  []string{schemas.TypeTerraform},
		Interval: 50 * time.Millisecond,
		Logger:   slog.New(slog.NewTextHandler(testWriter{tn.t}, &slog.HandlerOptions{Level: slog.LevelDebug})),

		// The test plugin reads no artifacts; artifacts_test.go and
		// package sync test verification.
		InsecureSkipArtifactVerification: true,
	}
	for _, o := range opts {
		o(&cfg)
	}
	a, err := agent.New(cfg)
	if err != nil {
		tn.t.Fatal(err)
	}
	return &installAgent{Agent: a, workdir: dir, records: records}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (ia *installAgent) reconcile(t testing.TB) *agent.Report {
	t.Helper()
	rep, err := ia.Reconcile(context.Background())
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return rep
}

type (
	storage = gitstorage.Storer
	refName = plumbing.ReferenceName
	hash    = plumbing.Hash
)

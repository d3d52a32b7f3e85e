package sync_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/sigstore/sigstore/pkg/signature"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/oci"
	gitsig "nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/testenv"
	"nuon.dev/nuon/jobrun"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/reconciler/terraform"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/schemas"
)

// TestMain doubles as `nuon job run`: the agent under test starts this
// binary with NUON_SYNC_TEST_JOB=1, and the job reads its module from the
// install registry.
func TestMain(m *testing.M) {
	if os.Getenv("NUON_SYNC_TEST_JOB") == "1" {
		os.Exit(jobProcess())
	}
	os.Exit(m.Run())
}

func jobProcess() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	host := os.Getenv("NUON_TEST_INSTALL_REGISTRY")
	c, err := oci.NewClient(oci.WithKeychain(nil), oci.WithCAFile(os.Getenv("NUON_TEST_INSTALL_CA")),
		oci.WithAuth(host, &authn.Basic{Username: os.Getenv("NUON_TEST_INSTALL_USER"), Password: os.Getenv("NUON_TEST_INSTALL_PASSWORD")}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	plugins := map[string]reconciler.Plugin{schemas.TypeTerraform: &terraform.Plugin{}}
	if err := jobrun.Main(ctx, os.Args[len(os.Args)-1], plugins, &oci.Source{Client: c}, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// pipeline is vendor CI, the tenant and one install (acme), on loopback.
type pipeline struct {
	t      *testing.T
	w      *world
	vendor *proxy
	git    *gittest.Server
	url    string
	main   string // a working copy of main's files
	render *gitsig.Signer
	trust  *gitsig.AllowedSigners
	agent  *agent.Agent
}

func newPipeline(t *testing.T) *pipeline {
	t.Helper()
	cfg := testenv.TerraformConfig(t)
	p := &pipeline{t: t, w: newWorld(t), git: gittest.NewServer(t), main: t.TempDir()}
	p.vendor = newProxy(t, p.w.vendor.Host)
	p.w.vendorHost = p.vendor.host
	p.w.setApp(t)

	// main: the sample app, its repositories in the vendor registry, one
	// install whose registry is the install registry; no release yet.
	bare := p.git.InitBare(t, "tenant.git")
	p.url = p.git.URL("tenant.git")
	app, _ := os.ReadFile(fixtureApp)
	p.write("nuon.yaml", strings.ReplaceAll(string(app), "registry.vendor.example", p.vendor.host))
	for _, f := range []string{"channels/stable.yaml", "channels/beta.yaml"} {
		b, _ := os.ReadFile(filepath.Join(fixtures, "tenant", f))
		p.write(f, string(b))
	}
	acme, _ := os.ReadFile(filepath.Join(fixtures, "tenant", "installs", "acme.yaml"))
	p.write("installs/acme.yaml", regexp.MustCompile(`(?m)^registry: .*$`).ReplaceAllString(string(acme), "registry: "+p.w.install.Host+"/nuon-acme"))
	gittest.CommitDir(t, bare, "main", p.main, "shop, before its first release")

	var err error
	if p.render, err = gitsig.LoadSigner(filepath.Join(fixtures, "keys", "render")); err != nil {
		t.Fatal(err)
	}
	if p.trust, err = gitsig.ParseAllowedSigners([]byte("renderer " + p.render.AuthorizedKey() + "\n")); err != nil {
		t.Fatal(err)
	}
	agentKey, err := gitsig.LoadSigner(filepath.Join(fixtures, "keys", "acme"))
	if err != nil {
		t.Fatal(err)
	}
	workdir := t.TempDir()
	p.agent, err = agent.New(agent.Config{
		Install: "acme",
		Remote:  agent.NewRemote(p.url, nil),
		Trust:   p.trust,
		Key:     agentKey,
		Workdir: workdir,
		Runner: &jobs.Local{
			Command: []string{os.Args[0], "-test.run=^$"},
			Env: []string{
				"NUON_SYNC_TEST_JOB=1", "GORACE=atexit_sleep_ms=0",
				"TF_CLI_CONFIG_FILE=" + cfg, "CHECKPOINT_DISABLE=1",
				"NUON_SECRET_LICENSE_KEY=e2e-license",
				"NUON_TEST_INSTALL_REGISTRY=" + p.w.install.Host,
				"NUON_TEST_INSTALL_CA=" + p.w.install.CAFile,
				"NUON_TEST_INSTALL_USER=" + p.w.install.Username,
				"NUON_TEST_INSTALL_PASSWORD=" + p.w.install.Password,
			},
			KillGrace: 2 * time.Second,
		},
		Plugins:  []string{schemas.TypeTerraform},
		Sync:     p.w.syncer(t),
		Interval: time.Millisecond,
		Logger:   testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pipeline) write(name, content string) {
	p.t.Helper()
	f := filepath.Join(p.main, name)
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

func (p *pipeline) repo() *gitrepo.Repo {
	p.t.Helper()
	r, err := gitrepo.Open(p.url, gitrepo.WithCacheDir(p.t.TempDir()))
	if err != nil {
		p.t.Fatal(err)
	}
	return r
}

// release builds components from their sources (by fixtures' layout
// under root, or sources[name]), signs them with k and releases each at
// the version given, as `nuon build` and `nuon release` do in vendor CI.
func (p *pipeline) release(k signature.SignerVerifier, root string, sources map[string]string, versions map[string]string) {
	p.t.Helper()
	var names []string
	for n := range versions {
		names = append(names, n)
	}
	targets, err := builder.Targets(p.w.app, root, sources, names)
	if err != nil {
		p.t.Fatal(err)
	}
	arts, err := builder.Build(context.Background(), targets, builder.Options{Client: p.w.client, Signer: k})
	if err != nil {
		p.t.Fatal(err)
	}
	var records []builder.Record
	for _, a := range arts {
		records = append(records, builder.Record{Component: a.Component, Version: versions[a.Component],
			Artifacts: map[string]schemas.ReleaseArtifact{a.Name: {Repository: a.Repository, Digest: a.Digest, MediaType: a.MediaType}}})
	}
	_, err = builder.Release(context.Background(), p.repo(), records, builder.ReleaseOptions{
		Name: "Vendor CI", Email: "ci@vendor.example", Now: time.Now,
	})
	if err != nil {
		p.t.Fatal(err)
	}
}

// pin sets a component's version on the stable channel, as a promotion
// pull request does, and renders main.
func (p *pipeline) pin(component, version string) {
	p.t.Helper()
	dir := p.t.TempDir()
	gittest.Git(p.t, "", "clone", "--quiet", p.url, dir)
	f := filepath.Join(dir, "channels", "stable.yaml")
	b, err := os.ReadFile(f)
	if err != nil {
		p.t.Fatal(err)
	}
	b = regexp.MustCompile(`(?m)^  `+component+`: .*$`).ReplaceAll(b, []byte("  "+component+": "+version))
	if err := os.WriteFile(f, b, 0o644); err != nil {
		p.t.Fatal(err)
	}
	gittest.Git(p.t, dir, "commit", "--quiet", "-am", "stable: "+component+" "+version)
	gittest.Git(p.t, dir, "push", "--quiet", "origin", "HEAD:main")
	p.renderMain()
}

// renderMain renders main, as `nuon render` does.
func (p *pipeline) renderMain() {
	p.t.Helper()
	ctx := context.Background()
	repo := p.repo()
	if err := repo.Fetch(ctx, "refs/heads/"); err != nil {
		p.t.Fatal(err)
	}
	source, err := repo.Resolve("main")
	if err != nil {
		p.t.Fatal(err)
	}
	prev := renderer.Previous{Installs: map[string]plumbing.Hash{}}
	prev.Rendered, _ = repo.Ref(plumbing.ReferenceName(schemas.RenderedRef))
	refs, _ := repo.Refs(schemas.InstallRefPrefix)
	for n, h := range refs {
		prev.Installs[strings.TrimPrefix(n.String(), schemas.InstallRefPrefix)] = h
	}
	res, err := renderer.Render(ctx, repo.Storer(), source, prev, renderer.Options{Signer: p.render, Now: time.Now})
	if err != nil {
		p.t.Fatal(err)
	}
	if err := res.Objects.Flush(repo.Storer()); err != nil {
		p.t.Fatal(err)
	}
	var ups []gitrepo.Update
	for _, u := range res.Updates {
		ups = append(ups, gitrepo.Update{Name: u.Name, Old: u.Old, New: u.New})
	}
	if err := repo.Apply(ctx, ups); err != nil {
		p.t.Fatal(err)
	}
}

func (p *pipeline) reconcile() *agent.Report {
	p.t.Helper()
	rep, err := p.agent.Reconcile(context.Background())
	if err != nil {
		p.t.Fatal(err)
	}
	return rep
}

// TestEndToEnd is the whole path of an artifact: vendor CI builds, signs
// and releases; the tenant renders; the install's agent verifies and
// copies the artifacts into the install registry and its terraform jobs
// read their modules from there. Then the vendor registry goes down
// during a promotion (no job starts, the install keeps running), comes
// back (the update applies), and an artifact signed by another key is
// refused.
func TestEndToEnd(t *testing.T) {
	p := newPipeline(t)
	vendor := key(t, vendorKey)
	p.release(vendor, filepath.Join(fixtures, "previous"), nil, map[string]string{"database": "1.0.0", "api": "2.3.0", "api-image": "2.3.0", "dashboards": "1.1.0"})
	p.release(vendor, fixtures, nil, map[string]string{"network": "1.0.0", "database": "1.1.0", "api": "2.4.0", "api-image": "2.4.0", "dashboards": "1.2.0"})
	p.renderMain()

	rep := p.reconcile()
	st := rep.Status.Components
	for name, want := range map[string]string{
		"network": schemas.PhaseApplied, "database": schemas.PhaseApplied, "api-image": schemas.PhaseApplied,
		"api": schemas.PhaseNotReady, "dashboards": schemas.PhaseBlocked, // dashboards waits for api
	} {
		if st[name].Phase != want {
			t.Errorf("%s: %s (%s), want %s", name, st[name].Phase, st[name].Error, want)
		}
	}
	if len(rep.Jobs) != 2 {
		t.Fatalf("%d jobs, want network's and database's", len(rep.Jobs))
	}
	for _, j := range rep.Jobs {
		for _, a := range j.Artifacts {
			if a.Source != "" || !strings.HasPrefix(a.Local, p.w.install.Host+"/nuon-acme/") {
				t.Errorf("job %s artifact %+v: jobs deploy from the install registry only", j.ID, a)
			}
			if !p.w.present(t, a.Local) {
				t.Errorf("%s is not in the install registry", a.Local)
			}
		}
	}
	if vpc, _ := st["network"].Outputs["vpc_id"].(string); !strings.HasPrefix(vpc, "vpc-") {
		t.Errorf("network outputs %v", st["network"].Outputs)
	}
	// database 1.0.0's module (from fixtures/previous) has a fixed port.
	if ep, _ := st["database"].Outputs["endpoint"].(string); !strings.HasSuffix(ep, ":5432") || st["database"].Version != "1.0.0" {
		t.Errorf("database %s outputs %v", st["database"].Version, st["database"].Outputs)
	}

	// The vendor registry goes down in the middle of a promotion's sync,
	// after the manifest was read, at the first blob.
	p.pin("database", "1.1.0")
	p.vendor.failAfter.Store(1)
	rep = p.reconcile()
	db := rep.Status.Components["database"]
	if db.Phase != schemas.PhaseFailed || !strings.Contains(db.Error, "sync artifacts") || len(rep.Jobs) != 0 {
		t.Fatalf("with the vendor registry down: database %s (%s), %d jobs", db.Phase, db.Error, len(rep.Jobs))
	}
	if got := rep.Status.Components["network"].Phase; got != schemas.PhaseApplied {
		t.Errorf("network %s while the vendor registry was down", got)
	}
	if !p.vendor.down.Load() {
		t.Error("the sync never reached a blob")
	}
	p.vendor.failAfter.Store(0)
	p.vendor.down.Store(false)
	time.Sleep(10 * time.Millisecond)
	rep = p.reconcile()
	db = rep.Status.Components["database"]
	if db.Phase != schemas.PhaseApplied || db.Version != "1.1.0" || len(rep.Jobs) != 1 {
		t.Fatalf("after the registry came back: database %s %s (%s), %d jobs", db.Phase, db.Version, db.Error, len(rep.Jobs))
	}

	// A release signed by a key the install does not trust is refused.
	mod := t.TempDir()
	if err := os.CopyFS(mod, os.DirFS(filepath.Join(fixtures, "modules", "database"))); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(mod, "extra.tf"), []byte("# not from the vendor's CI\n"), 0o644)
	p.release(key(t, otherKey), "", map[string]string{"database": mod}, map[string]string{"database": "1.2.0"})
	p.pin("database", "1.2.0")
	rep = p.reconcile()
	db = rep.Status.Components["database"]
	if db.Phase != schemas.PhaseFailed || !strings.Contains(db.Error, "refused") || len(rep.Jobs) != 0 {
		t.Fatalf("an artifact signed by another key: database %s (%s), %d jobs", db.Phase, db.Error, len(rep.Jobs))
	}
	t.Logf("database: %s", db.Error)
}

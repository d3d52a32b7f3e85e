package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/builder/buildreq"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/oci/ocitest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// buildAgentWorld is a tenant whose main trusts fixtures/keys/ci for
// builds, a source repository holding the fixtures' component sources,
// a real registry and a build agent running the real nuon binary.
type buildAgentWorld struct {
	tenant, source, commit string
	agent                  *builder.Agent
	ci                     *signature.Signer
	now                    time.Time
}

func newBuildAgentWorld(t testing.TB) *buildAgentWorld {
	t.Helper()
	root := repoRoot()
	vendor := ocitest.Start(t, ocitest.Options{})
	dir := t.TempDir()

	main := filepath.Join(dir, "main")
	if err := os.CopyFS(main, os.DirFS(filepath.Join(root, "fixtures", "tenant"))); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(main, "releases"))
	app, _ := os.ReadFile(filepath.Join(main, "nuon.yaml"))
	os.WriteFile(filepath.Join(main, "nuon.yaml"), []byte(strings.ReplaceAll(string(app), "registry.vendor.example", vendor.Host)), 0o644)
	trust, _ := os.ReadFile(filepath.Join(root, "fixtures", "keys", "builds.allowed"))
	os.WriteFile(filepath.Join(main, "trust", "builds"), trust, 0o644)
	agents, _ := os.ReadFile(filepath.Join(root, "fixtures", "keys", "build-agents.allowed"))
	os.WriteFile(filepath.Join(main, "trust", "build-agents"), agents, 0o644)
	source := filepath.Join(dir, "shop.git")
	var sources strings.Builder
	sources.WriteString("components:\n")
	for _, c := range []string{"network", "database", "api", "api-image", "dashboards"} {
		fmt.Fprintf(&sources, "  %s:\n    - repository: %s\n      refs: [refs/heads/main]\n", c, source)
	}
	os.WriteFile(filepath.Join(main, schemas.BuildSourcesFile), []byte(sources.String()), 0o644)
	tenant := filepath.Join(dir, "tenant.git")
	gittest.InitBare(t, tenant)
	gittest.CommitDir(t, tenant, "main", main, "shop")

	src := filepath.Join(dir, "src")
	for _, d := range []string{"modules", "charts", "manifests", "images"} {
		if err := os.CopyFS(filepath.Join(src, d), os.DirFS(filepath.Join(root, "fixtures", d))); err != nil {
			t.Fatal(err)
		}
	}
	gittest.InitBare(t, source)
	gittest.CommitDir(t, source, "main", src, "shop sources")
	commit := gittest.Git(t, source, "rev-parse", "main")

	repo, err := gitrepo.Open(tenant)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := signature.LoadSigner(filepath.Join(root, "fixtures", "keys", "ci"))
	if err != nil {
		t.Fatal(err)
	}
	// Release commits are signed by the build agent's key, as nuon
	// build-agent signs them: a request's release on main counts only so.
	agentKey, err := signature.LoadSigner(filepath.Join(root, "fixtures", "keys", "build-agent"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	return &buildAgentWorld{
		tenant: tenant, source: source, commit: commit, ci: ci, now: now,
		agent: &builder.Agent{
			Tenant:  repo,
			Exe:     nuonBinary(t),
			WorkDir: t.TempDir(),
			Key:     filepath.Join(root, "fixtures", "keys", "cosign.key"),
			Env:     []string{"COSIGN_PASSWORD="},
			Release: builder.ReleaseOptions{Name: "nuon build-agent", Email: "builds@vendor.example", Now: time.Now, Signer: agentKey},
		},
	}
}

func (w *buildAgentWorld) request(t testing.TB, id, component, commit string) schemas.SignedBuildRequest {
	return w.requestVersion(t, id, component, commit, "3.0.0")
}

func (w *buildAgentWorld) requestVersion(t testing.TB, id, component, commit, version string) schemas.SignedBuildRequest {
	t.Helper()
	sub, err := buildreq.SignRequest(schemas.BuildRequest{
		ID: id, Component: component, Repository: w.source, Commit: commit, Ref: "refs/heads/main", Version: version,
		Requester: "vendor-ci", Created: w.now, Expires: w.now.Add(time.Hour),
	}, w.ci)
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// TestBuildAgent builds a request into a release commit on main with the
// real nuon binary as the child and a real registry.
func TestBuildAgent(t *testing.T) {
	w := newBuildAgentWorld(t)
	// The agent holds the builder key too: every artifact gets provenance.
	w.agent.BuilderKey, w.agent.BuilderID = w.agent.Key, "https://builds.vendor.example/agent-1"
	before := gittest.Git(t, w.tenant, "rev-parse", "main")
	start := time.Now()
	res, err := w.agent.Build(context.Background(), w.request(t, "b-network-1", "network", w.commit))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("build request → release commit: %s", time.Since(start))
	if res.Release.Commit == "" || res.Release.Commit == before {
		t.Fatalf("no release commit: %+v", res.Release)
	}
	if got := gittest.Git(t, w.tenant, "rev-parse", "main"); got != res.Release.Commit {
		t.Errorf("main is %s, the release said %s", got, res.Release.Commit)
	}
	rel := gittest.Git(t, w.tenant, "show", "main:releases/network.yaml")
	if !strings.Contains(rel, "3.0.0") || !strings.Contains(rel, res.Artifacts[0].Digest) {
		t.Errorf("releases/network.yaml does not record 3.0.0 at %s:\n%s", res.Artifacts[0].Digest, rel)
	}
	repo, err := name.NewRepository(res.Artifacts[0].Repository, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	tags, err := remote.List(repo)
	if err != nil {
		t.Fatal(err)
	}
	att := strings.Replace(res.Artifacts[0].Digest, ":", "-", 1) + ".att"
	if !slices.Contains(tags, att) || !slices.Contains(tags, strings.TrimSuffix(att, ".att")+".sig") {
		t.Errorf("%s has tags %v, want the signature and the provenance %s", repo, tags, att)
	}
	// The build's directory is gone; only the ledger is left.
	entries, _ := os.ReadDir(w.agent.WorkDir)
	if len(entries) != 1 || entries[0].Name() != "taken" {
		t.Errorf("work dir after the build holds %v, want the ledger alone", entries)
	}
}

// TestBuildAgentRefuses: each bad request is refused with a clear message
// and builds nothing: main does not move, nothing is pushed.
func TestBuildAgentRefuses(t *testing.T) {
	w := newBuildAgentWorld(t)
	ctx := context.Background()
	first, err := w.agent.Build(ctx, w.request(t, "taken-once", "network", w.commit))
	if err != nil {
		t.Fatal(err)
	}
	root := repoRoot()
	elsewhere, err := buildreq.SignRequest(schemas.BuildRequest{
		ID: "elsewhere", Component: "network", Repository: w.tenant, Commit: w.commit, Version: "3.0.4",
		Requester: "vendor-ci", Created: w.now, Expires: w.now.Add(time.Hour)}, w.ci)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := signature.LoadSigner(filepath.Join(root, "fixtures", "keys", "operator"))
	if err != nil {
		t.Fatal(err)
	}
	strangerSub, err := buildreq.SignRequest(schemas.BuildRequest{
		ID: "stranger", Component: "network", Repository: w.source, Commit: w.commit, Version: "3.0.1",
		Requester: "vendor-ci", Created: w.now, Expires: w.now.Add(time.Hour)}, stranger)
	if err != nil {
		t.Fatal(err)
	}
	tampered := w.request(t, "tampered", "network", w.commit)
	tampered.Request = []byte(strings.Replace(string(tampered.Request), `"3.0.0"`, `"9.9.9"`, 1))
	impostor, err := buildreq.SignRequest(schemas.BuildRequest{
		ID: "impostor", Component: "network", Repository: w.source, Commit: w.commit, Version: "3.0.2",
		Requester: "someone-else", Created: w.now, Expires: w.now.Add(time.Hour)}, w.ci)
	if err != nil {
		t.Fatal(err)
	}
	expired, err := buildreq.SignRequest(schemas.BuildRequest{
		ID: "expired", Component: "network", Repository: w.source, Commit: w.commit, Version: "3.0.3",
		Requester: "vendor-ci", Created: w.now.Add(-2 * time.Hour), Expires: w.now.Add(-time.Hour)}, w.ci)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		sub  schemas.SignedBuildRequest
		want string
	}{
		{"unknown component", w.request(t, "unknown", "payments", w.commit), `no component "payments"`},
		{"missing commit", w.request(t, "missing", "network", strings.Repeat("ab", 20)), "does not exist in"},
		{"untrusted key", strangerSub, "not trusted"},
		{"tampered", tampered, "does not match"},
		{"requester is not the signer", impostor, `names requester "someone-else"`},
		{"expired", expired, "expired"},
		{"source repository not allowed", elsewhere, "may not be built from " + w.tenant},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := gittest.Git(t, w.tenant, "rev-parse", "main")
			_, err := w.agent.Build(ctx, tc.sub)
			if !errors.Is(err, builder.ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a refusal saying %q", err, tc.want)
			}
			if after := gittest.Git(t, w.tenant, "rev-parse", "main"); after != before {
				t.Errorf("main moved from %s to %s on a refused request", before, after)
			}
		})
	}
	if _, err := w.agent.Build(ctx, w.request(t, "missing", "network", w.commit)); !errors.Is(err, builder.ErrReplayed) {
		t.Errorf("a request id refused for its commit was taken again: %v", err)
	}
	// A replay of a released request is answered with its release: main
	// does not move, nothing is built.
	before := gittest.Git(t, w.tenant, "rev-parse", "main")
	again, err := w.agent.Build(ctx, w.request(t, "taken-once", "network", w.commit))
	if err != nil || !again.Release.Found || again.Release.Commit != first.Release.Commit || len(again.Artifacts) != 0 {
		t.Errorf("a replayed released request: %+v %v", again, err)
	}
	if after := gittest.Git(t, w.tenant, "rev-parse", "main"); after != before {
		t.Errorf("main moved on a replay of a released request")
	}
}

// TestBuildAgentParallel builds every component of the sample app at once
// against one agent: each in its own process and directory, all released.
func TestBuildAgentParallel(t *testing.T) {
	w := newBuildAgentWorld(t)
	comps := []string{"network", "database", "api", "api-image", "dashboards"}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(comps))
	for i, c := range comps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = w.agent.Build(context.Background(), w.request(t, "par-"+c, c, w.commit))
		}()
	}
	wg.Wait()
	t.Logf("parallel builds of %d components → releases: %s", len(comps), time.Since(start))
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s: %v", comps[i], err)
		}
	}
	for _, c := range comps {
		if rel := gittest.Git(t, w.tenant, "show", "main:releases/"+c+".yaml"); !strings.Contains(rel, "3.0.0") {
			t.Errorf("releases/%s.yaml lacks 3.0.0:\n%s", c, rel)
		}
	}
}

// TestBuildRemote runs it all as processes: nuon server in front of the
// tenant, nuon build-agent polling it, and vendor CI filing requests with
// nuon build --remote and waiting for the answer.
func TestBuildRemote(t *testing.T) {
	w := newBuildAgentWorld(t)
	keys := filepath.Join(repoRoot(), "fixtures", "keys")
	env := append(e2eEnv(t), "COSIGN_PASSWORD=")
	srv := startServer(t, w.agent.Exe, env, "--repo", w.tenant, "--render-key", filepath.Join(keys, "render"), "--poll-interval", "200ms")
	srv.waitReady(t, 30*time.Second)
	_, agentLog := startProcess(t, env, w.agent.Exe, "build-agent", "--server", srv.url, "--key", filepath.Join(keys, "build-agent"),
		"--repo", w.tenant, "--cosign-key", filepath.Join(keys, "cosign.key"), "--work-dir", t.TempDir(), "--parallel", "5")
	remote := func(code int, key string, extra ...string) string {
		t.Helper()
		return nuon(t, env, code, append([]string{"build", "--remote", "--server", srv.url, "--key", filepath.Join(keys, key),
			"--source-repository", w.source, "--ref", "refs/heads/main", "--requester", "vendor-ci", "--version", "4.0.0"}, extra...)...)
	}
	start := time.Now()
	out := remote(0, "ci", "network", "--commit", w.commit, "--request-id", "net-1", "-o", "json")
	t.Logf("nuon build --remote → release commit: %s", time.Since(start))
	var st schemas.BuildStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.State != schemas.BuildSucceeded || st.Agent != "build-agent-1" {
		t.Fatalf("answer %s: %v\n%s", out, err, agentLog.String())
	}
	var res builder.BuildResult
	if err := json.Unmarshal(st.Result, &res); err != nil || res.Release == nil || res.Release.Commit == "" {
		t.Fatalf("result %s: %v", st.Result, err)
	}
	if main := gittest.Git(t, w.tenant, "rev-parse", "main"); main != res.Release.Commit {
		t.Errorf("main is %s, the answer says %s", main, res.Release.Commit)
	}

	// Every component at once.
	comps := []string{"database", "api", "api-image", "dashboards"}
	start = time.Now()
	var wg sync.WaitGroup
	for _, c := range comps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			remote(0, "ci", c, "--commit", w.commit, "--request-id", "par-"+c)
		}()
	}
	wg.Wait()
	t.Logf("nuon build --remote of %d components at once → releases: %s", len(comps), time.Since(start))
	for _, c := range comps {
		if rel := gittest.Git(t, w.tenant, "show", "main:releases/"+c+".yaml"); !strings.Contains(rel, "4.0.0") {
			t.Errorf("releases/%s.yaml lacks 4.0.0:\n%s", c, rel)
		}
	}

	// Bad input: refused with a clear message, main unchanged.
	before := gittest.Git(t, w.tenant, "rev-parse", "main")
	for _, tc := range []struct {
		name, key string
		args      []string
		want      string
	}{
		{"unknown component", "ci", []string{"payments", "--commit", w.commit}, `no component "payments"`},
		{"missing commit", "ci", []string{"network", "--commit", strings.Repeat("cd", 20), "--version", "4.0.1"}, "does not exist in"},
		{"untrusted key", "operator", []string{"network", "--commit", w.commit}, "not trusted for builds"},
		{"build agent's key files nothing", "build-agent", []string{"network", "--commit", w.commit}, "trust/builds on main does not list it"},
		{"replayed", "ci", []string{"network", "--commit", w.commit, "--request-id", "net-1"}, "replay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(w.agent.Exe, append([]string{"build", "--remote", "--server", srv.url, "--key", filepath.Join(keys, tc.key),
				"--source-repository", w.source, "--ref", "refs/heads/main", "--requester", "vendor-ci", "--version", "4.0.0"}, tc.args...)...)
			cmd.Env = append(os.Environ(), env...)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("got %v:\n%s\nwant a refusal saying %q", err, out, tc.want)
			}
		})
	}
	if after := gittest.Git(t, w.tenant, "rev-parse", "main"); after != before {
		t.Errorf("main moved from %s to %s on refused requests", before, after)
	}
}

// BenchmarkBuildAgent measures a build request to its release commit on
// main, with the real nuon binary as the build's process and a real
// registry: one component, and every component of the sample app at once.
// Each iteration releases a new version; after the first, the registry
// holds the artifacts already (a rebuild of unchanged sources pushes
// nothing), so -benchtime=1x gives the cold figure.
func BenchmarkBuildAgent(b *testing.B) {
	w := newBuildAgentWorld(b)
	ctx := context.Background()
	n := 0
	b.Run("one", func(b *testing.B) {
		for b.Loop() {
			n++
			if _, err := w.agent.Build(ctx, w.requestVersion(b, fmt.Sprintf("one-%d", n), "network", w.commit, fmt.Sprintf("5.0.%d", n))); err != nil {
				b.Fatal(err)
			}
		}
	})
	comps := []string{"network", "database", "api", "api-image", "dashboards"}
	b.Run("all-parallel", func(b *testing.B) {
		for b.Loop() {
			n++
			var wg sync.WaitGroup
			errs := make([]error, len(comps))
			for i, c := range comps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = w.agent.Build(ctx, w.requestVersion(b, fmt.Sprintf("all-%d-%s", n, c), c, w.commit, fmt.Sprintf("6.0.%d", n)))
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				b.Fatal(err)
			}
		}
	})
}

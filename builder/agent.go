package builder

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/builder/buildreq"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
	"nuon.dev/nuon/trust/maingit"
)

// ErrRefused marks a build request the agent will not build (see
// buildreq.ErrRefused); ErrReplayed one whose ID was taken before.
var (
	ErrRefused  = buildreq.ErrRefused
	ErrReplayed = buildreq.ErrReplayed
)

// Agent is the build agent: it takes signed build requests, builds each
// in a process of its own (nuon build, with a clean environment and a
// work directory of its own), and records the release on main. It alone
// holds the registry credential and the signing keys: they reach the
// child through Env and the key files, never through the request.
type Agent struct {
	// Tenant is the tenant repository: main holds nuon.yaml, the keys
	// trusted for builds (schemas.BuildTrustFile) and the releases.
	Tenant *gitrepo.Repo
	// Exe is the nuon binary run as 'nuon build' for each request.
	Exe string
	// WorkDir holds one directory per build (removed after it) and the
	// ledger of request IDs taken.
	WorkDir string
	// Key is the vendor's cosign key file; BuilderKey (optional) the
	// builder's, for SLSA provenance with BuilderID.
	Key, BuilderKey, BuilderID string
	// Env is the whole environment of a build besides PATH and HOME:
	// COSIGN_PASSWORD, NUON_REGISTRY_PASSWORD, DOCKER_CONFIG and the like.
	// Nothing else of the agent's environment reaches a build.
	Env []string
	// BuildArgs are extra flags for nuon build (--registry-username …).
	BuildArgs []string
	// Release signs and authors the release commit.
	Release ReleaseOptions
	// Lease is how long a request taken from the server stays this
	// agent's without a renewal (Serve renews it every third of it);
	// default schemas.DefaultBuildLease.
	Lease time.Duration
	// Timeout bounds one build's process. Default: 30 minutes.
	Timeout time.Duration
	// Now is the clock requests are judged by. Default: time.Now.
	Now func() time.Time
	// Logger defaults to discarding.
	Logger *slog.Logger

	// tenantMu keeps builds running in parallel from using Tenant at
	// once: its object store is not safe for concurrent use, and their
	// releases are commits on the one main anyway.
	tenantMu sync.Mutex
}

// BuildResult is the answer to one build request.
type BuildResult struct {
	ID        string         `json:"id"`
	Component string         `json:"component"`
	Version   string         `json:"version"`
	Commit    string         `json:"commit"`
	Artifacts []Artifact     `json:"artifacts"`
	Release   *ReleaseResult `json:"release"`
	// Seconds is the time from taking the request to the release commit.
	Seconds float64 `json:"seconds"`
}

// Build judges one signed request against main and, when it passes,
// builds, pushes, signs and releases it. A refusal wraps ErrRefused and
// builds nothing. Build is safe to call from several goroutines: each
// build has its own directory and process.
func (a *Agent) Build(ctx context.Context, sub schemas.SignedBuildRequest) (*BuildResult, error) {
	return a.BuildPhases(ctx, sub, nil)
}

// Phases of a build, as BuildPhases reports them.
const (
	PhaseCheckout = "checkout"
	PhaseBuild    = "build"
	PhaseRelease  = "release"
)

// BuildPhases is Build, calling phase (when not nil) as each phase
// starts. The release on main is the request's idempotency key: a
// request released already, by this agent or another (an earlier attempt
// whose agent died before answering), is answered with that release
// commit and nothing is built or written.
func (a *Agent) BuildPhases(ctx context.Context, sub schemas.SignedBuildRequest, phase func(string)) (*BuildResult, error) {
	start := time.Now()
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	if phase == nil {
		phase = func(string) {}
	}
	log := a.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir, err := os.MkdirTemp(a.WorkDir, "build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	a.tenantMu.Lock()
	m, err := a.readMain(ctx, dir, now())
	a.tenantMu.Unlock()
	if err != nil {
		return nil, err
	}
	req, err := buildreq.VerifyRequest(sub, m.trusted, now())
	if err != nil {
		return nil, err
	}
	log = log.With("component", req.Component, "commit", req.Commit, "request", req.ID)
	if !knownComponent(m.app, req.Component) {
		return nil, fmt.Errorf("%w: build request %s: no component %q in %s on main", ErrRefused, req.ID, req.Component, schemas.AppFile)
	}
	if err := buildreq.CheckSource(m.sources, req); err != nil {
		return nil, err
	}
	ledger := buildreq.Ledger{Dir: filepath.Join(a.WorkDir, "taken")}
	resumed, err := ledger.Take(req.ID)
	if err != nil {
		return nil, err
	}
	if resumed {
		log.Info("taking up a request an earlier attempt of this agent did not finish")
	}
	res, err := a.build(ctx, req, m, dir, phase, log)
	if err != nil && ctx.Err() == nil {
		// Spent: a replay of a failed request is refused. A build cut
		// short (lease lost, agent stopping) may be taken again.
		if ferr := ledger.Fail(req.ID); ferr != nil {
			log.Error("ledger", "error", ferr)
		}
	}
	if res != nil {
		res.Seconds = time.Since(start).Seconds()
	}
	return res, err
}

func (a *Agent) build(ctx context.Context, req *schemas.BuildRequest, m *mainView, dir string, phase func(string), log *slog.Logger) (*BuildResult, error) {
	since := req.Created.Add(-time.Hour)
	a.tenantMu.Lock()
	found, err := FindRelease(a.Tenant.Storer(), m.head, req.ID, since, m.agents)
	a.tenantMu.Unlock()
	if err != nil {
		return nil, err
	}
	if !found.IsZero() {
		log.Info("released before", "main", found)
		return &BuildResult{ID: req.ID, Component: req.Component, Version: req.Version, Commit: req.Commit,
			Artifacts: []Artifact{}, Release: &ReleaseResult{Commit: found.String(), Found: true, Added: []string{}, Unchanged: []string{}}}, nil
	}
	phase(PhaseCheckout)
	src := filepath.Join(dir, "src")
	if err := checkout(ctx, req.Repository, req.Commit, req.Ref, src); err != nil {
		return nil, err
	}
	phase(PhaseBuild)
	log.Info("building")
	arts, err := a.runBuild(ctx, req, filepath.Join(dir, schemas.AppFile), src)
	if err != nil {
		return nil, err
	}
	rec := Record{Component: req.Component, Version: req.Version, Artifacts: map[string]schemas.ReleaseArtifact{}}
	for _, art := range arts {
		rec.Artifacts[art.Name] = schemas.ReleaseArtifact{Repository: art.Repository, Digest: art.Digest, MediaType: art.MediaType}
	}
	phase(PhaseRelease)
	o := a.Release
	o.Request, o.Since, o.RequestSigners = req.ID, since, m.agents
	a.tenantMu.Lock()
	rel, err := Release(ctx, a.Tenant, []Record{rec}, o)
	a.tenantMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("build request %s: release: %w", req.ID, err)
	}
	log.Info("released", "main", rel.Commit, "found", rel.Found)
	return &BuildResult{ID: req.ID, Component: req.Component, Version: req.Version, Commit: req.Commit,
		Artifacts: arts, Release: rel}, nil
}

// mainView is what a build reads of main.
type mainView struct {
	head plumbing.Hash
	app  schemas.App
	// trusted are the keys that may file requests (nil: none), agents
	// the build agents' keys, which sign release commits (nil: any
	// signature, or none, is taken), sources the allowed sources (nil:
	// none).
	trusted, agents *signature.AllowedSigners
	sources         *schemas.BuildSources
}

// readMain fetches main and reads its app (also written to dir/nuon.yaml
// for the child), the keys trusted for builds at now (the trust root's
// build-requesters role, or trust/builds, deprecated), the build agents'
// keys (build-agents, or trust/build-agents) and the allowed sources.
func (a *Agent) readMain(ctx context.Context, dir string, now time.Time) (*mainView, error) {
	if err := a.Tenant.Fetch(ctx, "refs/heads/"); err != nil {
		return nil, err
	}
	head, err := a.Tenant.Ref(MainRef)
	if err != nil {
		return nil, err
	}
	if head.IsZero() {
		return nil, fmt.Errorf("%s has no %s", a.Tenant.Location, MainRef)
	}
	commit, err := gitobj.ReadCommit(a.Tenant.Storer(), head)
	if err != nil {
		return nil, fmt.Errorf("read main: %w", err)
	}
	root, err := gitobj.ReadTree(a.Tenant.Storer(), commit.TreeHash)
	if err != nil {
		return nil, fmt.Errorf("read main: %w", err)
	}
	data, err := readFile(a.Tenant.Storer(), root, schemas.AppFile)
	if err != nil {
		return nil, fmt.Errorf("read main: %w", err)
	}
	appFile := filepath.Join(dir, schemas.AppFile)
	if err := os.WriteFile(appFile, data, 0o644); err != nil {
		return nil, err
	}
	m := &mainView{head: head}
	if m.app, err = LoadApp(appFile); err != nil {
		return nil, fmt.Errorf("main: %w", err)
	}
	for _, k := range []struct {
		role trust.Role
		into **signature.AllowedSigners
	}{{trust.RoleBuildRequesters, &m.trusted}, {trust.RoleBuildAgents, &m.agents}} {
		keys, err := maingit.Keys(a.Tenant.Storer(), head, k.role, now)
		if err != nil {
			return nil, fmt.Errorf("main: %w", err)
		}
		for _, w := range append(slices.Clone(keys.Warnings), keys.Deprecated) {
			if w != "" && a.Logger != nil {
				a.Logger.Warn("keys trusted for builds", "role", string(k.role), "warning", w)
			}
		}
		if keys.Data == nil {
			continue
		}
		if *k.into, err = signature.ParseAllowedSigners(keys.Data); err != nil {
			return nil, fmt.Errorf("main: %s: %w", keys.From, err)
		}
	}
	mg, err := maingit.Open(a.Tenant.Storer(), head)
	if err != nil {
		return nil, err
	}
	if m.sources, err = buildreq.MainSources(mg, now); err != nil {
		return nil, fmt.Errorf("main: %w", err)
	}
	return m, nil
}

func knownComponent(app schemas.App, name string) bool {
	if name == schemas.SandboxComponent {
		return app.Sandbox != nil
	}
	for _, c := range app.Components {
		if c.Name == name {
			return true
		}
	}
	return false
}

// checkout clones repository without a checkout and checks out commit,
// detached, into dir. A commit the repository lacks is a refusal, and so
// is one not reachable from ref when the request names one (the allowed
// sources name refs: a commit of an unreviewed branch claimed to be of
// refs/heads/main is not built).
func checkout(ctx context.Context, repository, commit, ref, dir string) error {
	if out, err := gitCmd(ctx, "", "clone", "--quiet", "--no-checkout", "--", repository, dir); err != nil {
		return fmt.Errorf("clone %s: %v: %s", repository, err, out)
	}
	if _, err := gitCmd(ctx, dir, "cat-file", "-e", commit+"^{commit}"); err != nil {
		return fmt.Errorf("%w: commit %s does not exist in %s", ErrRefused, commit, repository)
	}
	if ref != "" {
		local := ref
		if b, ok := strings.CutPrefix(ref, "refs/heads/"); ok {
			local = "refs/remotes/origin/" + b
		}
		if _, err := gitCmd(ctx, dir, "rev-parse", "--verify", "--quiet", local+"^{commit}"); err != nil {
			return fmt.Errorf("%w: %s has no ref %s", ErrRefused, repository, ref)
		}
		if _, err := gitCmd(ctx, dir, "merge-base", "--is-ancestor", commit, local); err != nil {
			return fmt.Errorf("%w: commit %s is not on %s of %s", ErrRefused, commit, ref, repository)
		}
	}
	if out, err := gitCmd(ctx, dir, "-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", commit); err != nil {
		return fmt.Errorf("check out %s: %v: %s", commit, err, out)
	}
	return nil
}

// gitCmd runs git with no configuration but its own.
func gitCmd(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0"}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// runBuild runs nuon build for the request as a child process in its own
// process group, with the agent's Env alone, and reads its report.
func (a *Agent) runBuild(ctx context.Context, req *schemas.BuildRequest, appFile, src string) ([]Artifact, error) {
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := []string{"build", req.Component, "--app", appFile, "--src", src, "--key", a.Key, "-o", "json"}
	if a.BuilderKey != "" {
		ref := req.Ref
		if ref == "" {
			ref = req.Commit
		}
		args = append(args, "--builder-key", a.BuilderKey, "--builder-id", a.BuilderID,
			"--source-repo", req.Repository, "--source-ref", ref, "--source-commit", req.Commit)
	}
	args = append(args, a.BuildArgs...)
	cmd := exec.CommandContext(ctx, a.Exe, args...)
	cmd.Dir = filepath.Dir(src)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + filepath.Dir(src)}, a.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("build request %s: nuon build: %w", req.ID, ctx.Err())
		}
		return nil, fmt.Errorf("build request %s: nuon build: %v: %s", req.ID, err, tail(stderr.String(), 2000))
	}
	var rep struct {
		Artifacts []Artifact `json:"artifacts"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || len(rep.Artifacts) == 0 {
		return nil, fmt.Errorf("build request %s: nuon build wrote no report: %v", req.ID, err)
	}
	return rep.Artifacts, nil
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

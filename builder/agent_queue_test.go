package builder_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/builder/buildreq"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// agentEnv is a tenant whose main trusts fixtures/keys' CI and build
// agent and allows sources, a source repository with a reviewed main and
// an unreviewed branch, and an agent whose build is a script that leaves
// a mark and fails.
type agentEnv struct {
	tenant, source, mark string
	reviewed, unreviewed string
	agent                *builder.Agent
	ci                   *signature.Signer
}

func newAgentEnv(t *testing.T, sources func(source string) string) *agentEnv {
	t.Helper()
	dir := t.TempDir()
	e := &agentEnv{source: filepath.Join(dir, "shop.git"), tenant: filepath.Join(dir, "tenant.git"), mark: filepath.Join(dir, "built")}
	main := filepath.Join(dir, "main")
	if err := os.CopyFS(main, os.DirFS("../fixtures/tenant")); err != nil {
		t.Fatal(err)
	}
	for file, from := range map[string]string{schemas.BuildTrustFile: "builds.allowed", schemas.BuildAgentTrustFile: "build-agents.allowed"} {
		data, _ := os.ReadFile("../fixtures/keys/" + from)
		os.WriteFile(filepath.Join(main, file), data, 0o644)
	}
	if text := sources(e.source); text != "" {
		os.WriteFile(filepath.Join(main, schemas.BuildSourcesFile), []byte(text), 0o644)
	}
	gittest.InitBare(t, e.tenant)
	gittest.CommitDir(t, e.tenant, "main", main, "shop")

	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "modules", "network"), 0o755)
	os.WriteFile(filepath.Join(src, "modules", "network", "main.tf"), []byte("# reviewed\n"), 0o644)
	gittest.InitBare(t, e.source)
	gittest.CommitDir(t, e.source, "main", src, "reviewed")
	e.reviewed = gittest.Git(t, e.source, "rev-parse", "main")
	os.WriteFile(filepath.Join(src, "modules", "network", "main.tf"), []byte("# unreviewed\n"), 0o644)
	gittest.CommitDir(t, e.source, "unreviewed", src, "unreviewed")
	e.unreviewed = gittest.Git(t, e.source, "rev-parse", "unreviewed")

	exe := filepath.Join(dir, "nuon")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\ntouch "+e.mark+"\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	repo, err := gitrepo.Open(e.tenant)
	if err != nil {
		t.Fatal(err)
	}
	e.agent = &builder.Agent{Tenant: repo, Exe: exe, WorkDir: t.TempDir(), Key: "/keys/cosign.key", Release: releaseOpts()}
	if e.ci, err = signature.LoadSigner("../fixtures/keys/ci"); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *agentEnv) request(t *testing.T, id, repository, commit, ref string) schemas.SignedBuildRequest {
	t.Helper()
	now := time.Now()
	sub, err := buildreq.SignRequest(schemas.BuildRequest{ID: id, Component: "network", Repository: repository, Commit: commit,
		Ref: ref, Version: "1.0.0", Requester: "vendor-ci", Created: now, Expires: now.Add(time.Hour)}, e.ci)
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// TestAgentSources: the agent builds only from a source main allows for
// the component, at an allowed ref that really holds the commit.
func TestAgentSources(t *testing.T) {
	refs := func(source string) string {
		return "components:\n  network:\n    - repository: " + source + "\n      refs: [refs/heads/main, refs/tags/v*]\n"
	}
	for _, tc := range []struct {
		name    string
		sources func(string) string
		repo    func(e *agentEnv) string
		commit  func(e *agentEnv) string
		ref     string
		want    string // "" : passes the checks (the script then fails)
	}{
		{"allowed", refs, nil, nil, "refs/heads/main", ""},
		{"no sources file", func(string) string { return "" }, nil, nil, "refs/heads/main", "main has no trust/build-sources.yaml"},
		{"component not named", func(s string) string { return "components:\n  api:\n    - repository: " + s + "\n" }, nil, nil, "refs/heads/main", `allows no source for component "network"`},
		{"another repository", refs, func(e *agentEnv) string { return e.tenant }, nil, "refs/heads/main", "may not be built from"},
		{"a ref not allowed", refs, nil, nil, "refs/heads/unreviewed", `not at ref "refs/heads/unreviewed"`},
		{"an unreviewed commit claimed to be main's", refs, nil, func(e *agentEnv) string { return e.unreviewed }, "refs/heads/main", "is not on refs/heads/main"},
		{"an allowed ref the repository lacks", refs, nil, nil, "refs/tags/v9", "has no ref refs/tags/v9"},
		{"any ref when none are named", func(s string) string { return "components:\n  network:\n    - repository: " + s + "\n" }, nil, func(e *agentEnv) string { return e.unreviewed }, "", ""},
		{"unknown key in the file", func(s string) string { return "components: {}\nrepos: []\n" }, nil, nil, "refs/heads/main", "field repos not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newAgentEnv(t, tc.sources)
			repo, commit := e.source, e.reviewed
			if tc.repo != nil {
				repo = tc.repo(e)
			}
			if tc.commit != nil {
				commit = tc.commit(e)
			}
			before := gittest.Git(t, e.tenant, "rev-parse", "main")
			_, err := e.agent.Build(context.Background(), e.request(t, "net-1", repo, commit, tc.ref))
			_, built := os.Stat(e.mark)
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "exit status 3") || built != nil {
					t.Fatalf("an allowed source was not built: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a refusal saying %q", err, tc.want)
			}
			if built == nil {
				t.Error("the build ran")
			}
			if after := gittest.Git(t, e.tenant, "rev-parse", "main"); after != before {
				t.Error("main moved")
			}
		})
	}
}

// TestAgentReleasedOnce: the release on main is the request's
// idempotency key. A request whose release is on main, signed by a build
// agent's key, is answered with it and not built; a commit that only
// claims it (the trailer without a build agent's signature) does not
// count; a request taken up again after its agent died builds again.
func TestAgentReleasedOnce(t *testing.T) {
	allowed := func(s string) string { return "components:\n  network:\n    - repository: " + s + "\n" }
	agentKey := filepath.Join(t.TempDir(), "build-agent")
	data, _ := os.ReadFile("../fixtures/keys/build-agent")
	os.WriteFile(agentKey, data, 0o600)
	release := func(e *agentEnv, id string, sign bool) string {
		args := []string{"-c", "gpg.format=ssh", "-c", "user.signingkey=" + agentKey, "-c", "user.name=a", "-c", "user.email=a@a",
			"commit-tree", "main^{tree}", "-p", "main", "-m", "release: network 1.0.0\n\n" + buildreq.TrailerBuildRequest + ": " + id}
		if sign {
			args = append(args, "-S")
		}
		// Committed now: gittest's fixed date is older than the request.
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = e.tenant, append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+os.TempDir())
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("commit-tree: %v", err)
		}
		h := strings.TrimSpace(string(out))
		gittest.Git(t, e.tenant, "update-ref", "refs/heads/main", h)
		return h
	}

	e := newAgentEnv(t, allowed)
	signed := release(e, "net-1", true)
	res, err := e.agent.Build(context.Background(), e.request(t, "net-1", e.source, e.reviewed, ""))
	if err != nil || res.Release == nil || !res.Release.Found || res.Release.Commit != signed {
		t.Fatalf("a request released before: %+v %v", res, err)
	}
	if _, err := os.Stat(e.mark); err == nil {
		t.Error("a request released before was built again")
	}
	// Another id's release is not this one's.
	if _, err := e.agent.Build(context.Background(), e.request(t, "net-2", e.source, e.reviewed, "")); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("net-2 was not built: %v", err)
	}

	e = newAgentEnv(t, allowed)
	release(e, "net-1", false)
	if _, err := e.agent.Build(context.Background(), e.request(t, "net-1", e.source, e.reviewed, "")); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("an unsigned claim of the release kept the request from being built: %v", err)
	}

	// An attempt that never finished (its ledger entry is there, not
	// failed) is taken up again; a failed one is not.
	e = newAgentEnv(t, allowed)
	if _, err := (buildreq.Ledger{Dir: filepath.Join(e.agent.WorkDir, "taken")}).Take("net-3"); err != nil {
		t.Fatal(err)
	}
	_, err = e.agent.Build(context.Background(), e.request(t, "net-3", e.source, e.reviewed, ""))
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("an unfinished attempt was not taken up: %v", err)
	}
	if _, err := e.agent.Build(context.Background(), e.request(t, "net-3", e.source, e.reviewed, "")); !errors.Is(err, buildreq.ErrReplayed) {
		t.Errorf("a failed request was built again: %v", err)
	}
}

// TestReleaseOncePerRequest: two releases for one build request (two
// attempts, the first agent presumed dead) write one commit; the second
// is answered with the first's, even with other digests.
func TestReleaseOncePerRequest(t *testing.T) {
	e := newAgentEnv(t, func(string) string { return "" })
	o := releaseOpts()
	o.Now, o.Request, o.Since = time.Now, "net-9", time.Now().Add(-time.Hour)
	first, err := builder.Release(context.Background(), e.agent.Tenant, []builder.Record{record("network", "9.0.0", "network", 1)}, o)
	if err != nil || first.Commit == "" || first.Found {
		t.Fatalf("first release: %+v %v", first, err)
	}
	if msg := gittest.Git(t, e.tenant, "log", "-1", "--format=%B", "main"); !strings.Contains(msg, buildreq.TrailerBuildRequest+": net-9") {
		t.Errorf("the release commit does not name its request:\n%s", msg)
	}
	second, err := builder.Release(context.Background(), e.agent.Tenant, []builder.Record{record("network", "9.0.1", "network", 2)}, o)
	if err != nil || !second.Found || second.Commit != first.Commit {
		t.Fatalf("second release of the request: %+v %v", second, err)
	}
	if main := gittest.Git(t, e.tenant, "rev-parse", "main"); main != first.Commit {
		t.Errorf("main moved to %s", main)
	}
	o.Request = "net-10"
	if third, err := builder.Release(context.Background(), e.agent.Tenant, []builder.Record{record("network", "9.0.1", "network", 2)}, o); err != nil || third.Found || third.Commit == first.Commit {
		t.Errorf("another request's release: %+v %v", third, err)
	}
}

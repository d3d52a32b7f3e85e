package builder_test

import (
	"context"
	"os"
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

// TestAgentBuildProcess runs a build whose process is a script that
// records what it was given: the environment is PATH, HOME and the
// agent's Env alone, the source is checked out at the commit in a
// directory of its own, removed after; a failed build moves nothing.
func TestAgentBuildProcess(t *testing.T) {
	dir := t.TempDir()
	main := filepath.Join(dir, "main")
	if err := os.CopyFS(main, os.DirFS("../fixtures/tenant")); err != nil {
		t.Fatal(err)
	}
	trust, _ := os.ReadFile("../fixtures/keys/builds.allowed")
	os.WriteFile(filepath.Join(main, schemas.BuildTrustFile), trust, 0o644)
	source := filepath.Join(dir, "shop.git")
	os.WriteFile(filepath.Join(main, schemas.BuildSourcesFile), []byte("components:\n  network:\n    - repository: "+source+"\n      refs: [refs/heads/main]\n"), 0o644)
	tenant := filepath.Join(dir, "tenant.git")
	gittest.InitBare(t, tenant)
	gittest.CommitDir(t, tenant, "main", main, "shop")

	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "modules", "network"), 0o755)
	os.WriteFile(filepath.Join(src, "modules", "network", "main.tf"), []byte("# v1\n"), 0o644)
	gittest.InitBare(t, source)
	gittest.CommitDir(t, source, "main", src, "v1")
	first := gittest.Git(t, source, "rev-parse", "main")
	os.WriteFile(filepath.Join(src, "modules", "network", "main.tf"), []byte("# v2\n"), 0o644)
	gittest.CommitDir(t, source, "main", src, "v2")

	seen := filepath.Join(dir, "seen")
	exe := filepath.Join(dir, "nuon")
	script := "#!/bin/sh\nenv | sort > " + seen + ".env\necho \"$@\" > " + seen + ".args\n" +
		"cat \"$6/modules/network/main.tf\" > " + seen + ".src\nexit 3\n"
	if err := os.WriteFile(exe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NUON_TEST_SECRET", "leak")
	repo, err := gitrepo.Open(tenant)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	a := &builder.Agent{Tenant: repo, Exe: exe, WorkDir: work, Key: "/keys/cosign.key", Env: []string{"COSIGN_PASSWORD=pw"},
		Release: releaseOpts()}
	ci, err := signature.LoadSigner("../fixtures/keys/ci")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sub, err := buildreq.SignRequest(schemas.BuildRequest{ID: "net-1", Component: "network", Repository: source, Commit: first,
		Ref: "refs/heads/main", Version: "1.0.0", Requester: "vendor-ci", Created: now, Expires: now.Add(time.Hour)}, ci)
	if err != nil {
		t.Fatal(err)
	}
	before := gittest.Git(t, tenant, "rev-parse", "main")
	_, err = a.Build(context.Background(), sub)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("a failing build: %v", err)
	}
	if after := gittest.Git(t, tenant, "rev-parse", "main"); after != before {
		t.Errorf("main moved on a failed build")
	}
	env, _ := os.ReadFile(seen + ".env")
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(string(env)), "\n") {
		n, _, _ := strings.Cut(l, "=")
		names = append(names, n)
	}
	// sh adds PWD (and may add OLDPWD, SHLVL, _) of its own.
	for _, n := range names {
		switch n {
		case "PATH", "HOME", "COSIGN_PASSWORD", "PWD", "OLDPWD", "SHLVL", "_":
		default:
			t.Errorf("the build saw %s from the agent's environment", n)
		}
	}
	if !strings.Contains(string(env), "COSIGN_PASSWORD=pw") {
		t.Errorf("the build lacks the agent's Env:\n%s", env)
	}
	args, _ := os.ReadFile(seen + ".args")
	if !strings.HasPrefix(string(args), "build network --app ") || !strings.Contains(string(args), "--key /keys/cosign.key -o json") {
		t.Errorf("the build ran with %s", args)
	}
	if got, _ := os.ReadFile(seen + ".src"); string(got) != "# v1\n" {
		t.Errorf("the build's source is %q, want the requested commit's", got)
	}
	if entries, _ := os.ReadDir(work); len(entries) != 1 {
		t.Errorf("the build's directory was left behind: %v", entries)
	}
	// The id is spent: a request is built at most once, even failed.
	if _, err := a.Build(context.Background(), sub); !strings.Contains(err.Error(), "replay") {
		t.Errorf("a failed request was built again: %v", err)
	}
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/cmd/internal/cli"
	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/oci/ocitest"
	"nuon.dev/nuon/internal/testenv"
)

func TestReleaseRecords(t *testing.T) {
	dir := t.TempDir()
	build := filepath.Join(dir, "build.json")
	data, _ := json.Marshal(buildReport{Artifacts: []builder.Artifact{
		{Component: "network", Name: "module", Repository: "r.example/shop/network", Digest: "sha256:" + strings.Repeat("a", 64), MediaType: "m"},
		{Component: "api", Name: "chart", Repository: "r.example/shop/charts/api", Digest: "sha256:" + strings.Repeat("b", 64)},
	}})
	os.WriteFile(build, data, 0o644)
	g := &cli.Globals{}
	rs, err := releaseRecords(g, &releaseOptions{version: "1.2.3", from: build}, []string{"api"})
	if err != nil || len(rs) != 1 || rs[0].Component != "api" || rs[0].Version != "1.2.3" || rs[0].Artifacts["chart"].Digest != "sha256:"+strings.Repeat("b", 64) {
		t.Errorf("--from with a name: %+v %v", rs, err)
	}
	if rs, err := releaseRecords(g, &releaseOptions{version: "1", from: build}, nil); err != nil || len(rs) != 2 {
		t.Errorf("--from: %+v %v", rs, err)
	}
	if _, err := releaseRecords(g, &releaseOptions{version: "1", from: build}, []string{"dashboards"}); err == nil {
		t.Error("a component missing from the build was released")
	}
	rs, err = releaseRecords(g, &releaseOptions{version: "1", artifacts: []string{"module=r.example/shop/network@sha256:" + strings.Repeat("c", 64)}}, []string{"network"})
	if err != nil || rs[0].Artifacts["module"].Repository != "r.example/shop/network" {
		t.Errorf("--artifact: %+v %v", rs, err)
	}
	for _, bad := range [][]string{{"module"}, {"module=nodigest"}, {"=r@sha256:x"}} {
		if _, err := releaseRecords(g, &releaseOptions{version: "1", artifacts: bad}, []string{"network"}); err == nil {
			t.Errorf("--artifact %v was accepted", bad)
		}
	}
	if _, err := releaseRecords(g, &releaseOptions{version: "1"}, nil); err == nil {
		t.Error("a release without digests was accepted")
	}
}

// TestArtifactsEndToEnd runs vendor CI and an install's agent as the real
// binary: nuon build, nuon release (and its refusal), nuon render, and
// nuon agent syncing into a registry with TLS and basic auth, its
// terraform jobs reading their modules from there.
func TestArtifactsEndToEnd(t *testing.T) {
	tf := testenv.TerraformConfig(t)
	root := repoRoot()
	vendor := ocitest.Start(t, ocitest.Options{})
	install := ocitest.Start(t, ocitest.Options{TLS: true, Username: "nuon", Password: "install-secret"})

	// main: the sample app in the test's registries, before any release.
	dir := t.TempDir()
	bare, src := filepath.Join(dir, "tenant.git"), filepath.Join(dir, "main")
	if err := os.CopyFS(src, os.DirFS(filepath.Join(root, "fixtures", "tenant"))); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(src, "releases"))
	app, _ := os.ReadFile(filepath.Join(src, "nuon.yaml"))
	os.WriteFile(filepath.Join(src, "nuon.yaml"), []byte(strings.ReplaceAll(string(app), "registry.vendor.example", vendor.Host)), 0o644)
	acme, _ := os.ReadFile(filepath.Join(src, "installs", "acme.yaml"))
	acme = regexp.MustCompile(`(?m)^registry: .*$`).ReplaceAll(acme, []byte("registry: "+install.Host+"/nuon-acme"))
	os.WriteFile(filepath.Join(src, "installs", "acme.yaml"), acme, 0o644)
	for _, id := range []string{"globex", "initech"} {
		os.Remove(filepath.Join(src, "installs", id+".yaml"))
	}
	gittest.InitBare(t, bare)
	gittest.CommitDir(t, bare, "main", src, "shop")

	key := filepath.Join(root, "fixtures", "keys", "cosign.key")
	env := []string{"COSIGN_PASSWORD=", "NUON_REGISTRY_PASSWORD=install-secret", "TF_CLI_CONFIG_FILE=" + tf,
		"NUON_SECRET_LICENSE_KEY=e2e-license", "GIT_AUTHOR_NAME=Vendor CI", "GIT_AUTHOR_EMAIL=ci@vendor.example"}
	appFile := filepath.Join(src, "nuon.yaml")
	previous := nuon(t, env, 0, "build", "--app", appFile, "--src", filepath.Join(root, "fixtures", "previous"), "--key", key, "-o", "json",
		"database", "api", "api-image", "dashboards")
	current := nuon(t, env, 0, "build", "--app", appFile, "--src", filepath.Join(root, "fixtures"), "--key", key, "-o", "json")
	var rep buildReport
	if err := json.Unmarshal([]byte(current), &rep); err != nil || len(rep.Artifacts) != 5 {
		t.Fatalf("build report %s: %v", current, err)
	}
	os.WriteFile(filepath.Join(dir, "previous.json"), []byte(previous), 0o644)
	os.WriteFile(filepath.Join(dir, "current.json"), []byte(current), 0o644)
	for _, r := range []struct{ from, comp, version string }{
		{"previous.json", "database", "1.0.0"}, {"previous.json", "api", "2.3.0"}, {"previous.json", "api-image", "2.3.0"}, {"previous.json", "dashboards", "1.1.0"},
		{"current.json", "network", "1.0.0"}, {"current.json", "database", "1.1.0"}, {"current.json", "api", "2.4.0"}, {"current.json", "api-image", "2.4.0"}, {"current.json", "dashboards", "1.2.0"},
	} {
		nuon(t, env, 0, "release", r.comp, "--repo", bare, "--version", r.version, "--from", filepath.Join(dir, r.from))
	}
	// The records on main are what the fixtures' sources build to.
	for _, c := range []string{"network", "database", "api", "api-image", "dashboards"} {
		want, _ := os.ReadFile(filepath.Join(root, "fixtures", "tenant", "releases", c+".yaml"))
		if got := gittest.Git(t, bare, "show", "main:releases/"+c+".yaml"); got != strings.TrimSpace(string(want)) {
			t.Errorf("releases/%s.yaml on main differs from fixtures/tenant/releases:\n%s", c, got)
		}
	}
	// Again: nothing to do. With other digests: refused, exit 1.
	if out := nuon(t, env, 0, "release", "network", "--repo", bare, "--version", "1.0.0", "--from", filepath.Join(dir, "current.json")); !strings.Contains(out, "already released") {
		t.Errorf("a repeated release said %q", out)
	}
	nuon(t, env, 1, "release", "database", "--repo", bare, "--version", "1.1.0", "--from", filepath.Join(dir, "previous.json"))

	nuon(t, env, 0, "render", "--repo", bare, "--key", filepath.Join(root, "fixtures", "keys", "render"))
	signers := filepath.Join(dir, "allowed_signers")
	pub, _ := os.ReadFile(filepath.Join(root, "fixtures", "keys", "render.pub"))
	os.WriteFile(signers, []byte("renderer "+string(pub)), 0o644)
	out := nuon(t, env, 0, "agent", "--once", "-o", "json", "--repo", bare, "--install", "acme", "--trust", signers,
		"--key", filepath.Join(root, "fixtures", "keys", "acme"), "--workdir", filepath.Join(dir, "agent"),
		"--vendor-key", filepath.Join(root, "fixtures", "keys", "cosign.pub"),
		"--registry", install.Host, "--registry-ca", install.CAFile, "--registry-username", "nuon")
	var res struct {
		Status struct {
			Components map[string]struct {
				Phase, Error string
				Outputs      map[string]any
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, c := range []string{"network", "database", "api-image"} {
		if cs := res.Status.Components[c]; cs.Phase != "Applied" {
			t.Errorf("%s: %s (%s)", c, cs.Phase, cs.Error)
		}
	}
	if vpc, _ := res.Status.Components["network"].Outputs["vpc_id"].(string); !strings.HasPrefix(vpc, "vpc-") {
		t.Errorf("network outputs %v", res.Status.Components["network"].Outputs)
	}
}

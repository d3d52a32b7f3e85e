package main

import (
	"crypto"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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

// TestProvenanceDrillWithTheBinaries is the provenance half of the
// rotation drill's attacks, with nuon build and nuon release as vendor
// CI runs them, nuon server following main, and acme's long-running
// nuon-agent behind it, on real registries: the agent is given version 1
// of the trust root (builder-1 in its builders role), the vendor's cosign
// key and the source the provenance must name. A release built by builder-1 is synced and
// applied; then a release whose provenance comes from an unknown builder,
// one from another repository, and one whose attestation was swapped for
// builder-1's valid provenance of another digest are each refused, with
// nothing copied into the install's registry and the applied digest kept.
func TestProvenanceDrillWithTheBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries on real registries")
	}
	ocitest.Require(t, "docker-registry")
	root := repoRoot()
	vendor := ocitest.Start(t, ocitest.Options{})
	install := ocitest.Start(t, ocitest.Options{TLS: true, Username: "nuon", Password: "install-secret"})
	keys, dir := t.TempDir(), t.TempDir()
	for _, k := range []string{"root-1", "root-2", "render-a"} {
		trusttest.WriteKey(t, keys, k)
	}
	builderKey := func(name string) (file, authorized string) {
		kb, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return nil, nil })
		if err != nil {
			t.Fatal(err)
		}
		file = filepath.Join(keys, name+".key")
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
	builder1, builder1Pub := builderKey("builder-1")
	builderX, _ := builderKey("builder-x")

	// main: the app's image alone, in the test's vendor registry, no
	// release yet; version 1 of the root names builder-1.
	bare, src := filepath.Join(dir, "tenant.git"), filepath.Join(dir, "main")
	if err := os.CopyFS(src, os.DirFS(filepath.Join(root, "fixtures", "tenant"))); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(src, "releases"))
	os.Remove(filepath.Join(src, "channels", "beta.yaml"))
	for _, id := range []string{"globex", "initech"} {
		os.Remove(filepath.Join(src, "installs", id+".yaml"))
	}
	writeTestFile(t, filepath.Join(src, "nuon.yaml"), []byte("name: shop\ncomponents:\n  - name: api-image\n    type: image\n    repository: "+vendor.Host+"/shop/api\n"))
	pin := func(version string) {
		writeTestFile(t, filepath.Join(src, "channels", "stable.yaml"), []byte("components:\n  api-image: "+version+"\n"))
	}
	pin("2.3.0")
	acme := filepath.Join(src, "installs", "acme.yaml")
	writeTestFile(t, acme, regexp.MustCompile(`(?m)^registry: .*$`).ReplaceAll([]byte(readFileT(t, acme)), []byte("registry: "+install.Host+"/nuon-acme")))
	v1 := trusttest.Version{Version: 1, Expires: time.Now().AddDate(1, 0, 0), RootKeys: []string{"root-1", "root-2"}, Threshold: 2,
		Render: []trusttest.RenderKey{{Name: "render-a"}}, Builders: []trusttest.NamedKey{{Name: "builder-1", Key: builder1Pub}}}.File(t, "root-1", "root-2")
	writeTestFile(t, filepath.Join(src, trust.FileName(1)), v1)
	given := filepath.Join(dir, "trust-root.json")
	writeTestFile(t, given, v1)
	gittest.InitBare(t, bare)
	gittest.CommitDir(t, bare, "main", src, "shop")

	const repo = "git+https://git.example.com/vendor/shop"
	env := []string{"COSIGN_PASSWORD=", "NUON_REGISTRY_PASSWORD=install-secret", "NUON_SECRET_LICENSE_KEY=e2e-license",
		"GIT_AUTHOR_NAME=Vendor CI", "GIT_AUTHOR_EMAIL=ci@vendor.example"}
	// build builds the image from fixtures (2.4.0) or fixtures/previous
	// (2.3.0) with a builder's key, from sourceRepo at a release tag,
	// and returns the build report's file and the image's digest.
	build := func(name, from, builderFile, sourceRepo, tag string) (string, string) {
		t.Helper()
		out := nuon(t, env, 0, "build", "--app", filepath.Join(src, "nuon.yaml"), "--src", from,
			"--key", filepath.Join(root, "fixtures", "keys", "cosign.key"), "-o", "json",
			"--builder-key", builderFile, "--builder-id", "https://builders.example.com/"+strings.TrimSuffix(filepath.Base(builderFile), ".key"),
			"--source-repo", sourceRepo, "--source-ref", "refs/tags/"+tag, "--source-commit", strings.Repeat("c", 40), "api-image")
		var rep buildReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Artifacts) != 1 {
			t.Fatalf("build report %s: %v", out, err)
		}
		file := filepath.Join(dir, name+".json")
		writeTestFile(t, file, []byte(out))
		return file, rep.Artifacts[0].Digest
	}
	// The install's agent runs all along behind nuon server, which
	// follows main and renders with render-a; the agent is given the
	// root's version 1, the vendor's key and the source provenance must
	// name.
	env = append(env, e2eEnv(t)...)
	var (
		srv      *nuonServer
		agentLog *lockedBuffer
	)
	start := func() {
		srv = startServer(t, nuonBinary(t), env, "--repo", bare, "--render-key", filepath.Join(keys, "render-a"), "--poll-interval", "200ms")
		srv.waitReady(t, time.Minute)
		_, agentLog = startProcess(t, env, agentBinary(t), "agent", "--server-auth", "--repo", srv.url+"/tenant.git", "--install", "acme",
			"--trust-root", given, "--key", filepath.Join(root, "fixtures", "keys", "acme"), "--workdir", filepath.Join(dir, "agent"),
			"--vendor-key", filepath.Join(root, "fixtures", "keys", "cosign.pub"), "--provenance-source", repo+"=refs/tags/v*",
			"--registry", install.Host, "--registry-ca", install.CAFile, "--registry-username", "nuon", "--interval", "1s")
	}
	logs := func() string {
		return "server:\n" + tail(srv.log.String(), 40) + "\nagent:\n" + tail(agentLog.String(), 40)
	}
	ref := func(name string) string {
		out, _ := gittest.Run(bare, nil, "rev-parse", "--verify", "--quiet", name)
		return strings.TrimSpace(out)
	}
	status := func() schemas.Status {
		var st schemas.Status
		if out, err := gittest.Run(bare, nil, "show", schemas.StatusRef("acme")+":"+schemas.StatusFile); err == nil {
			_ = json.Unmarshal([]byte(out), &st)
		}
		return st
	}
	// release records version from report and pins it on main; the
	// server renders it and the running agent takes it: release returns
	// api-image's status from the first status that names the new
	// render, and how long after the render that status came.
	release := func(version, report string) (schemas.ComponentStatus, time.Duration) {
		t.Helper()
		was := ref(schemas.InstallRef("acme"))
		nuon(t, env, 0, "release", "api-image", "--repo", bare, "--version", version, "--from", report)
		gittest.Git(t, bare, "--work-tree", src, "checkout", "main", "--", "releases")
		pin(version)
		gittest.CommitDir(t, bare, "main", src, "api-image "+version)
		if srv == nil {
			// Started once main has a release to render.
			start()
		}
		waitFor(t, "the server to render api-image "+version, time.Minute, logs, func() bool {
			return ref(schemas.InstallRef("acme")) != was
		})
		tip, start := ref(schemas.InstallRef("acme")), time.Now()
		waitFor(t, "acme's status of api-image "+version, 2*time.Minute, logs, func() bool { return status().Desired == tip })
		return status().Components["api-image"], time.Since(start)
	}
	// inInstall tells whether any repository of the install's registry
	// holds digest.
	inInstall := func(digest string) bool {
		t.Helper()
		opts := []crane.Option{crane.WithAuth(&authn.Basic{Username: "nuon", Password: "install-secret"}), crane.Insecure}
		repos, err := crane.Catalog(install.Host, opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range repos {
			if _, err := crane.Head(install.Host+"/"+r+"@"+digest, opts...); err == nil {
				return true
			}
		}
		return false
	}

	good, goodDigest := build("good", filepath.Join(root, "fixtures", "previous"), builder1, repo, "v2.3.0")
	applied, _ := release("2.3.0", good)
	if applied.Phase != "Applied" || applied.Digests["image"] != goodDigest || !inInstall(goodDigest) {
		t.Fatalf("builder-1's release: %+v, want %s applied", applied, goodDigest)
	}
	refused := func(step, version, report, digest, reason string) {
		t.Helper()
		got, took := release(version, report)
		t.Logf("%s: refused %s after the render: %s", step, took.Round(100*time.Millisecond), got.Error)
		if got.Phase == "Applied" || !strings.Contains(got.Error, "provenance") || !strings.Contains(got.Error, reason) {
			t.Errorf("%s: api-image %s (%s), want a provenance refusal for %q", step, got.Phase, got.Error, reason)
		}
		if got.Digests["image"] == digest {
			t.Errorf("%s: %s applied", step, digest)
		}
		if inInstall(digest) {
			t.Errorf("%s: %s was copied into the install's registry", step, digest)
		}
	}
	unknown, badDigest := build("unknown", filepath.Join(root, "fixtures"), builderX, repo, "v2.4.0")
	if badDigest == goodDigest {
		t.Fatal("the two builds made one digest")
	}
	refused("provenance from an unknown builder", "2.4.0", unknown, badDigest, "builder")
	other, _ := build("other", filepath.Join(root, "fixtures"), builder1, "git+https://git.example.com/someone/else", "v2.4.1")
	refused("provenance from another repository", "2.4.1", other, badDigest, "someone/else")
	// builder-1's valid provenance of the good digest, put where the bad
	// digest's attestations are looked up.
	att := func(d string) string { return vendor.Host + "/shop/api:" + strings.Replace(d, ":", "-", 1) + ".att" }
	if err := crane.Copy(att(goodDigest), att(badDigest), crane.Insecure); err != nil {
		t.Fatal(err)
	}
	refused("a digest swapped under a valid provenance", "2.4.2", other, badDigest, goodDigest)
	if !inInstall(goodDigest) {
		t.Errorf("the applied %s is gone from the install's registry", goodDigest)
	}
}

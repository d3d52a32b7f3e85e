package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"io/fs"
	"math/rand/v2"
	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/internal/redact/redacttest"
	"nuon.dev/nuon/schemas"
)

// TestMain stops the shared API server and removes the binaries the
// end-to-end tests built (nuon and nuon-agent, about 230 MB) after the
// tests.
func TestMain(m *testing.M) {
	code := kubetest.Run(m)
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// TestSecretsNeverReachGitE2E is the property that no secret reaches git:
// for random secret values (printable text with quotes, backslashes,
// <&>, ${, spaces, non-ASCII runes; from redact.MinLen to a few hundred
// bytes), the real agent binary runs a failing job of each real plugin
// with the real job process: a terraform module whose variable validation
// quotes the secret in a message long enough for terraform to wrap, a helm
// chart whose template fails with it, and manifests whose invalid label
// carries it, so the API server's error quotes it. Then no object of the
// tenant repository (all refs, all history, every blob and commit
// message), no file of the agent's job directories and nothing the agent
// printed holds the secret or any fragment of it longer than the minimum,
// in any of redacttest's encodings.
//
// NUON_REDACT_SECRETS sets how many secrets to try (default 2) and
// NUON_REDACT_SEED the seed (default: the time, logged).
func TestSecretsNeverReachGitE2E(t *testing.T) {
	tf := testenv.TerraformConfig(t)
	kube := kubetest.Shared(t)
	n := 2
	if v, err := strconv.Atoi(os.Getenv("NUON_REDACT_SECRETS")); err == nil && v > 0 {
		n = v
	}
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("NUON_REDACT_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("NUON_REDACT_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for i := range n {
		secret := randomSecret(rng)
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Logf("secret %q", secret)
			leakyInstall(t, tf, kube, secret)
		})
	}
}

// randomSecret is printable text with the characters tools escape,
// spaces (so that terraform wraps it) and non-ASCII runes.
func randomSecret(rng *rand.Rand) string {
	const printable = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
	special := []string{"\"", "\\", "<", "&", ">", "${", "%{", " ", "'", "é", "日本", "€"}
	n := redact.MinLen + rng.IntN(250)
	var b strings.Builder
	for b.Len() < n {
		if rng.IntN(4) == 0 {
			b.WriteString(special[rng.IntN(len(special))])
		} else {
			b.WriteByte(printable[rng.IntN(len(printable))])
		}
	}
	s := strings.TrimSpace(b.String())
	for len(strings.Join(strings.Fields(s), "")) < redact.MinLen {
		s += "k"
	}
	return s
}

func leakyInstall(t *testing.T, tf string, kube *kubetest.Server, secret string) {
	root := repoRoot()
	ns := kube.Namespace(t)
	art := t.TempDir()
	writeFiles(t, art, map[string]string{
		"tfleak/main.tf": `variable "license" {
  type = string
  validation {
    condition     = length(var.license) < 0
    error_message = "The license \"${var.license}\" that was given to this module is not valid for this install; ask the vendor for a new license key and try again."
  }
}
`,
		"chartleak/Chart.yaml":          "apiVersion: v2\nname: chartleak\nversion: 1.0.0\n",
		"chartleak/templates/fail.yaml": `{{ fail (printf "the license %q is not valid for this install: %s" .Values.license .Values.license) }}` + "\n",
		"manleak/objects.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: leak
  labels:
    license: "${inputs.license}"
data:
  license: "${inputs.license}"
`,
	})
	srv := gittest.NewServer(t)
	bare := srv.InitBare(t, "tenant.git")
	src := t.TempDir()
	acme, err := os.ReadFile(filepath.Join(root, "fixtures", "tenant", "installs", "acme.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The artifacts come from a local OCI image layout, with their real
	// digests; the agent has no vendor key here, so it runs with
	// verification explicitly off.
	layoutDir, digests := leakLayout(t, art)
	release := func(c, name string) string {
		dir := map[string]string{"tf": "tfleak", "chart": "chartleak", "objects": "manleak"}[c]
		return fmt.Sprintf("component: %s\nversions:\n  - version: 1.0.0\n    artifacts:\n      %s:\n        digest: %s\n", c, name, digests[dir])
	}
	writeFiles(t, src, map[string]string{
		"nuon.yaml": fmt.Sprintf(`name: leak
components:
  - name: tf
    type: terraform
    repository: registry.test/leak/tfleak
    inputs: {license: "${secrets.license}"}
  - name: chart
    type: helm
    repository: registry.test/leak/chartleak
    inputs: {license: "${secrets.license}"}
    helm: {namespace: %[1]s}
  - name: objects
    type: manifests
    repository: registry.test/leak/manleak
    inputs: {license: "${secrets.license}"}
    manifests: {namespace: %[1]s}
`, ns),
		"channels/stable.yaml":  "components: {tf: 1.0.0, chart: 1.0.0, objects: 1.0.0}\n",
		"releases/tf.yaml":      release("tf", "module"),
		"releases/chart.yaml":   release("chart", "chart"),
		"releases/objects.yaml": release("objects", "manifests"),
		"installs/acme.yaml":    string(acme),
	})
	gittest.CommitDir(t, bare, "main", src, "leaky components")
	url := srv.URL("tenant.git")
	keys := filepath.Join(root, "fixtures", "keys")
	work := t.TempDir()
	trust := filepath.Join(work, "allowed_signers")
	pub, _ := os.ReadFile(filepath.Join(keys, "render.pub"))
	if err := os.WriteFile(trust, []byte("renderer "+string(pub)), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"TF_CLI_CONFIG_FILE=" + tf, "CHECKPOINT_DISABLE=1", "KUBECONFIG=" + kube.Kubeconfig}
	nuon(t, env, 0, "render", "--repo", url, "--key", filepath.Join(keys, "render"))

	workdir := filepath.Join(work, "acme")
	cmd := exec.Command(nuonBinary(t), "agent", "--once", "--repo", url, "--install", "acme", "--trust", trust,
		"--key", filepath.Join(keys, "acme"), "--workdir", workdir, "--artifacts", layoutDir, "--insecure-skip-artifact-verification",
		"-o", "json", "--log-level", "debug")
	cmd.Env = append(os.Environ(), append(env, "NUON_SECRET_LICENSE="+secret)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("nuon agent: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var rep struct {
		Status schemas.Status `json:"status"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("agent report: %v\n%s", err, stdout.String())
	}
	// Each job failed with the secret in its error, redacted: the check
	// below is not vacuous.
	for _, c := range []string{"tf", "chart", "objects"} {
		cs := rep.Status.Components[c]
		t.Logf("%s: %s", c, cs.Error)
		if cs.Phase != schemas.PhaseFailed || !strings.Contains(cs.Error, redact.Marker) {
			t.Errorf("%s: phase %s, error %q: want Failed with the secret redacted", c, cs.Phase, cs.Error)
		}
	}

	texts := map[string]string{"agent stdout": stdout.String(), "agent stderr": stderr.String()}
	for id, content := range redacttest.GitObjects(t, bare) {
		texts["tenant object "+id] = content
	}
	jobs := filepath.Join(workdir, "jobs")
	err = filepath.WalkDir(jobs, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		texts["job file "+strings.TrimPrefix(p, jobs)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	redacttest.NoLeaks(t, secret, texts)
	if t.Failed() {
		t.Logf("agent stderr:\n%s", stderr.String())
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// leakLayout packages the leaky artifacts under dir (tfleak: a terraform
// module, chartleak: a Helm chart, manleak: manifests) into an OCI image
// layout, as a registry would hold them; it returns the layout and each
// artifact's digest by directory name.
func leakLayout(t *testing.T, dir string) (string, map[string]string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(path, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	digests := map[string]string{}
	add := func(name string, img v1.Image) {
		if err := p.AppendImage(img); err != nil {
			t.Fatal(err)
		}
		h, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests[name] = h.String()
	}
	for name, kind := range map[string]oci.Kind{"tfleak": oci.Terraform, "manleak": oci.Manifests} {
		img, err := oci.Package(kind, filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		add(name, img)
	}
	ch, err := builder.PackageChart(filepath.Join(dir, "chartleak"))
	if err != nil {
		t.Fatal(err)
	}
	add("chartleak", ch.Image)
	return path, digests
}

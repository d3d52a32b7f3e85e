package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sigstore/cosign/v2/pkg/cosign"

	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/oci/ocitest"
	"nuon.dev/nuon/internal/testenv"
	"nuon.dev/nuon/plugin"
	"nuon.dev/nuon/plugin/plugintest"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/reconciler/terraform"
	"nuon.dev/nuon/schemas"
)

func zonefilePlugin() string {
	return filepath.Join(repoRoot(), "fixtures", "plugins", "zonefile", "zonefile")
}

// TestPluginTestE2E runs `nuon plugin test` on the vendor plugin in the
// fixtures and on a built-in served by the same binary.
func TestPluginTestE2E(t *testing.T) {
	zones := t.TempDir()
	job := filepath.Join(repoRoot(), "fixtures", "plugins", "zonefile", "job.json")
	out := nuon(t, nil, 0, "plugin", "test", "--env", "NUON_ZONE_DIR="+zones, "--job", job, zonefilePlugin())
	if !strings.Contains(out, "plugin zonefile 0.3.0, protocol 1") || !strings.Contains(out, "13 checks, 0 failed") {
		t.Errorf("nuon plugin test:\n%s", out)
	}
	var rep plugintest.Report
	out = nuon(t, nil, 0, "plugin", "test", "-o", "json", "--env", "NUON_ZONE_DIR="+zones, "--job", job, zonefilePlugin())
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Failed() != 0 || len(rep.Results) != 13 {
		t.Errorf("nuon plugin test -o json: %v\n%s", err, out)
	}
	// Without the variable its manifest asks for, every operation fails
	// and the command says so.
	out = nuon(t, []string{"NUON_ZONE_DIR="}, 1, "plugin", "test", "--job", job, zonefilePlugin())
	if !strings.Contains(out, "NUON_ZONE_DIR is not set") {
		t.Errorf("nuon plugin test without NUON_ZONE_DIR:\n%s", out)
	}
	// The built-ins pass the protocol's own checks (their operations need
	// artifacts the kit has not got).
	out = nuon(t, nil, 1, "plugin", "test", "-o", "json", nuonBinary(t), "plugin", "serve", "manifests")
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if strings.Contains(r.Check, "999") || strings.Contains(r.Check, "not JSON") || strings.Contains(r.Check, "not declared") || r.Check == "handshake" {
			if !r.OK {
				t.Errorf("manifests plugin: %s: %s", r.Check, r.Message)
			}
		}
	}
	if rep.Plugin == nil || rep.Plugin.Name != "manifests" {
		t.Errorf("manifests plugin: %+v", rep.Plugin)
	}
}

// TestPluginServeE2E: `nuon plugin serve` answers a handshake with the
// built-in's manifest and exits with the protocol's codes.
func TestPluginServeE2E(t *testing.T) {
	serve := func(t *testing.T, name, stdin string) (string, int) {
		cmd := exec.Command(nuonBinary(t), "plugin", "serve", name)
		cmd.Stdin = strings.NewReader(stdin)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stdout.String(), code
	}
	out, code := serve(t, "helm", `{"apiVersion":"nuon.dev/v1","kind":"PluginRequest","protocol":1,"protocols":[1],"operation":"handshake"}`)
	if code != 0 {
		t.Fatalf("handshake: exit %d\n%s", code, out)
	}
	var resp schemas.PluginResponse
	if err := json.Unmarshal([]byte(out), &resp); err != nil || resp.Plugin == nil {
		t.Fatalf("handshake: %v\n%s", err, out)
	}
	want := []string{"apply", "destroy", "drift", "health", "debug"}
	if diff := cmp.Diff(want, resp.Plugin.Operations); diff != "" || resp.Plugin.Name != "helm" {
		t.Errorf("helm manifest %s (-want +got operations):\n%s", resp.Plugin.Name, diff)
	}
	if out, code = serve(t, "helm", "{"); code != plugin.ExitInvalid || !strings.Contains(out, `"code":"invalid"`) {
		t.Errorf("a broken request: exit %d\n%s", code, out)
	}
	if _, code = serve(t, "docker", "{}"); code != 1 {
		t.Errorf("an unknown built-in: exit %d", code)
	}
}

// runZoneJob runs the zonefile sample job, operation op, with `nuon job
// run` and the flags args, and returns its result and output.
func runZoneJob(t *testing.T, zones, op string, debug []string, args ...string) (*schemas.JobResult, string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(), "fixtures", "plugins", "zonefile", "job.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m["operation"], m["stateDir"], m["resultFile"] = op, filepath.Join(dir, "state"), filepath.Join(dir, "result.json")
	if debug != nil {
		m["debug"] = map[string]any{"command": debug}
	} else {
		delete(m, "debug")
	}
	b, _ := json.Marshal(m)
	manifest := filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(manifest, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nuonBinary(t), append(append([]string{"job", "run"}, args...), manifest)...)
	cmd.Env = append(os.Environ(), "NUON_ZONE_DIR="+zones)
	log, _ := cmd.CombinedOutput()
	raw, err := os.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatalf("no result: %v\n%s", err, log)
	}
	var res schemas.JobResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	return &res, string(log)
}

// TestJobRunVendorPluginE2E runs a job of the vendor plugin with `nuon
// job run --plugin-process`: applied when its capability is granted,
// refused before it runs when not.
func TestJobRunVendorPluginE2E(t *testing.T) {
	zones := t.TempDir()
	exe := []string{"--plugin-process", "zonefile=" + zonefilePlugin()}
	grant := append(exe, "--plugin-grant", "zonefile=env:NUON_ZONE_DIR")
	zone := filepath.Join(zones, "acme.shop.internal.zone")

	res, log := runZoneJob(t, zones, schemas.OpUpdate, nil, exe...)
	if !strings.Contains(res.Error, "needs env NUON_ZONE_DIR: capability not granted") {
		t.Errorf("ungranted: error %q\n%s", res.Error, log)
	}
	if _, err := os.Stat(zone); !os.IsNotExist(err) {
		t.Errorf("the zone file exists after a refused job: %v", err)
	}

	res, log = runZoneJob(t, zones, schemas.OpUpdate, nil, grant...)
	if res.Error != "" || !res.Changed || res.Outputs["records"] != float64(3) {
		t.Fatalf("apply: %+v\n%s", res, log)
	}
	b, _ := os.ReadFile(zone)
	if !strings.Contains(string(b), "api\t60\tIN\tA\t10.0.0.10") || !strings.Contains(string(b), "; nuon begin acme/dns") {
		t.Errorf("zone file:\n%s", b)
	}
	res, log = runZoneJob(t, zones, schemas.OpDebug, []string{"records"}, grant...)
	if res.Answer == nil || !strings.Contains(res.Answer.Output, "www\t300\tIN\tCNAME") || res.Answer.Command[0] != "records" {
		t.Errorf("debug: %+v\n%s", res, log)
	}
	res, log = runZoneJob(t, zones, schemas.OpDebug, []string{"cat", "/etc/shadow"}, grant...)
	if !res.Refused || res.Answer != nil || !strings.Contains(res.Error, "zonefile answers only 'records'") {
		t.Errorf("refused debug: %+v\n%s", res, log)
	}
	res, log = runZoneJob(t, zones, schemas.OpDelete, nil, grant...)
	if res.Error != "" || !res.Changed {
		t.Errorf("delete: %+v\n%s", res, log)
	}
}

// TestPluginReleaseE2E is the vendor plugin's whole chain: released
// (packaged, pushed, signed with the vendor's cosign key), then run by a
// job from its artifact pinned by digest, and refused when the signature
// is by another key or the digest is not there.
func TestPluginReleaseE2E(t *testing.T) {
	host := ocitest.InProcess(t)
	keys := filepath.Join(repoRoot(), "fixtures", "keys")
	out := nuon(t, []string{"COSIGN_PASSWORD="}, 0, "plugin", "release", "-o", "json",
		"--repository", host+"/acme/plugins/zonefile", "--key", filepath.Join(keys, "cosign.key"),
		filepath.Join(repoRoot(), "fixtures", "plugins", "zonefile"))
	var rel struct{ Name, Version, Ref, Digest string }
	if err := json.Unmarshal([]byte(out), &rel); err != nil || rel.Name != "zonefile" || !strings.HasSuffix(rel.Ref, "@"+rel.Digest) {
		t.Fatalf("nuon plugin release: %v\n%s", err, out)
	}
	// Released again, nothing changes: the same digest, already signed.
	if again := nuon(t, []string{"COSIGN_PASSWORD="}, 0, "plugin", "release", "--repository", host+"/acme/plugins/zonefile",
		"--key", filepath.Join(keys, "cosign.key"), filepath.Join(repoRoot(), "fixtures", "plugins", "zonefile")); strings.TrimSpace(again) != rel.Ref {
		t.Errorf("released again: %s, first %s", again, rel.Ref)
	}

	other, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	otherPub := filepath.Join(t.TempDir(), "other.pub")
	if err := os.WriteFile(otherPub, other.PublicBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	zones := t.TempDir()
	zone := filepath.Join(zones, "acme.shop.internal.zone")
	grant := []string{"--plugin-grant", "zonefile=env:NUON_ZONE_DIR"}
	run := func(ref, pub string) (*schemas.JobResult, string) {
		return runZoneJob(t, zones, schemas.OpUpdate, nil, append([]string{"--plugin-artifact", "zonefile=" + ref, "--plugin-key", pub}, grant...)...)
	}

	res, log := run(rel.Ref, otherPub)
	if !strings.Contains(res.Error, "signature") {
		t.Errorf("signed by another key: %+v\n%s", res, log)
	}
	missing := host + "/acme/plugins/zonefile@sha256:" + strings.Repeat("0", 64)
	res, log = run(missing, filepath.Join(keys, "cosign.pub"))
	if res.Error == "" || !strings.Contains(res.Error, "has no sha256-") {
		t.Errorf("a digest that is not there: %+v\n%s", res, log)
	}
	if _, err := os.Stat(zone); !os.IsNotExist(err) {
		t.Errorf("the zone file exists after refused jobs: %v", err)
	}
	res, log = run(rel.Ref, filepath.Join(keys, "cosign.pub"))
	if res.Error != "" || !res.Changed || res.Outputs["records"] != float64(3) {
		t.Fatalf("apply from the artifact: %+v\n%s", res, log)
	}
}

// TestPluginReleaseImageE2E: a plugin release has a container image
// beside its artifact, on the base --image-base pins (here perl from this
// machine, which the zonefile script needs), signed with the vendor's key
// and tied to the artifact; a script without a base gets no image, and a
// base not pinned by digest is refused.
func TestPluginReleaseImageE2E(t *testing.T) {
	if _, err := os.Stat("/usr/bin/perl"); err != nil {
		t.Skip("no perl")
	}
	host := ocitest.InProcess(t)
	keys := filepath.Join(repoRoot(), "fixtures", "keys")
	dir := filepath.Join(repoRoot(), "fixtures", "plugins", "zonefile")
	base, err := plugintest.HostImageList(filepath.Join(repoRoot(), "fixtures", "plugins", "zonefile-base.txt"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := oci.NewClient(oci.WithKeychain(nil))
	if err != nil {
		t.Fatal(err)
	}
	baseRepo, _ := name.NewRepository(host + "/base/perl")
	bd, _ := base.Digest()
	p, err := c.NewPusher(t.Context(), baseRepo)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Push(t.Context(), baseRepo.Digest(bd.String()), base); err != nil {
		t.Fatal(err)
	}
	release := func(code int, args ...string) string {
		return nuon(t, []string{"COSIGN_PASSWORD="}, code, append([]string{"plugin", "release", "-o", "json",
			"--repository", host + "/acme/plugins/zonefile", "--key", filepath.Join(keys, "cosign.key"), dir}, args...)...)
	}
	var rel struct{ Ref, Digest, Image string }
	if err := json.Unmarshal([]byte(release(0, "--image-base", baseRepo.Digest(bd.String()).String())), &rel); err != nil || rel.Image == "" {
		t.Fatalf("nuon plugin release --image-base: %v, %+v", err, rel)
	}
	ref, err := name.NewDigest(rel.Image)
	if err != nil {
		t.Fatal(err)
	}
	v, err := oci.LoadPublicKey(filepath.Join(keys, "cosign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := plugin.FetchImage(t.Context(), c, ref, v)
	if err != nil {
		t.Fatal(err)
	}
	if img.Artifact != rel.Digest || img.Manifest.Name != "zonefile" || img.Entrypoint[0] != "/nuon-plugin/zonefile" {
		t.Errorf("the released image %+v, the artifact %s", img, rel.Digest)
	}
	m, err := c.Get(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	man, _ := v1.ParseManifest(bytes.NewReader(m.Raw))
	baseMan, _ := base.Manifest()
	if len(man.Layers) != 2 || man.Layers[0].Digest != baseMan.Layers[0].Digest {
		t.Errorf("the image's layers %+v, want the base's then the plugin's", man.Layers)
	}

	var plain struct{ Image string }
	if err := json.Unmarshal([]byte(release(0)), &plain); err != nil || plain.Image != "" {
		t.Errorf("a script released without a base has image %q (%v): it could not run", plain.Image, err)
	}
	release(1, "--image-base", host+"/base/perl:latest") // a base by tag: refused

	// A job of the plugin's release, pinning its image (imageDigest) or
	// not, as the renderer writes it, in a directory of its own.
	jobOf := func(t *testing.T, imageDigest string) (*schemas.Job, string) {
		data, err := os.ReadFile(filepath.Join(repoRoot(), "fixtures", "plugins", "zonefile", "job.json"))
		if err != nil {
			t.Fatal(err)
		}
		var job schemas.Job
		if err := json.Unmarshal(data, &job); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		job.StateDir, job.ResultFile, job.Debug = filepath.Join(dir, "state"), filepath.Join(dir, "result.json"), nil
		art, _ := name.NewDigest(rel.Ref)
		job.Grants = &schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}}
		job.Artifacts = []schemas.Artifact{{Name: schemas.PluginArtifactName, Local: art.String(), Digest: art.DigestStr()}}
		if imageDigest != "" {
			job.Artifacts = append(job.Artifacts, schemas.Artifact{Name: schemas.PluginImageArtifactName, Local: ref.Context().Digest(imageDigest).String(), Digest: imageDigest})
		}
		b, _ := json.Marshal(&job)
		manifest := filepath.Join(dir, "manifest.json")
		if err := os.WriteFile(manifest, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return &job, manifest
	}
	result := func(t *testing.T, job *schemas.Job, log string) *schemas.JobResult {
		raw, err := os.ReadFile(job.ResultFile)
		if err != nil {
			t.Fatalf("no result: %v\n%s", err, log)
		}
		var res schemas.JobResult
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatal(err)
		}
		return &res
	}
	src := &oci.Source{Client: c}

	// The image form as a Kubernetes job runs it (agent/jobs, "Plugin
	// images"): the agent admits the pinned image and stages the
	// plugin's request; the plugin's container (here the script run on
	// this machine's perl on the request) answers; this binary reads the
	// answer into the job's result.
	t.Run("the image form's steps", func(t *testing.T) {
		job, manifest := jobOf(t, ref.DigestStr())
		img, granted, err := plugin.AdmitImage(t.Context(), c, job, v)
		if err != nil {
			t.Fatal(err)
		}
		in, out := t.TempDir(), t.TempDir()
		p := &plugin.Process{Manifest: &img.Manifest, Granted: granted}
		if err := p.Prepare(t.Context(), job, reconciler.Env{StateDir: job.StateDir, Artifacts: src}, in,
			plugin.ContainerPaths{In: in, State: job.StateDir, Work: t.TempDir()}); err != nil {
			t.Fatal(err)
		}
		req, err := os.Open(filepath.Join(in, "request.json"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(zonefilePlugin())
		cmd.Env = []string{"NUON_ZONE_DIR=" + t.TempDir(), "PATH=/usr/bin:/bin"}
		cmd.Stdin = req
		resp, err := cmd.Output()
		req.Close()
		if err != nil {
			t.Fatalf("the plugin on the request: %v", err)
		}
		_ = os.WriteFile(filepath.Join(out, "response.json"), resp, 0o644)
		_ = os.WriteFile(filepath.Join(out, "exit"), []byte("0\n"), 0o644)
		log := nuon(t, nil, 0, "job", "run", "--pod", "--plugin-exchange-in", in, "--plugin-exchange-out", out, manifest)
		if res := result(t, job, log); res.Error != "" || !res.Changed || res.Outputs["records"] != float64(3) {
			t.Errorf("the job's result: %+v\n%s", res, log)
		}
		// An image pinned by a digest that is not signed: the agent
		// refuses it before any pod exists.
		bad, _ := jobOf(t, "sha256:"+strings.Repeat("0", 64))
		if _, _, err := plugin.AdmitImage(t.Context(), c, bad, v); err == nil || !strings.Contains(err.Error(), "sha256-") {
			t.Errorf("an image that is not there: %v", err)
		}
	})

	// The process form as a Kubernetes job runs it (agent/jobs, "Plugin
	// jobs"): the agent admits the pinned artifact and stages it; this
	// binary, with no registry to read (--registry names a closed port),
	// runs the plugin from the staged files, and refuses them swapped.
	t.Run("the process form's steps", func(t *testing.T) {
		job, manifest := jobOf(t, "")
		a, granted, err := plugin.Admit(t.Context(), c, job, v)
		if err != nil {
			t.Fatal(err)
		}
		in := t.TempDir()
		p := &plugin.Process{Manifest: &a.Manifest, Granted: granted}
		if err := a.Stage(t.Context(), in); err != nil {
			t.Fatal(err)
		}
		if err := p.Stage(t.Context(), job, reconciler.Env{StateDir: job.StateDir, Artifacts: src}, in); err != nil {
			t.Fatal(err)
		}
		run := func(code int, zones string) (*schemas.JobResult, string) {
			log := nuon(t, []string{"NUON_ZONE_DIR=" + zones}, code, "job", "run", "--pod", "--registry", "127.0.0.1:1",
				"--plugin-staged", in, "--plugin-shared-network", manifest)
			return result(t, job, log), log
		}
		if res, log := run(0, t.TempDir()); res.Error != "" || !res.Changed || res.Outputs["records"] != float64(3) {
			t.Errorf("the job's result: %+v\n%s", res, log)
		}
		// The staged content swapped for other bytes: refused, the
		// plugin never runs.
		artRef, _ := name.NewDigest(rel.Ref)
		m, err := c.Get(t.Context(), artRef)
		if err != nil {
			t.Fatal(err)
		}
		man, _ := v1.ParseManifest(bytes.NewReader(m.Raw))
		layer := filepath.Join(in, plugin.StagedPluginBlobs, man.Layers[0].Digest.Hex)
		if err := os.WriteFile(layer, []byte("not the plugin"), 0o644); err != nil {
			t.Fatal(err)
		}
		zones := t.TempDir()
		if res, log := run(1, zones); !strings.Contains(res.Error, plugin.ErrStagedDigest.Error()) {
			t.Errorf("the content swapped: %+v\n%s", res, log)
		}
		if ents, _ := os.ReadDir(zones); len(ents) != 0 {
			t.Errorf("the plugin ran on swapped content: %v", ents)
		}
	})
}

func TestProcessPluginsFlags(t *testing.T) {
	tests := []struct {
		name          string
		specs, grants []string
		shared        bool
		want          string
		wantProcess   []string
	}{
		{name: "built-in", specs: []string{"terraform"}, wantProcess: []string{"terraform"}},
		{name: "vendor", specs: []string{"zonefile=/opt/zonefile"}, grants: []string{"zonefile=network,env:A"}, wantProcess: []string{"zonefile"}},
		{name: "vendor, shared network", specs: []string{"zonefile=/opt/zonefile"}, shared: true, wantProcess: []string{"zonefile"}},
		{name: "unknown built-in", specs: []string{"docker"}, want: `no built-in plugin "docker"`},
		{name: "bad name", specs: []string{"Zone=/x"}, want: "want NAME=PATH"},
		{name: "unknown capability", specs: []string{"z=/x"}, grants: []string{"z=root"}, want: `unknown capability "root"`},
		{name: "grant without name", grants: []string{"network"}, want: "want NAME=CAPABILITY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := plugins("", "")
			p := processPlugins{specs: tt.specs, grants: tt.grants, shared: tt.shared}
			err := p.apply(ps, "", "/tf")
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("apply = %v, want %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range tt.wantProcess {
				if _, ok := ps[name].(*plugin.Process); !ok {
					t.Errorf("%s is %T", name, ps[name])
				}
			}
			if tt.name == "vendor" {
				g := ps["zonefile"].(*plugin.Process).Granted
				if !g.Network || len(g.Env) != 1 || g.Env[0] != "A" || g.Secrets {
					t.Errorf("grant = %+v", g)
				}
			}
			if tt.name == "vendor, shared network" && !ps["zonefile"].(*plugin.Process).Runner.SharedNetwork {
				t.Error("--plugin-shared-network did not reach the runner")
			}
		})
	}
}

// BenchmarkPluginRoundTrip measures what running a built-in plugin behind
// the protocol costs a job: a handshake and a health request, each a
// nuon process of its own (`nuon plugin serve terraform`), against the
// same call in the job process. Terraform's health without a check
// answers without running terraform, so the difference is the protocol's
// and the processes' own cost.
func BenchmarkPluginRoundTrip(b *testing.B) {
	cfg := testenv.TerraformConfig(b)
	job := &schemas.Job{APIVersion: schemas.APIVersion, Kind: schemas.KindJob, ID: "network-health-1", Install: "acme",
		Component: "network", Operation: schemas.OpHealth, Plugin: schemas.TypeTerraform, Version: "1.0.0", Generation: 1,
		Commit: strings.Repeat("a", 40), Timeout: "1m", StateDir: b.TempDir(), ResultFile: filepath.Join(b.TempDir(), "r.json")}
	env := reconciler.Env{StateDir: job.StateDir}
	ctx := context.Background()
	b.Run("in-process", func(b *testing.B) {
		p := &terraform.Plugin{CLIConfig: cfg}
		for b.Loop() {
			if _, err := p.Health(ctx, job, env); err != nil {
				b.Fatal(err)
			}
		}
	})
	bin := nuonBinary(b)
	args := []string{"plugin", "serve", "terraform", "--tf-cli-config", cfg}
	manifest, err := plugin.Builtin(schemas.TypeTerraform)
	if err != nil {
		b.Fatal(err)
	}
	manifest.Operations = plugin.Operations(&terraform.Plugin{})
	for _, bc := range []struct {
		name     string
		manifest *schemas.PluginManifest
	}{
		// As `nuon job run --plugin-process terraform` runs it: the
		// manifest is the binary's own, one process per job.
		{"protocol", &manifest},
		// As a plugin the job knows nothing of: a handshake first, two
		// processes per job.
		{"protocol-handshake", nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			// The plugin processes' CPU time: on a busy machine their
			// wall time is mostly waiting for a core.
			before := childCPU()
			defer func() {
				b.ReportMetric(float64((childCPU()-before).Microseconds())/1000/float64(b.N), "child-cpu-ms/op")
			}()
			for b.Loop() {
				// A new Process per job, as each job process makes one.
				p := &plugin.Process{Runner: plugin.Runner{Path: bin, Args: args},
					Granted: plugin.BuiltinGrant(schemas.TypeTerraform), Manifest: bc.manifest}
				h, err := p.Health(ctx, job, env)
				if err != nil || h.Status != schemas.HealthUnknown {
					b.Fatal(h, err)
				}
			}
		})
	}
}

// childCPU is the user and system time of this process's finished
// children.
func childCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestPluginTestBuiltinE2E runs the test kit against the built-in
// terraform plugin served by this binary, with the sample network module
// from an OCI image layout: every check passes, real terraform included.
func TestPluginTestBuiltinE2E(t *testing.T) {
	tf := testenv.TerraformConfig(t)
	dir := filepath.Join(repoRoot(), "fixtures", "modules", "network")
	layoutPath, digests := moduleLayout(t, dir)
	d := digests[dir].String()
	job := map[string]any{
		"apiVersion": "nuon.dev/v1", "kind": "Job", "id": "network-update-1", "install": "acme", "component": "network",
		"operation": "update", "plugin": "terraform", "version": "1.0.0", "generation": 1, "commit": strings.Repeat("a", 40),
		"artifacts": []map[string]any{{"name": "module", "local": "registry.example/acme/shop/network@" + d, "digest": d}},
		"inputs":    map[string]any{"name": "shop-acme", "cidr": "10.1.0.0/16"},
		"timeout":   "5m", "stateDir": "/unused", "resultFile": "/unused/result.json",
	}
	b, _ := json.Marshal(job)
	jobFile := filepath.Join(t.TempDir(), "network.json")
	if err := os.WriteFile(jobFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out := nuon(t, []string{"TF_CLI_CONFIG_FILE=" + tf, "NUON_TF_CLI_CONFIG=" + tf}, 0, "plugin", "test", "-o", "json",
		"--job", jobFile, "--artifacts", layoutPath, nuonBinary(t), "plugin", "serve", "terraform")
	var rep plugintest.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	checks := map[string]bool{}
	for _, r := range rep.Results {
		checks[r.Check] = r.OK
		if !r.OK {
			t.Errorf("%s: %s", r.Check, r.Message)
		}
	}
	for _, c := range []string{"apply", "apply again changes nothing", "drift after apply finds nothing", "health after apply", "destroy"} {
		if !checks[c] {
			t.Errorf("check %q did not pass (or run)", c)
		}
	}
}

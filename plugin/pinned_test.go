package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/sigstore/sigstore/pkg/signature"

	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/oci/ocitest"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// zonefileVariant copies the zonefile plugin into a directory of its own
// with its manifest edited.
func zonefileVariant(t *testing.T, edit func(string) string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "zonefile")
	if err := os.CopyFS(dir, os.DirFS(zonefileDir)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), []byte(edit(string(b))), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPinned is the job of a component of type plugin: it runs the
// plugin artifact its manifest pins, from the registry, only when the
// vendor's key verifies it, its signed manifest names the job's plugin,
// speaks this side's protocol and needs nothing the job does not grant;
// it is granted what it needs of the grants and nothing else. Each
// refusal says why and leaves nothing behind.
func TestPinned(t *testing.T) {
	if _, err := os.Stat("/usr/bin/perl"); err != nil {
		t.Skip("no perl")
	}
	ctx := context.Background()
	host := ocitest.InProcess(t)
	c, err := oci.NewClient(oci.WithKeychain(nil))
	if err != nil {
		t.Fatal(err)
	}
	vendorKey, vendorPub := cosignKey(t)
	otherKey, _ := cosignKey(t)
	repo, _ := name.NewRepository(host + "/nuon-acme/acme/plugins/zonefile")

	// push packages dir, pushes it and signs it with key (none: unsigned).
	push := func(dir string, key signature.SignerVerifier) name.Digest {
		img, _, err := Package(dir)
		if err != nil {
			t.Fatal(err)
		}
		ref := pushImage(t, c, repo, img)
		if key != nil {
			if _, err := builder.Sign(ctx, c, ref, key); err != nil {
				t.Fatal(err)
			}
		}
		return ref
	}
	signed := push(zonefileDir, vendorKey)
	unsigned := push(zonefileVariant(t, func(s string) string { return strings.Replace(s, "0.3.0", "0.3.1", 1) }), nil)
	other := push(zonefileVariant(t, func(s string) string { return strings.Replace(s, "0.3.0", "0.3.2", 1) }), otherKey)
	network := push(zonefileVariant(t, func(s string) string {
		return strings.Replace(s, `"capabilities": {`, `"capabilities": {"network": true, `, 1)
	}), vendorKey)
	protocol := push(zonefileVariant(t, func(s string) string { return strings.Replace(s, `"protocols": [1]`, `"protocols": [7, 9]`, 1) }), vendorKey)

	zones := t.TempDir()
	job := func(ref name.Digest, grants *schemas.PluginCapabilities) *schemas.Job {
		return &schemas.Job{APIVersion: schemas.APIVersion, Kind: schemas.KindJob, ID: "dns-g1-update-1", Install: "acme", Component: "dns",
			Operation: schemas.OpUpdate, Plugin: "zonefile", Version: "0.3.0", Generation: 1, Commit: strings.Repeat("a", 40),
			Artifacts: []schemas.Artifact{{Name: schemas.PluginArtifactName, Local: ref.String(), Digest: ref.DigestStr()}},
			Inputs:    map[string]any{"zone": "acme.internal", "records": []any{map[string]any{"name": "api", "type": "A", "value": "10.0.0.1"}}},
			Grants:    grants, Timeout: "1m", StateDir: filepath.Join(zones, "state"), ResultFile: filepath.Join(zones, "result.json")}
	}
	zoneEnv := &schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}}
	all := &schemas.PluginCapabilities{Network: true, Secrets: true, CloudRole: true, WritableState: true, Env: []string{"NUON_ZONE_DIR", "HOME"}}

	t.Run("refused", func(t *testing.T) {
		noArtifact := job(signed, zoneEnv)
		noArtifact.Artifacts[0].Name = "module"
		otherDigest := job(signed, zoneEnv)
		otherDigest.Artifacts[0].Digest = network.DigestStr()
		byTag := job(signed, zoneEnv)
		byTag.Artifacts[0].Local = repo.Tag("0.3.0").String()
		otherName := job(signed, zoneEnv)
		otherName.Plugin = "dnsimple"
		tests := []struct {
			name string
			job  *schemas.Job
			key  signature.Verifier
			is   error
			want string
		}{
			{"no grants", job(signed, nil), vendorPub, ErrNotPinned, "the job has no grants"},
			{"no plugin artifact", noArtifact, vendorPub, ErrNotPinned, `the job has no artifact "plugin"`},
			{"local reference of another digest", otherDigest, vendorPub, ErrNotPinned, "is not pinned by its digest"},
			{"local reference by tag", byTag, vendorPub, ErrNotPinned, "is not pinned by its digest"},
			{"no vendor key", job(signed, zoneEnv), nil, nil, "no vendor key to verify its artifact"},
			{"unsigned", job(unsigned, zoneEnv), vendorPub, oci.ErrUnsigned, "has no sha256-"},
			{"signed by another key", job(other, zoneEnv), vendorPub, oci.ErrBadSignature, ""},
			{"another plugin", otherName, vendorPub, nil, "plugin dnsimple: the artifact " + signed.String() + " is plugin zonefile 0.3.0"},
			{"a capability not granted", job(network, zoneEnv), vendorPub, ErrNotGranted, "plugin zonefile 0.3.0 needs network: capability not granted by the install's desired state"},
			{"nothing granted", job(signed, &schemas.PluginCapabilities{}), vendorPub, ErrNotGranted, "needs env NUON_ZONE_DIR"},
			{"an unknown protocol", job(protocol, zoneEnv), vendorPub, ErrVersion, "speaks protocols [7 9]; this job speaks [1]"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "plugin")
				p, err := Pinned(ctx, c, tt.job, tt.key, dir)
				if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("Pinned = %v, %v; want %v saying %q", p, err, tt.is, tt.want)
				}
				if _, err := os.Stat(dir); !os.IsNotExist(err) {
					t.Errorf("a refused plugin left %s: %v", dir, err)
				}
				// Admit, what the Kubernetes runner asks before it creates
				// anything, refuses it the same way.
				m, granted, err := Admit(ctx, c, tt.job, tt.key)
				if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("Admit = %v, %+v, %v; want %v saying %q", m, granted, err, tt.is, tt.want)
				}
			})
		}
	})

	t.Run("granted what it needs, nothing else", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "plugin")
		j := job(signed, all)
		p, err := Pinned(ctx, c, j, vendorPub, dir)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}}, p.Granted); diff != "" {
			t.Errorf("granted (-want +got):\n%s", diff)
		}
		if p.Artifact != signed.DigestStr() || p.Manifest == nil || p.Manifest.Name != "zonefile" {
			t.Errorf("process %+v", p)
		}
		m, granted, err := Admit(ctx, c, j, vendorPub)
		if err != nil || m.Manifest.Name != "zonefile" || m.Manifest.Version != "0.3.0" || m.Ref != signed || !cmp.Equal(granted, p.Granted) {
			t.Errorf("Admit = %+v, %+v, %v; want zonefile 0.3.0 granted %+v", m, granted, err, p.Granted)
		}
		p.Runner.Environ = []string{"NUON_ZONE_DIR=" + zones, "HOME=/root", "NUON_SECRET_TOKEN=s3cret"}
		if err := os.MkdirAll(j.StateDir, 0o700); err != nil {
			t.Fatal(err)
		}
		res, err := p.Apply(ctx, j, reconciler.Env{StateDir: j.StateDir, Log: os.Stderr})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Changed {
			t.Errorf("apply changed nothing: %+v", res)
		}
		z, err := os.ReadFile(filepath.Join(zones, "acme.internal.zone"))
		if err != nil || !strings.Contains(string(z), "api\t300\tIN\tA\t10.0.0.1") {
			t.Errorf("zone file: %v\n%s", err, z)
		}
	})
}

func TestIntersect(t *testing.T) {
	need := schemas.PluginCapabilities{Network: true, WritableState: true, Env: []string{"A", "B"}}
	granted := schemas.PluginCapabilities{Network: true, Secrets: true, CloudRole: true, Env: []string{"B", "C"}}
	want := schemas.PluginCapabilities{Network: true, Env: []string{"B"}}
	if diff := cmp.Diff(want, Intersect(need, granted)); diff != "" {
		t.Errorf("Intersect (-want +got):\n%s", diff)
	}
	if got := Intersect(schemas.PluginCapabilities{}, granted); !cmp.Equal(got, schemas.PluginCapabilities{}) {
		t.Errorf("a plugin that needs nothing got %+v", got)
	}
}

// BenchmarkPinned is what a job of a vendor's plugin costs beyond the
// plugin's own work: "process" runs the zonefile plugin's health (one
// Perl process, its manifest known: no handshake); "pinned" first does
// what each such job does, Pinned: the artifact's signature verified,
// its manifest and content pulled by digest from the registry and
// unpacked, then the same health.
func BenchmarkPinned(b *testing.B) {
	if _, err := os.Stat("/usr/bin/perl"); err != nil {
		b.Skip("no perl")
	}
	ctx := context.Background()
	host := ocitest.InProcess(b)
	c, err := oci.NewClient(oci.WithKeychain(nil))
	if err != nil {
		b.Fatal(err)
	}
	sv, v := cosignKey(b)
	img, _, err := Package(zonefileDir)
	if err != nil {
		b.Fatal(err)
	}
	repo, _ := name.NewRepository(host + "/nuon-acme/acme/plugins/zonefile")
	ref := pushImage(b, c, repo, img)
	if _, err := builder.Sign(ctx, c, ref, sv); err != nil {
		b.Fatal(err)
	}
	zones := b.TempDir()
	job := &schemas.Job{APIVersion: schemas.APIVersion, Kind: schemas.KindJob, ID: "dns-g1-health-1", Install: "acme", Component: "dns",
		Operation: schemas.OpHealth, Plugin: "zonefile", Version: "0.3.0", Generation: 1, Commit: strings.Repeat("a", 40),
		Artifacts: []schemas.Artifact{{Name: schemas.PluginArtifactName, Local: ref.String(), Digest: ref.DigestStr()}},
		Inputs:    map[string]any{"zone": "acme.internal", "records": []any{}},
		Grants:    &schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}}, Timeout: "1m", StateDir: b.TempDir(), ResultFile: filepath.Join(b.TempDir(), "result.json")}
	env := reconciler.Env{StateDir: job.StateDir}
	health := func(p *Process) {
		p.Runner.Environ = []string{"NUON_ZONE_DIR=" + zones}
		if _, err := p.Health(ctx, job, env); err != nil {
			b.Fatal(err)
		}
	}
	fetched, err := Pinned(ctx, c, job, v, filepath.Join(b.TempDir(), "plugin"))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("process", func(b *testing.B) {
		defer reportChildCPU(b)()
		for b.Loop() {
			p := &Process{Runner: fetched.Runner, Granted: fetched.Granted, Manifest: fetched.Manifest, Artifact: fetched.Artifact}
			health(p)
		}
	})
	// What Pinned alone costs a job: verify, pull by digest, unpack.
	b.Run("fetch", func(b *testing.B) {
		for b.Loop() {
			dir, err := os.MkdirTemp("", "nuon-bench-plugin-")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := Pinned(ctx, c, job, v, dir); err != nil {
				b.Fatal(err)
			}
			os.RemoveAll(dir)
		}
	})
	b.Run("pinned", func(b *testing.B) {
		defer reportChildCPU(b)()
		for b.Loop() {
			dir, err := os.MkdirTemp("", "nuon-bench-plugin-")
			if err != nil {
				b.Fatal(err)
			}
			p, err := Pinned(ctx, c, job, v, dir)
			if err != nil {
				b.Fatal(err)
			}
			health(p)
			os.RemoveAll(dir)
		}
	})
}

// reportChildCPU reports the CPU time of the plugin processes per
// operation, when the returned function runs: on a busy machine their
// wall time is mostly waiting for a core.
func reportChildCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before := cpu()
	return func() {
		b.ReportMetric(float64((cpu()-before).Microseconds())/1000/float64(b.N), "child-cpu-ms/op")
	}
}

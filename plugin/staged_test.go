package plugin

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sigstore/sigstore/pkg/signature"

	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/oci/ocitest"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// stagedFixture is the zonefile plugin and a variant of it (its executable
// another script), released and signed in a registry, and the job of
// each.
type stagedFixture struct {
	c              *oci.Client
	v              signature.Verifier
	zonefile, evil name.Digest
	job            func(ref name.Digest) *schemas.Job
	zones          string
}

func newStagedFixture(t testing.TB) *stagedFixture {
	t.Helper()
	host := ocitest.InProcess(t)
	c, err := oci.NewClient(oci.WithKeychain(nil))
	if err != nil {
		t.Fatal(err)
	}
	key, v := cosignKey(t)
	repo, _ := name.NewRepository(host + "/nuon-acme/acme/plugins/zonefile")
	push := func(dir string) name.Digest {
		img, _, err := Package(dir)
		if err != nil {
			t.Fatal(err)
		}
		ref := pushImage(t, c, repo, img)
		if _, err := builder.Sign(context.Background(), c, ref, key); err != nil {
			t.Fatal(err)
		}
		return ref
	}
	// The same plugin by name, version and manifest, whose executable
	// writes a file of its own: what an attacker with the volume would
	// swap in.
	evilDir := filepath.Join(t.TempDir(), "zonefile")
	if err := os.CopyFS(evilDir, os.DirFS(zonefileDir)); err != nil {
		t.Fatal(err)
	}
	m, err := os.ReadFile(filepath.Join(zonefileDir, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	_, exe, _ := strings.Cut(string(m), `"linux/amd64": "`)
	exe, _, _ = strings.Cut(exe, `"`)
	if err := os.Chmod(filepath.Join(evilDir, exe), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(evilDir, exe), []byte("#!/bin/sh\ntouch \"$NUON_ZONE_DIR/evil-ran\"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := &stagedFixture{c: c, v: v, zonefile: push(zonefileDir), evil: push(evilDir), zones: t.TempDir()}
	f.job = func(ref name.Digest) *schemas.Job {
		return &schemas.Job{APIVersion: schemas.APIVersion, Kind: schemas.KindJob, ID: "dns-g1-update-1", Install: "acme", Component: "dns",
			Operation: schemas.OpUpdate, Plugin: "zonefile", Version: "0.3.0", Generation: 1, Commit: strings.Repeat("a", 40),
			Artifacts: []schemas.Artifact{{Name: schemas.PluginArtifactName, Local: ref.String(), Digest: ref.DigestStr()}},
			Inputs:    map[string]any{"zone": "acme.internal", "records": []any{map[string]any{"name": "api", "type": "A", "value": "10.0.0.1"}}},
			Grants:    &schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}}, Timeout: "1m",
			StateDir: filepath.Join(f.zones, "state"), ResultFile: filepath.Join(f.zones, "result.json")}
	}
	return f
}

// stage admits the plugin ref as the agent does and stages it into a
// fresh directory, which it returns.
func (f *stagedFixture) stage(t testing.TB, ref name.Digest) string {
	t.Helper()
	a, _, err := Admit(context.Background(), f.c, f.job(ref), f.v)
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(t.TempDir(), "plugin-in")
	if err := a.Stage(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	return in
}

// TestStaged runs the zonefile plugin as a job's pod does from what the
// agent staged (Admit, Artifact.Stage, Staged), with no registry, and
// swaps each staged file for another release's as an attacker with the
// volume would: the manifest, the config, the content, all three, or a
// release staged for another job; each is refused with
// ErrStagedDigest before anything of it runs.
func TestStaged(t *testing.T) {
	if _, err := os.Stat("/usr/bin/perl"); err != nil {
		t.Skip("no perl")
	}
	ctx := context.Background()
	f := newStagedFixture(t)

	t.Run("runs from the staged files", func(t *testing.T) {
		in := f.stage(t, f.zonefile)
		job := f.job(f.zonefile)
		p, err := Staged(ctx, job, in, filepath.Join(t.TempDir(), "plugin"))
		if err != nil {
			t.Fatal(err)
		}
		if p.Artifact != f.zonefile.DigestStr() || p.Manifest.Name != "zonefile" || p.Staged != in || len(p.Granted.Env) != 1 {
			t.Errorf("process %+v", p)
		}
		p.Runner.Environ = []string{"NUON_ZONE_DIR=" + f.zones}
		if err := os.MkdirAll(job.StateDir, 0o700); err != nil {
			t.Fatal(err)
		}
		// No registry: the job's artifacts are the staged ones.
		res, err := p.Apply(ctx, job, reconciler.Env{StateDir: job.StateDir, Log: os.Stderr})
		if err != nil || !res.Changed {
			t.Fatalf("Apply = %+v, %v", res, err)
		}
		if z, err := os.ReadFile(filepath.Join(f.zones, "acme.internal.zone")); err != nil || !strings.Contains(string(z), "api\t300\tIN\tA\t10.0.0.1") {
			t.Errorf("zone file: %v\n%s", err, z)
		}
	})

	good := f.stage(t, f.zonefile)
	evil := f.stage(t, f.evil)
	// The blobs of each, by what its manifest names.
	blobs := func(in string, ref name.Digest) (config, layer string) {
		raw, err := os.ReadFile(filepath.Join(in, StagedPluginBlobs, ref.DigestStr()[len("sha256:"):]))
		if err != nil {
			t.Fatal(err)
		}
		m, err := v1.ParseManifest(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		return m.Config.Digest.Hex, m.Layers[0].Digest.Hex
	}
	config, layer := blobs(good, f.zonefile)
	_, evilLayer := blobs(evil, f.evil)
	if layer == evilLayer {
		t.Fatalf("the two releases share their content %s", layer)
	}
	copyFile := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name string
		swap func(in string)
	}{
		{"the content swapped", func(in string) {
			copyFile(filepath.Join(evil, StagedPluginBlobs, evilLayer), filepath.Join(in, StagedPluginBlobs, layer))
		}},
		{"the manifest swapped", func(in string) {
			copyFile(filepath.Join(evil, StagedPluginBlobs, f.evil.DigestStr()[len("sha256:"):]), filepath.Join(in, StagedPluginBlobs, f.zonefile.DigestStr()[len("sha256:"):]))
			copyFile(filepath.Join(evil, StagedPluginBlobs, evilLayer), filepath.Join(in, StagedPluginBlobs, evilLayer))
		}},
		{"the config edited", func(in string) {
			file := filepath.Join(in, StagedPluginBlobs, config)
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, []byte(strings.Replace(string(b), `"zonefile"`, `"zonefile" `, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"the content appended to", func(in string) {
			f, err := os.OpenFile(filepath.Join(in, StagedPluginBlobs, layer), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte{0})
			f.Close()
		}},
		{"another release staged", func(in string) {
			os.RemoveAll(filepath.Join(in, "plugin"))
			if err := os.CopyFS(filepath.Join(in, "plugin"), os.DirFS(filepath.Join(evil, "plugin"))); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := filepath.Join(t.TempDir(), "plugin-in")
			if err := os.CopyFS(in, os.DirFS(good)); err != nil {
				t.Fatal(err)
			}
			tt.swap(in)
			work := filepath.Join(t.TempDir(), "plugin")
			p, err := Staged(ctx, f.job(f.zonefile), in, work)
			if err == nil {
				p.Runner.Environ = []string{"NUON_ZONE_DIR=" + f.zones}
				_, err = p.Apply(ctx, f.job(f.zonefile), reconciler.Env{StateDir: t.TempDir()})
				t.Fatalf("Staged accepted it; the plugin ran: %v", err)
			}
			if !errors.Is(err, ErrStagedDigest) {
				t.Errorf("Staged = %v; want %v", err, ErrStagedDigest)
			}
			if _, err := os.Stat(filepath.Join(f.zones, "evil-ran")); err == nil {
				t.Error("the swapped executable ran")
			}
			if ents, _ := os.ReadDir(work); len(ents) != 0 {
				t.Errorf("a refused plugin was unpacked: %v", ents)
			}
		})
	}

	t.Run("nothing staged", func(t *testing.T) {
		if _, err := Staged(ctx, f.job(f.zonefile), t.TempDir(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "no such file") {
			t.Errorf("Staged = %v; want no such file", err)
		}
	})
	t.Run("a job that pins nothing", func(t *testing.T) {
		j := f.job(f.zonefile)
		j.Artifacts[0].Digest = f.evil.DigestStr()
		if _, err := Staged(ctx, j, good, t.TempDir()); !errors.Is(err, ErrNotPinned) {
			t.Errorf("Staged = %v; want %v", err, ErrNotPinned)
		}
	})
}

// FuzzStaged writes any bytes where the agent stages the plugin's
// manifest, config and content, under the names the job's pin and the
// real manifest give them: Staged accepts them only when each is the
// byte-for-byte original, and unpacks nothing otherwise.
func FuzzStaged(f *testing.F) {
	fx := newStagedFixture(f)
	good := fx.stage(f, fx.zonefile)
	dir := filepath.Join(good, StagedPluginBlobs)
	pin := fx.zonefile.DigestStr()[len("sha256:"):]
	raw, err := os.ReadFile(filepath.Join(dir, pin))
	if err != nil {
		f.Fatal(err)
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		f.Fatal(err)
	}
	config, _ := os.ReadFile(filepath.Join(dir, m.Config.Digest.Hex))
	layer, _ := os.ReadFile(filepath.Join(dir, m.Layers[0].Digest.Hex))
	f.Add(raw, config, layer)
	f.Add(raw, config, append(bytes.Clone(layer), 0))
	f.Add(raw[:len(raw)-1], config, layer)
	f.Add([]byte("{}"), []byte("{}"), []byte{})
	job := fx.job(fx.zonefile)
	f.Fuzz(func(t *testing.T, man, cfg, content []byte) {
		in := t.TempDir()
		d := filepath.Join(in, StagedPluginBlobs)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range map[string][]byte{pin: man, m.Config.Digest.Hex: cfg, m.Layers[0].Digest.Hex: content} {
			if err := os.WriteFile(filepath.Join(d, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		work := filepath.Join(t.TempDir(), "plugin")
		_, err := Staged(context.Background(), job, in, work)
		same := bytes.Equal(man, raw) && bytes.Equal(cfg, config) && bytes.Equal(content, layer)
		if err == nil && !same {
			t.Fatal("Staged accepted staged files that are not the pinned release's")
		}
		if err != nil && same {
			t.Fatalf("Staged refused the pinned release: %v", err)
		}
		if ents, _ := os.ReadDir(work); err != nil && len(ents) != 0 {
			t.Fatalf("refused (%v), and unpacked %v", err, ents)
		}
	})
}

package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/sigstore/pkg/signature"

	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/oci/ocitest"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

const zonefileDir = "../fixtures/plugins/zonefile"

// cosignKey makes a cosign key pair as `cosign generate-key-pair` does
// and loads it as `nuon build` loads the vendor's.
func cosignKey(t testing.TB) (signature.SignerVerifier, signature.Verifier) {
	t.Helper()
	kb, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return []byte("pw"), nil })
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "cosign.key")
	if err := os.WriteFile(file, kb.PrivateBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	sv, err := builder.LoadKey(file, []byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := oci.ParsePublicKey(kb.PublicBytes)
	if err != nil {
		t.Fatal(err)
	}
	return sv, v
}

func pushImage(t testing.TB, c *oci.Client, repo name.Repository, img v1.Image) name.Digest {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ref := repo.Digest(d.String())
	p, err := c.NewPusher(context.Background(), repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Push(context.Background(), ref, img); err != nil {
		t.Fatal(err)
	}
	return ref
}

// TestPluginArtifact releases the vendor's plugin as an artifact: packaged
// from its directory, pushed, signed with the vendor's cosign key as
// every artifact is, then fetched by digest, verified and run without a
// handshake, with only the capability its manifest declares granted.
func TestPluginArtifact(t *testing.T) {
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
	_, otherPub := cosignKey(t)

	img, m, err := Package(zonefileDir)
	if err != nil {
		t.Fatal(err)
	}
	repo, _ := name.NewRepository(host + "/acme/plugins/zonefile")
	ref := pushImage(t, c, repo, img)
	unsignedRepo, _ := name.NewRepository(host + "/acme/plugins/unsigned")
	unsigned := pushImage(t, c, unsignedRepo, img)
	if _, err := builder.Sign(ctx, c, ref, vendorKey); err != nil {
		t.Fatal(err)
	}
	// The same bytes package to the same digest.
	again, _, err := Package(zonefileDir)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := again.Digest(); d.String() != ref.DigestStr() {
		t.Errorf("packaging again gives %s, first %s", d, ref.DigestStr())
	}

	t.Run("refused", func(t *testing.T) {
		module, err := oci.Package(oci.Terraform, "../fixtures/modules/network")
		if err != nil {
			t.Fatal(err)
		}
		modRepo, _ := name.NewRepository(host + "/acme/modules/network")
		modRef := pushImage(t, c, modRepo, module)
		if _, err := builder.Sign(ctx, c, modRef, vendorKey); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name     string
			ref      name.Digest
			key      signature.Verifier
			platform string
			is       error
			want     string
		}{
			{"unsigned", unsigned, vendorPub, "", oci.ErrUnsigned, "has no sha256-"},
			{"signed by another key", ref, otherPub, "", oci.ErrBadSignature, ""},
			{"not a plugin", modRef, vendorPub, "", nil, "not a plugin artifact (config application/vnd.nuon.terraform.config.v1+json"},
			{"no executable for the platform", ref, vendorPub, "windows/amd64", nil, "plugin zonefile 0.3.0 has no executable for windows/amd64 (it has darwin/arm64, linux/amd64, linux/arm64)"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "plugin")
				_, err := Fetch(ctx, c, tt.ref, tt.key, dir, tt.platform)
				if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("Fetch = %v, want %v saying %q", err, tt.is, tt.want)
				}
				if _, err := os.Stat(dir); !os.IsNotExist(err) {
					t.Errorf("a refused plugin left %s: %v", dir, err)
				}
			})
		}
	})

	dir := filepath.Join(t.TempDir(), "plugin")
	f, err := Fetch(ctx, c, ref, vendorPub, dir, "linux/amd64")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(*m, f.Manifest); diff != "" {
		t.Errorf("fetched manifest (-packaged +fetched):\n%s", diff)
	}
	// What the executable states in its handshake is what its artifact
	// says.
	hs := &Process{Runner: Runner{Path: f.Executable}}
	said, _, err := hs.Handshake(ctx)
	if err != nil {
		t.Fatal(err)
	}
	said.Executables = f.Manifest.Executables
	if diff := cmp.Diff(f.Manifest, *said); diff != "" {
		t.Errorf("handshake (-artifact +executable):\n%s", diff)
	}

	data, err := os.ReadFile(filepath.Join(zonefileDir, "job.json"))
	if err != nil {
		t.Fatal(err)
	}
	job, err := DecodeJob("job.json", data)
	if err != nil {
		t.Fatal(err)
	}
	job.StateDir = t.TempDir()
	zones := t.TempDir()
	p := f.Process(f.Manifest.Capabilities)
	p.Runner.Environ = append(os.Environ(), "NUON_ZONE_DIR="+zones)
	res, err := p.Apply(ctx, job, reconciler.Env{StateDir: job.StateDir})
	if err != nil || !res.Changed {
		t.Fatalf("apply = %+v, %v", res, err)
	}
	if b, _ := os.ReadFile(filepath.Join(zones, "acme.shop.internal.zone")); !strings.Contains(string(b), "api\t60\tIN\tA\t10.0.0.10") {
		t.Errorf("zone file:\n%s", b)
	}
	// Granted less than it declares, it does not run.
	if _, err := f.Process(schemas.PluginCapabilities{}).Apply(ctx, job, reconciler.Env{StateDir: job.StateDir}); !errors.Is(err, ErrNotGranted) {
		t.Errorf("apply without the grant = %v", err)
	}
}

func TestPackageRefuses(t *testing.T) {
	write := func(t *testing.T, manifest string, files map[string]os.FileMode) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ManifestFile), []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		for f, mode := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("#!/bin/sh\n"), mode); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	const head = `{"apiVersion":"nuon.dev/v1","kind":"Plugin","name":"z","version":"1.0.0","protocols":[1],"operations":["apply"],"capabilities":{}`
	tests := []struct {
		name, manifest string
		files          map[string]os.FileMode
		want           string
	}{
		{"no executables", head + `}`, map[string]os.FileMode{"z": 0o755}, "a released plugin names its executables"},
		{"not executable", head + `,"executables":{"linux/amd64":"z"}}`, map[string]os.FileMode{"z": 0o644}, "the linux/amd64 executable z is not an executable file"},
		{"missing", head + `,"executables":{"linux/amd64":"bin/z"}}`, map[string]os.FileMode{"z": 0o755}, "the linux/amd64 executable bin/z is not"},
		{"outside", head + `,"executables":{"linux/amd64":"../z"}}`, map[string]os.FileMode{"z": 0o755}, `"../z" is not a path inside`},
		{"invalid manifest", `{"kind":"Plugin"}`, nil, `missing required field "apiVersion"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Package(write(t, tt.manifest, tt.files))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Package = %v, want %q", err, tt.want)
			}
		})
	}
}

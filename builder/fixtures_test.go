package builder

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/oci/ocitest"
	"nuon.dev/nuon/schemas"
)

var update = flag.Bool("update", false, "rewrite the fixture images and fixtures/tenant/releases from the fixture sources")

// fixtureRoots are the source roots under fixtures/ and the version of
// each component each holds, oldest first.
var fixtureRoots = []struct {
	root     string
	versions map[string]string
}{
	{"../fixtures/previous", map[string]string{"database": "1.0.0", "api": "2.3.0", "api-image": "2.3.0", "dashboards": "1.1.0"}},
	{"../fixtures", map[string]string{"network": "1.0.0", "database": "1.1.0", "api": "2.4.0", "api-image": "2.4.0", "dashboards": "1.2.0"}},
}

const fixtureApp = "../fixtures/tenant/nuon.yaml"

// TestFixtureReleases checks that the release records of the sample tenant
// are what its sources build to. With -update it first writes the images'
// OCI layouts, then the release files.
func TestFixtureReleases(t *testing.T) {
	app, err := LoadApp(fixtureApp)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		for _, fr := range fixtureRoots {
			writeImageLayout(t, filepath.Join(fr.root, "images", "api-image"), fr.versions["api-image"])
		}
	}
	host := ocitest.InProcess(t)
	local := app
	local.Components = slices.Clone(app.Components)
	for i, c := range local.Components {
		local.Components[i].Repository = host + strings.TrimPrefix(c.Repository, "registry.vendor.example")
	}
	c, err := oci.NewClient(oci.WithKeychain(nil))
	if err != nil {
		t.Fatal(err)
	}
	sv, err := LoadKey("../fixtures/keys/cosign.key", nil)
	if err != nil {
		t.Fatal(err)
	}
	built := map[string][]Record{}
	for _, fr := range fixtureRoots {
		var names []string
		for n := range fr.versions {
			names = append(names, n)
		}
		targets, err := Targets(local, fr.root, nil, names)
		if err != nil {
			t.Fatal(err)
		}
		arts, err := Build(context.Background(), targets, Options{Client: c, Signer: sv})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range arts {
			orig := app.Components[slices.IndexFunc(app.Components, func(c schemas.Component) bool { return c.Name == a.Component })]
			built[a.Component] = append(built[a.Component], Record{
				Component: a.Component,
				Version:   fr.versions[a.Component],
				Artifacts: map[string]schemas.ReleaseArtifact{a.Name: {Repository: orig.Repository, Digest: a.Digest, MediaType: a.MediaType}},
			})
		}
	}
	appData, err := os.ReadFile(fixtureApp)
	if err != nil {
		t.Fatal(err)
	}
	for comp, records := range built {
		file := filepath.Join("../fixtures/tenant/releases", comp+".yaml")
		var data []byte
		for _, r := range records {
			data, _, err = appendVersion(appData, "releases/"+comp+".yaml", data, r)
			if err != nil {
				t.Fatal(err)
			}
		}
		if *update {
			if err := os.WriteFile(file, data, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(want), string(data)); diff != "" {
			t.Errorf("%s is not what its sources build to (go test ./builder -run TestFixtureReleases -update) (-file +built):\n%s", file, diff)
		}
	}
}

// writeImageLayout writes a tiny, reproducible image of the shop's API at
// version as an OCI image layout.
func writeImageLayout(t *testing.T, dir, version string) {
	t.Helper()
	gz, err := oci.Archive([]oci.File{
		{Name: "app", Mode: os.ModeDir | 0o755},
		{Name: "app/VERSION", Mode: 0o644, Data: []byte(version + "\n")},
		{Name: "app/api", Mode: 0o755, Data: []byte("#!/bin/sh\necho \"shop api " + version + "\"\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(gz)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = "amd64", "linux"
	cfg.Config.Entrypoint = []string{"/app/api"}
	cfg.Config.Labels = map[string]string{"org.opencontainers.image.version": version, "org.opencontainers.image.title": "shop api"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	t.Logf("wrote %s (%s)", dir, d)
}

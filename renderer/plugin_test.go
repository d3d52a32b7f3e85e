package renderer

import (
	"encoding/json"
	"io/fs"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/schemas"
)

const pluginDigest = "sha256:1111111111111111111111111111111111111111111111111111111111111111"

// pluginSource loads fixtures/plugins/tenant with dns's release, whose
// artifacts are arts (YAML lines under artifacts:).
func pluginSource(t *testing.T, arts string) (*schemas.Source, error) {
	t.Helper()
	fsys := fstest.MapFS{}
	root := os.DirFS("../fixtures/plugins/tenant")
	err := fs.WalkDir(root, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(root, path)
		fsys[path] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	fsys["releases/dns.yaml"] = &fstest.MapFile{Data: []byte("component: dns\nversions:\n  - version: 0.3.0\n    artifacts:\n" + arts)}
	return schemas.Load(fsys)
}

// TestRenderPluginComponent: a component of type plugin is rendered with
// its plugin's name and grants from nuon.yaml and the plugin's artifact
// from its release, pinned by digest in the install's registry.
func TestRenderPluginComponent(t *testing.T) {
	src, err := pluginSource(t, "      plugin:\n        digest: "+pluginDigest+"\n        mediaType: application/vnd.oci.image.manifest.v1+json\n")
	if err != nil {
		t.Fatal(err)
	}
	files, err := Install(src, "acme")
	if err != nil {
		t.Fatal(err)
	}
	var cs schemas.ComponentState
	if err := json.Unmarshal(files[schemas.ComponentStateFile("dns")], &cs); err != nil {
		t.Fatal(err)
	}
	if err := schemas.ValidateJSON(schemas.SchemaComponentState, files[schemas.ComponentStateFile("dns")]); err != nil {
		t.Fatal(err)
	}
	want := &schemas.PluginSettings{Name: "zonefile", Grants: &schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}}}
	if diff := cmp.Diff(want, cs.Plugin); diff != "" {
		t.Errorf("plugin (-want +got):\n%s", diff)
	}
	wantArt := []schemas.Artifact{{Name: schemas.PluginArtifactName,
		Source: "registry.vendor.example/acme/plugins/zonefile@" + pluginDigest,
		Local:  "127.0.0.1:5000/nuon-acme/acme/plugins/zonefile@" + pluginDigest,
		Digest: pluginDigest, MediaType: "application/vnd.oci.image.manifest.v1+json"}}
	if diff := cmp.Diff(wantArt, cs.Artifacts); diff != "" {
		t.Errorf("artifacts (-want +got):\n%s", diff)
	}
	if cs.Type != schemas.TypePlugin || cs.Inputs["zone"] != "acme.shop.internal" {
		t.Errorf("component %+v", cs)
	}
}

// TestRenderPluginComponentWithoutArtifact: a release of a component of
// type plugin that has no plugin artifact renders nothing for the install.
func TestRenderPluginComponentWithoutArtifact(t *testing.T) {
	src, err := pluginSource(t, "      module:\n        digest: "+pluginDigest+"\n")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Install(src, "acme")
	if err == nil || !strings.Contains(err.Error(), `component dns: version 0.3.0 has no artifact "plugin"`) {
		t.Errorf("Install = %v", err)
	}
}

package renderer_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/schemas"
)

// FuzzRender loads the fixture tenant with one install file and the
// stable channel file replaced by fuzzed bytes. Loading never panics and
// fails only with Problems; a source that loads renders every install,
// the same bytes twice, into JSON that its schema accepts.
func FuzzRender(f *testing.F) {
	base := fixtureFiles(f)
	channel := base["channels/stable.yaml"]
	for name, data := range base {
		if strings.HasPrefix(name, "installs/") {
			f.Add(data, channel)
		}
	}
	f.Add(base["installs/acme.yaml"], base["channels/beta.yaml"])
	f.Add([]byte("channel: stable\nversions: {api: 9.9.9}\n"), channel)
	f.Add([]byte("channel: stable\ninputs: {cidr: '${install.inputs.cidr}'}\n"), []byte("components: {}\n"))
	f.Add([]byte("&a [*a]"), []byte("components: &c {network: *c}\n"))
	f.Fuzz(func(t *testing.T, install, stable []byte) {
		fsys := fstest.MapFS{}
		for name, data := range base {
			fsys[name] = &fstest.MapFile{Data: data}
		}
		fsys["installs/fuzz.yaml"] = &fstest.MapFile{Data: install}
		fsys["channels/stable.yaml"] = &fstest.MapFile{Data: stable}
		src, err := schemas.Load(fsys)
		if err != nil {
			var ps schemas.Problems
			if !errors.As(err, &ps) || len(ps) == 0 {
				t.Fatalf("load: %v, want Problems", err)
			}
			return
		}
		for _, id := range src.InstallIDs() {
			a, err := renderer.Install(src, id)
			if err != nil {
				t.Fatalf("a source that loads does not render %s: %v", id, err)
			}
			b, err := renderer.Install(src, id)
			if err != nil {
				t.Fatal(err)
			}
			if len(a) != len(b) {
				t.Fatalf("%s: %d files, then %d", id, len(a), len(b))
			}
			for name, data := range a {
				if !bytes.Equal(data, b[name]) {
					t.Fatalf("%s/%s differs between two renders:\n%s\n%s", id, name, data, b[name])
				}
				if !json.Valid(data) {
					t.Fatalf("%s/%s is not JSON:\n%s", id, name, data)
				}
				schema := schemas.SchemaComponentState
				if name == schemas.InstallStateFile {
					schema = schemas.SchemaInstallState
				}
				if err := schemas.ValidateJSON(schema, data); err != nil {
					t.Fatalf("%s/%s does not match %s: %v\n%s", id, name, schema, err, data)
				}
			}
		}
	})
}

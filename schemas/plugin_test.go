package schemas

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
)

func init() {
	// A plugin request carries the job manifest, which names no vendor
	// source either.
	leftOut["PluginRequest.Job.Artifacts[].Source"] = true
	zeroByDesign["plugin-request.Job.Artifacts.Source"] = true
}

// pluginSamples are fully populated plugin documents.
func pluginSamples(t *testing.T) map[string]any {
	t.Helper()
	s := samples()
	job := s[SchemaJob].(Job)
	job.Plugin = "zonefile"
	res := s[SchemaJobResult].(JobResult)
	manifest := PluginManifest{
		APIVersion: APIVersion, Kind: KindPluginManifest, Name: "zonefile", Version: "1.2.0",
		Description: "records in a zone file", Protocols: []int{1}, Operations: PluginOperations,
		Capabilities: PluginCapabilities{Network: true, Secrets: true, CloudRole: true, WritableState: true, Env: []string{"KUBECONFIG"}},
		Executables:  map[string]string{"linux/amd64": "bin/zonefile"},
	}
	grant := manifest.Capabilities
	return map[string]any{
		SchemaPluginManifest: manifest,
		SchemaPluginRequest: PluginRequest{
			APIVersion: APIVersion, Kind: KindPluginRequest, Protocol: 1, Protocols: []int{1}, Operation: PluginApply,
			Job: &job, StateDir: "/var/lib/nuon/state/api", WorkDir: "/var/lib/nuon/jobs/api-update-7/work",
			Artifacts: []PluginArtifact{{Name: "chart", Digest: testDigest, MediaType: "application/vnd.oci.image.layer.v1.tar", Dir: "/work/a/0"}},
			Granted:   &grant,
		},
		SchemaPluginResponse: PluginResponse{
			APIVersion: APIVersion, Kind: KindPluginResponse, Protocol: 1, Operation: PluginApply, Plugin: &manifest,
			Outputs: res.Outputs, Sensitive: res.Sensitive, Changed: true, Plan: json.RawMessage(`{"changes":1}`),
			Drift: res.Drift, Health: res.Health, Answer: res.Answer,
			Error: &PluginError{Code: PluginFailed, Message: "zone file is locked"},
		},
	}
}

func TestValidatePluginDocuments(t *testing.T) {
	for schema, v := range pluginSamples(t) {
		t.Run(schema, func(t *testing.T) {
			assertPopulated(t, strings.TrimSuffix(schema, ".schema.json"), reflect.ValueOf(v))
			data, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if err := ValidateJSON(schema, data); err != nil {
				t.Errorf("ValidateJSON:\n%v\n%s", err, data)
			}
		})
	}
}

func TestValidatePluginBadDocuments(t *testing.T) {
	tests := []struct {
		name, schema, doc, want string
	}{
		{"handshake with no protocol", SchemaPluginRequest,
			`{"apiVersion":"nuon.dev/v1","kind":"PluginRequest","operation":"handshake"}`, `missing required field "protocol"`},
		{"apply without a job", SchemaPluginRequest,
			`{"apiVersion":"nuon.dev/v1","kind":"PluginRequest","protocol":1,"operation":"apply"}`, `missing required field "job"`},
		{"unknown operation", SchemaPluginRequest,
			`{"apiVersion":"nuon.dev/v1","kind":"PluginRequest","protocol":1,"operation":"upgrade"}`, `operation: must be one of`},
		{"unknown error code", SchemaPluginResponse,
			`{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":1,"operation":"apply","error":{"code":"oops","message":"x"}}`, `error.code: must be one of`},
		{"unknown capability", SchemaPluginManifest,
			`{"apiVersion":"nuon.dev/v1","kind":"Plugin","name":"z","version":"1","protocols":[1],"operations":["apply"],"capabilities":{"root":true}}`, `unknown field "root"`},
		{"env variable that is not a name", SchemaPluginManifest,
			`{"apiVersion":"nuon.dev/v1","kind":"Plugin","name":"z","version":"1","protocols":[1],"operations":["apply"],"capabilities":{"env":["A=B"]}}`, `capabilities.env[0]`},
		{"protocol zero", SchemaPluginResponse,
			`{"apiVersion":"nuon.dev/v1","kind":"PluginResponse","protocol":0,"operation":"apply"}`, `protocol`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateJSON(tt.schema, []byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ValidateJSON = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestLoadPluginComponent: a component of type plugin names its plugin;
// no other type may.
func TestLoadPluginComponent(t *testing.T) {
	app := func(body string) fstest.MapFS {
		return fstest.MapFS{AppFile: {Data: []byte("name: zones\ncomponents:\n  - name: dns\n    repository: r.example/a/zonefile\n" + body)}}
	}
	tests := []struct {
		name, body, want string
	}{
		{"named", "    type: plugin\n    plugin: {name: zonefile, grants: {env: [NUON_ZONE_DIR], network: true}}\n", ""},
		{"no plugin", "    type: plugin\n", "components[0]: missing required field \"plugin\""},
		{"a built-in with a plugin", "    type: terraform\n    plugin: {name: zonefile}\n", "components[0]"},
		{"a bad name", "    type: plugin\n    plugin: {name: Zone_File}\n", "components[0].plugin.name"},
		{"an unknown capability", "    type: plugin\n    plugin: {name: zonefile, grants: {root: true}}\n", "components[0].plugin.grants"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, err := Load(app(tt.body))
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				want := &PluginSettings{Name: "zonefile", Grants: &PluginCapabilities{Network: true, Env: []string{"NUON_ZONE_DIR"}}}
				if got := src.App.Components[0].Plugin; !reflect.DeepEqual(got, want) {
					t.Errorf("plugin %+v, want %+v", got, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "nuon.yaml:") {
				t.Errorf("Load = %v, want a problem at %s", err, tt.want)
			}
		})
	}
}

package jobrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// manifest returns the JSON of a valid job of plugin, changed by edit,
// and the job's result file.
func manifest(t *testing.T, plugin string, edit func(m map[string]any)) ([]byte, string) {
	t.Helper()
	job := testJob(t, plugin)
	job.ResultFile = filepath.Join(t.TempDir(), "out", ResultFile)
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(m)
	}
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	return b, job.ResultFile
}

func writeManifestFile(t *testing.T, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), ManifestFile)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestMainRejectsManifest(t *testing.T) {
	t.Parallel()
	set := func(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
	tests := []struct {
		name    string
		edit    func(map[string]any)
		raw     string
		wantMsg string
	}{
		{name: "unknown field", edit: set("timout", "1m"), wantMsg: `timout: unknown field "timout"; did you mean "timeout"?`},
		{name: "api version", edit: set("apiVersion", "nuon.dev/v0"), wantMsg: `:1:15: apiVersion: must be "nuon.dev/v1", not "nuon.dev/v0"`},
		{name: "kind", edit: set("kind", "Status"), wantMsg: `kind: must be "Job", not "Status"`},
		{name: "operation", edit: set("operation", "upsert"), wantMsg: `operation: must be one of create, update, delete, drift, health or debug, not "upsert"`},
		{name: "zero timeout", edit: set("timeout", "0s"), wantMsg: `manifest.json: timeout "0s" is not a positive duration`},
		{name: "no timeout", edit: set("timeout", ""), wantMsg: `timeout: "" is not a duration`},
		{name: "negative timeout", edit: set("timeout", "-1s"), wantMsg: `timeout: "-1s" is not a duration`},
		{name: "id is a path", edit: set("id", "../x"), wantMsg: `id: "../x" is not a job id`},
		{name: "no result file", edit: func(m map[string]any) { delete(m, "resultFile") }, wantMsg: `missing required field "resultFile"`},
		{name: "wrong type", edit: set("generation", "one"), wantMsg: "generation: must be a whole number, not a string"},
		{name: "two documents", raw: `{"kind":"Job"} {}`, wantMsg: "invalid JSON: invalid character after top-level value"},
		{name: "not JSON", raw: "kind: Job\n", wantMsg: "invalid character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data, result := manifest(t, "echo", tt.edit)
			if tt.raw != "" {
				data = []byte(tt.raw)
			}
			path := writeManifestFile(t, data)
			err := Main(context.Background(), path, testPlugins, nil, nil)
			if !errors.Is(err, schemas.ErrInvalidJob) {
				t.Fatalf("error %v, want schemas.ErrInvalidJob", err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q lacks %q or the manifest's path", err, tt.wantMsg)
			}
			if _, err := os.Stat(result); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("result file written for an invalid manifest: %v", err)
			}
		})
	}
}

func TestMainReadsManifest(t *testing.T) {
	t.Parallel()
	err := Main(context.Background(), filepath.Join(t.TempDir(), "missing.json"), testPlugins, nil, nil)
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("error %v, want os.ErrNotExist", err)
	}
}

func TestMainResult(t *testing.T) {
	t.Parallel()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	set := func(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
	tests := []struct {
		name    string
		ctx     context.Context
		plugin  string // the test plugin's behaviour
		edit    func(map[string]any)
		wantIs  error
		want    schemas.JobResult
		wantOut []string
	}{
		{
			name:    "apply",
			plugin:  "echo",
			edit:    set("inputs", map[string]any{"a": "b"}),
			want:    schemas.JobResult{Outputs: map[string]any{"a": "b"}, Changed: true},
			wantOut: []string{"echo: create", "level=INFO msg=echoing install=inst-1 component=echo job=j-echo plugin=terraform"},
		},
		{
			name:    "update",
			plugin:  "echo",
			edit:    set("operation", schemas.OpUpdate),
			want:    schemas.JobResult{Changed: true},
			wantOut: []string{"echo: update"},
		},
		{
			name:    "delete",
			plugin:  "echo",
			edit:    set("operation", schemas.OpDelete),
			want:    schemas.JobResult{Changed: true},
			wantOut: []string{"echo: destroyed"},
		},
		{
			name:   "timeout",
			plugin: "wait",
			edit:   set("timeout", "50ms"),
			wantIs: context.DeadlineExceeded,
			want:   schemas.JobResult{Error: "timed out after 50ms: context deadline exceeded"},
		},
		{
			name:   "stopped",
			ctx:    canceled,
			plugin: "wait",
			wantIs: context.Canceled,
			want:   schemas.JobResult{Error: "stopped: context canceled"},
		},
		{
			name:   "unknown plugin",
			plugin: "echo",
			edit:   set("plugin", schemas.TypeHelm),
			wantIs: ErrUnknownPlugin,
			want:   schemas.JobResult{Error: `unknown plugin "helm" (this job process has: terraform)`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data, result := manifest(t, tt.plugin, tt.edit)
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			var out bytes.Buffer
			err := Main(ctx, writeManifestFile(t, data), testPlugins, oci.Layout{}, &out)
			if !errors.Is(err, tt.wantIs) {
				t.Fatalf("error %v, want %v", err, tt.wantIs)
			}
			got, rerr := readResult(result)
			if rerr != nil {
				t.Fatal(rerr)
			}
			want := tt.want
			want.APIVersion, want.Kind, want.Job = schemas.APIVersion, "JobResult", "j-"+tt.plugin
			if diff := cmp.Diff(&want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			for _, s := range tt.wantOut {
				if !strings.Contains(out.String(), s) {
					t.Errorf("output lacks %q:\n%s", s, out.String())
				}
			}
		})
	}
}

func TestMainStateDir(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "a", "b")
	var got reconciler.Env
	plugins := map[string]reconciler.Plugin{
		schemas.TypeTerraform: funcPlugin(func(_ context.Context, _ *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
			got = env
			_, err := os.Stat(env.StateDir)
			return nil, err
		}),
	}
	data, _ := manifest(t, "env", func(m map[string]any) { m["stateDir"] = state })
	arts := oci.Layout{Path: "/artifacts"}
	var out bytes.Buffer
	if err := Main(context.Background(), writeManifestFile(t, data), plugins, arts, &out); err != nil {
		t.Fatal(err)
	}
	if got.StateDir != state || got.Artifacts != arts || got.Log == nil || got.Logger == nil {
		t.Errorf("plugin got env %+v", got)
	}
}

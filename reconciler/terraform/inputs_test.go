package terraform

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/reconciler"
)

func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// TestExtractWritesFiles checks the variables file and the backend override
// that the inputs and extract steps leave in the module, without running
// terraform.
func TestExtractWritesFiles(t *testing.T) {
	secrets := map[string]string{
		"NUON_SECRET_DB_PASS": `p@ss"word`,
		"NUON_SECRET_TOKEN":   "tok-12345",
		"NUON_SECRET_EMPTY":   "",
	}
	tests := []struct {
		name   string
		inputs map[string]any
		want   string
	}{
		{
			name: "none",
			want: "{}\n",
		},
		{
			name: "plain values",
			inputs: map[string]any{
				"name":    "main",
				"port":    5432,
				"big":     int64(9007199254740993),
				"ratio":   0.25,
				"enabled": true,
				"nothing": nil,
				"tags":    map[string]string{"team": "data"},
				"zones":   []string{"a", "b"},
			},
			want: `{
  "big": 9007199254740993,
  "enabled": true,
  "name": "main",
  "nothing": null,
  "port": 5432,
  "ratio": 0.25,
  "tags": {
    "team": "data"
  },
  "zones": [
    "a",
    "b"
  ]
}
`,
		},
		{
			name: "secrets",
			inputs: map[string]any{
				"url":    "postgres://app:${secrets.db-pass}@db:5432/app",
				"token":  "${secrets.token}",
				"empty":  "${secrets.empty}",
				"nested": map[string]any{"list": []any{"${secrets.token}", "x"}},
				// Resolved by the agent before the job; left alone here.
				"vpc": "${components.network.outputs.vpc_id}",
			},
			want: `{
  "empty": "",
  "nested": {
    "list": [
      "tok-12345",
      "x"
    ]
  },
  "token": "tok-12345",
  "url": "postgres://app:p@ss\"word@db:5432/app",
  "vpc": "${components.network.outputs.vpc_id}"
}
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stateDir := t.TempDir()
			job := newJob("database", t.TempDir(), tt.inputs)
			r := &run{
				job:    job,
				env:    reconciler.Env{StateDir: stateDir, Artifacts: dirSource{}},
				lookup: lookupIn(secrets),
				out:    io.Discard,
				dir:    filepath.Join(stateDir, moduleDir),
				state:  filepath.Join(stateDir, stateFile),
			}
			// A file of an earlier module is gone after extraction.
			if err := os.MkdirAll(r.dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(r.dir, "old.tf"), nil, 0o600); err != nil {
				t.Fatal(err)
			}

			if err := r.resolveInputs(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := r.extract(t.Context()); err != nil {
				t.Fatal(err)
			}

			path := filepath.Join(r.dir, varFile)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(b)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", varFile, diff)
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("%s mode = %v (%v), want 0600", varFile, fi.Mode().Perm(), err)
			}
			if _, err := os.Stat(filepath.Join(r.dir, "old.tf")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("old.tf survived extraction: %v", err)
			}

			b, err = os.ReadFile(filepath.Join(r.dir, overrideFile))
			if err != nil {
				t.Fatal(err)
			}
			wantOverride := `{
  "terraform": {
    "backend": {
      "local": {
        "path": "` + r.state + `"
      }
    }
  }
}
`
			if diff := cmp.Diff(wantOverride, string(b)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", overrideFile, diff)
			}
		})
	}
}

func TestResolveInputsMissing(t *testing.T) {
	inputs := map[string]any{
		"a": "${secrets.one}",
		"b": map[string]any{"c": []any{"x-${secrets.two}"}},
		"d": "${secrets.present}",
	}
	_, _, err := resolveInputs(inputs, lookupIn(map[string]string{"NUON_SECRET_PRESENT": "present-value"}))
	if !errors.Is(err, reconciler.ErrSecretMissing) {
		t.Fatalf("resolveInputs error = %v, want reconciler.ErrSecretMissing", err)
	}
	want := "input a: secret missing: one (NUON_SECRET_ONE is not set)\n" +
		"input b.c[0]: secret missing: two (NUON_SECRET_TWO is not set)"
	if diff := cmp.Diff(want, err.Error()); diff != "" {
		t.Errorf("error (-want +got):\n%s", diff)
	}
}

package schemas

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestDecodeJobOperations checks what DecodeJob accepts of the read-only
// operations: a debug job needs a command, and only a debug job takes one.
func TestDecodeJobOperations(t *testing.T) {
	base := func(op string, debug *DebugRequest) []byte {
		b, err := json.Marshal(Job{
			APIVersion: APIVersion, Kind: KindJob, ID: "j1", Install: "acme", Component: "api", Operation: op,
			Plugin: TypeManifests, Version: "1.0.0", Generation: 1, Commit: strings.Repeat("a", 40),
			Debug: debug, Timeout: "1m", StateDir: "/s", ResultFile: "/r",
		})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name    string
		data    []byte
		wantErr string
	}{
		{"drift", base(OpDrift, nil), ""},
		{"health", base(OpHealth, nil), ""},
		{"debug", base(OpDebug, &DebugRequest{Command: []string{"get", "pods"}, MaxBytes: 100, Timeout: "10s"}), ""},
		{"debug without a request", base(OpDebug, nil), "a debug job has no debug.command"},
		{"debug without words", base(OpDebug, &DebugRequest{Command: []string{}}), "debug.command: must list at least one item"},
		{"debug request on an apply", base(OpCreate, &DebugRequest{Command: []string{"get", "pods"}}), "debug is set for a create job"},
		{"bad debug timeout", base(OpDebug, &DebugRequest{Command: []string{"events"}, Timeout: "0s"}), `debug.timeout "0s" is not a positive duration`},
		{"too many bytes", base(OpDebug, &DebugRequest{Command: []string{"events"}, MaxBytes: 1 << 30}), "maxBytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job, err := DecodeJob("manifest.json", tt.data)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if ReadOnly(job.Operation) != true {
					t.Errorf("ReadOnly(%q) = false", job.Operation)
				}
				return
			}
			if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want ErrInvalidJob with %q", err, tt.wantErr)
			}
		})
	}
	for _, op := range []string{OpCreate, OpUpdate, OpDelete} {
		if ReadOnly(op) {
			t.Errorf("ReadOnly(%q) = true", op)
		}
	}
}

func TestDefaults(t *testing.T) {
	var none *DriftSettings
	if none.EffectiveMode() != DriftReport || none.EffectiveSchedule().String() != "1h0m0s" {
		t.Errorf("nil drift settings: %s every %s", none.EffectiveMode(), none.EffectiveSchedule())
	}
	d := &DriftSettings{Mode: DriftCorrect, Schedule: "30m"}
	if d.EffectiveMode() != DriftCorrect || d.EffectiveSchedule().String() != "30m0s" {
		t.Errorf("drift settings: %s every %s", d.EffectiveMode(), d.EffectiveSchedule())
	}
	if (*DebugRequest)(nil).EffectiveMaxBytes() != DefaultDebugMaxBytes || (&DebugRequest{MaxBytes: 10}).EffectiveMaxBytes() != 10 {
		t.Error("debug max bytes")
	}
	no := false
	ops := &Operations{Debug: &no}
	for kind, want := range map[string]bool{"logs": true, "debug": false, "drift": true, "shell": false} {
		if got := ops.Allows(kind); got != want {
			t.Errorf("Allows(%q) = %v, want %v", kind, got, want)
		}
	}
	if !(*Operations)(nil).Allows("debug") {
		t.Error("no operations setting must allow debug")
	}
}

// TestJobPluginImageMediaType: a job's plugin-image artifact is an image
// manifest, never an index or anything else; other artifacts are not held
// to it.
func TestJobPluginImageMediaType(t *testing.T) {
	d := "sha256:" + strings.Repeat("b", 64)
	for _, tt := range []struct {
		name, artifact, mediaType string
		ok                        bool
	}{
		{"an OCI image", PluginImageArtifactName, "application/vnd.oci.image.manifest.v1+json", true},
		{"a Docker image", PluginImageArtifactName, "application/vnd.docker.distribution.manifest.v2+json", true},
		{"no media type", PluginImageArtifactName, "", true},
		{"an index", PluginImageArtifactName, "application/vnd.oci.image.index.v1+json", false},
		{"a plugin artifact as its image", PluginImageArtifactName, "application/vnd.nuon.plugin.config.v1+json", false},
		{"another artifact", PluginArtifactName, "application/vnd.oci.image.index.v1+json", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(Job{
				APIVersion: APIVersion, Kind: KindJob, ID: "j1", Install: "acme", Component: "dns", Operation: OpUpdate,
				Plugin: TypeManifests, Version: "1.0.0", Generation: 1, Commit: strings.Repeat("a", 40),
				Artifacts: []Artifact{{Name: tt.artifact, Local: "registry.example/acme/p@" + d, Digest: d, MediaType: tt.mediaType}},
				Timeout:   "1m", StateDir: "/s", ResultFile: "/r",
			})
			if err != nil {
				t.Fatal(err)
			}
			err = ValidateJSON(SchemaJob, b)
			if (err == nil) != tt.ok {
				t.Errorf("ValidateJSON = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

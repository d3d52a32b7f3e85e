package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/schemas"
)

func TestJobArtifact(t *testing.T) {
	module := schemas.Artifact{Name: "module", Digest: "sha256:aa"}
	other := schemas.Artifact{Name: "other", Digest: "sha256:bb"}
	tests := []struct {
		name    string
		arts    []schemas.Artifact
		want    schemas.Artifact
		wantErr string
	}{
		{name: "named", arts: []schemas.Artifact{other, module}, want: module},
		{name: "only one, other name", arts: []schemas.Artifact{other}, want: other},
		{name: "none", wantErr: `no "module" artifact among 0: []`},
		{name: "several, none named", arts: []schemas.Artifact{other, other}, wantErr: `no "module" artifact among 2: [other other]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := JobArtifact(&schemas.Job{Artifacts: tt.arts}, "module")
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("JobArtifact error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("JobArtifact (-want +got):\n%s", diff)
			}
		})
	}
}

// dirSource writes one file, named after the artifact, or fails with err.
type dirSource struct{ err error }

func (s dirSource) Extract(_ context.Context, a schemas.Artifact, dir string) error {
	if s.err != nil {
		return s.err
	}
	return os.WriteFile(filepath.Join(dir, a.Name+".txt"), []byte(a.Digest), 0o600)
}

var _ ArtifactSource = dirSource{}

func TestExtractFresh(t *testing.T) {
	a := schemas.Artifact{Name: "chart", Digest: "sha256:cc"}
	broken := errors.New("digest mismatch")
	tests := []struct {
		name      string
		src       ArtifactSource
		wantFiles []string
		wantIs    error
		wantErr   string
	}{
		{name: "replaces the directory", src: dirSource{}, wantFiles: []string{"chart.txt"}},
		{name: "no source", wantIs: ErrNoArtifactSource, wantErr: "artifact chart sha256:cc: no artifact source"},
		{name: "extract fails", src: dirSource{err: broken}, wantIs: broken, wantErr: "artifact chart sha256:cc: digest mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "chart")
			if err := os.MkdirAll(filepath.Join(dir, "stale"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "stale", "old.yaml"), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			err := ExtractFresh(t.Context(), Env{Artifacts: tt.src}, a, dir)
			if tt.wantErr != "" {
				if !errors.Is(err, tt.wantIs) || err.Error() != tt.wantErr {
					t.Fatalf("ExtractFresh error = %v, want %q wrapping %v", err, tt.wantErr, tt.wantIs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if perm := fi.Mode().Perm(); perm != 0o700 {
				t.Errorf("dir mode = %v, want 0700", perm)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range entries {
				got = append(got, e.Name())
			}
			if diff := cmp.Diff(tt.wantFiles, got); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExtractFreshCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	src := ctxSource{}
	err := ExtractFresh(ctx, Env{Artifacts: src}, schemas.Artifact{Name: "m", Digest: "d"}, t.TempDir())
	if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "artifact m d: ") {
		t.Errorf("ExtractFresh = %v, want context.Canceled under artifact m d", err)
	}
}

// ctxSource fails once its context is done.
type ctxSource struct{}

func (ctxSource) Extract(ctx context.Context, _ schemas.Artifact, _ string) error { return ctx.Err() }

func TestTypedNumbers(t *testing.T) {
	in := map[string]any{"a": json.Number("3"), "b": []any{json.Number("1.5"), "x"}, "c": map[string]any{"d": json.Number("9007199254740993")}}
	got := TypedNumbers(in)
	want := map[string]any{"a": int64(3), "b": []any{1.5, "x"}, "c": map[string]any{"d": int64(9007199254740993)}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("TypedNumbers (-want +got):\n%s", diff)
	}
}

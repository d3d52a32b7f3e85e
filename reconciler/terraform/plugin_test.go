package terraform

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"nuon.dev/nuon/internal/testenv"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// realPlugin is a Plugin that runs the real terraform with the offline
// providers; its secrets come from secrets.
func realPlugin(t *testing.T, secrets map[string]string) *Plugin {
	t.Helper()
	cfg := testenv.TerraformConfig(t)
	if _, err := exec.LookPath(DefaultBinary); err != nil {
		t.Fatalf("the terraform tests need terraform on PATH: %v", err)
	}
	return &Plugin{
		CLIConfig: cfg,
		LookupEnv: func(k string) (string, bool) { v, ok := secrets[k]; return v, ok },
	}
}

// dirSource is an ArtifactSource whose artifacts are directories: it copies
// the one an artifact's Local reference names.
type dirSource struct{}

func (dirSource) Extract(ctx context.Context, a schemas.Artifact, dir string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return os.CopyFS(dir, os.DirFS(a.Local))
}

// fixture is a sample app module in fixtures/modules.
func fixture(name string) string {
	return filepath.Join("..", "..", "fixtures", "modules", name)
}

// testModule is a test-only module in testdata/modules.
func testModule(name string) string {
	return filepath.Join("testdata", "modules", name)
}

// newJob is a job applying the module in dir as component.
func newJob(component, dir string, inputs map[string]any) *schemas.Job {
	return &schemas.Job{
		APIVersion: schemas.APIVersion,
		Kind:       schemas.KindJob,
		ID:         component + "-1",
		Install:    "inst-1",
		Component:  component,
		Operation:  schemas.OpCreate,
		Plugin:     schemas.TypeTerraform,
		Artifacts: []schemas.Artifact{{
			Name:   ModuleArtifact,
			Local:  dir,
			Digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000",
		}},
		Inputs: inputs,
	}
}

// testEnv is a job's environment around stateDir; the plugin's log and
// step timings are recorded.
type testEnv struct {
	reconciler.Env
	log   *bytes.Buffer
	steps *stepRecorder
}

func newEnv(stateDir string) testEnv {
	log := &bytes.Buffer{}
	steps := &stepRecorder{}
	return testEnv{
		Env: reconciler.Env{
			StateDir:  stateDir,
			Artifacts: dirSource{},
			Log:       log,
			Logger:    slog.New(steps),
		},
		log:   log,
		steps: steps,
	}
}

// stepRecorder is a slog handler that keeps the durations of the plugin's
// steps.
type stepRecorder struct {
	mu    sync.Mutex
	times map[string][]time.Duration
}

func (s *stepRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (s *stepRecorder) WithAttrs([]slog.Attr) slog.Handler       { return s }
func (s *stepRecorder) WithGroup(string) slog.Handler            { return s }

func (s *stepRecorder) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message != "terraform step" {
		return nil
	}
	var name string
	var d time.Duration
	rec.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "step":
			name = a.Value.String()
		case "duration":
			d = a.Value.Duration()
		}
		return true
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.times == nil {
		s.times = map[string][]time.Duration{}
	}
	s.times[name] = append(s.times[name], d)
	return nil
}

func (s *stepRecorder) merge(o *stepRecorder) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.times == nil {
		s.times = map[string][]time.Duration{}
	}
	for k, v := range o.times {
		s.times[k] = append(s.times[k], v...)
	}
}

func (s *stepRecorder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, name := range []string{"inputs", "extract", "init", "plan", "apply", "output", "destroy"} {
		ds := s.times[name]
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		fmt.Fprintf(&b, "%s: n=%d min=%v mean=%v max=%v\n", name, len(ds),
			ds[0].Round(time.Millisecond), (sum / time.Duration(len(ds))).Round(time.Millisecond),
			ds[len(ds)-1].Round(time.Millisecond))
	}
	return b.String()
}

// tfState is the part of a state file the tests look at.
type tfState struct {
	Resources []json.RawMessage `json:"resources"`
	Outputs   map[string]struct {
		Value     any  `json:"value"`
		Sensitive bool `json:"sensitive"`
	} `json:"outputs"`
}

func readState(t *testing.T, stateDir string) tfState {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, stateFile))
	if err != nil {
		t.Fatal(err)
	}
	var st tfState
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestStartErrors(t *testing.T) {
	job := newJob("network", fixture("network"), nil)
	tests := []struct {
		name    string
		plugin  Plugin
		job     *schemas.Job
		env     reconciler.Env
		wantErr string
	}{
		{
			name:    "no job",
			env:     reconciler.Env{StateDir: t.TempDir()},
			wantErr: "terraform: no job",
		},
		{
			name:    "no component",
			job:     &schemas.Job{ID: "j1"},
			env:     reconciler.Env{StateDir: t.TempDir()},
			wantErr: "terraform job j1: no component",
		},
		{
			name:    "no state directory",
			job:     job,
			wantErr: "terraform network: no state directory",
		},
		{
			name:    "no binary",
			plugin:  Plugin{Binary: filepath.Join(t.TempDir(), "terraform")},
			job:     job,
			env:     reconciler.Env{StateDir: t.TempDir(), Artifacts: dirSource{}},
			wantErr: "terraform network: exec: ",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.plugin.Apply(t.Context(), tt.job, tt.env)
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Fatalf("Apply error = %v, want prefix %q", err, tt.wantErr)
			}
		})
	}
}

func TestEnviron(t *testing.T) {
	t.Setenv("NUON_SECRET_TOKEN", "s3cr3t")
	t.Setenv("TF_LOG", "trace")
	t.Setenv("TF_VAR_name", "from-the-environment")
	t.Setenv("CHECKPOINT_DISABLE", "")
	t.Setenv("TF_CLI_CONFIG_FILE", "/from/the/environment")
	t.Setenv("NUON_TEST_KEPT", "kept")

	tests := []struct {
		name   string
		plugin Plugin
		want   map[string]string // "" means absent
	}{
		{
			name: "defaults",
			want: map[string]string{
				"NUON_SECRET_TOKEN":  "",
				"TF_LOG":             "",
				"TF_VAR_name":        "",
				"CHECKPOINT_DISABLE": "1",
				"TF_CLI_CONFIG_FILE": "/from/the/environment",
				"NUON_TEST_KEPT":     "kept",
			},
		},
		{
			name:   "cli config",
			plugin: Plugin{CLIConfig: "/etc/terraformrc"},
			want:   map[string]string{"TF_CLI_CONFIG_FILE": "/etc/terraformrc"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := tt.plugin.environ()
			for k, want := range tt.want {
				if got := env[k]; got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// The test binary doubles as a plugin: run with the argument
// serve-notes it serves the notes plugin on its stdin and stdout, in its
// own process, as `nuon plugin serve` serves the built-ins.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "serve-notes" {
		s := &Server{Manifest: notesManifest(), Plugin: notes{}}
		os.Exit(s.Serve(context.Background(), os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func notesManifest() schemas.PluginManifest {
	return schemas.PluginManifest{APIVersion: schemas.APIVersion, Kind: schemas.KindPluginManifest,
		Name: "notes", Version: "0.1.0", Protocols: []int{1},
		Capabilities: schemas.PluginCapabilities{WritableState: true}}
}

// notes is a plugin whose component is a file, note.txt, in the state
// directory, with the job's input text as its content.
type notes struct{}

var (
	_ reconciler.DriftChecker  = notes{}
	_ reconciler.HealthChecker = notes{}
)

func notePath(env reconciler.Env) string { return filepath.Join(env.StateDir, "note.txt") }

func (notes) Apply(_ context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	text, _ := job.Inputs["text"].(string)
	if text == "" {
		return nil, errors.New("input text is empty")
	}
	old, _ := os.ReadFile(notePath(env))
	if string(old) == text {
		return &schemas.JobResult{Outputs: map[string]any{"bytes": len(text)}}, nil
	}
	env.Logger.Info("writing note", "bytes", len(text))
	return &schemas.JobResult{Outputs: map[string]any{"bytes": len(text)}, Changed: true},
		os.WriteFile(notePath(env), []byte(text), 0o600)
}

func (notes) Destroy(_ context.Context, _ *schemas.Job, env reconciler.Env) error {
	err := os.Remove(notePath(env))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

func (notes) Drift(_ context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	text, _ := job.Inputs["text"].(string)
	got, err := os.ReadFile(notePath(env))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return &schemas.JobResult{Drift: []schemas.ResourceDrift{{Name: "note.txt", Action: schemas.DriftMissing}}}, nil
	case err != nil:
		return nil, err
	case string(got) != text:
		return &schemas.JobResult{Drift: []schemas.ResourceDrift{{Name: "note.txt", Action: schemas.DriftChanged, Fields: []string{"content"}}}}, nil
	}
	return &schemas.JobResult{}, nil
}

func (notes) Health(_ context.Context, _ *schemas.Job, env reconciler.Env) (*schemas.Health, error) {
	if _, err := os.Stat(notePath(env)); err != nil {
		return &schemas.Health{Status: schemas.HealthFailed, Message: "no note"}, nil
	}
	return &schemas.Health{Status: schemas.HealthReady}, nil
}

// testJob is a valid job manifest for plugin name.
func testJob(t testing.TB, name, op string, inputs map[string]any) *schemas.Job {
	dir := t.TempDir()
	return &schemas.Job{APIVersion: schemas.APIVersion, Kind: schemas.KindJob, ID: "note-" + op + "-1",
		Install: "acme", Component: "note", Operation: op, Plugin: name, Version: "1.0.0",
		Generation: 1, Commit: "0123456789abcdef0123456789abcdef01234567", Inputs: inputs,
		Timeout: "1m", StateDir: filepath.Join(dir, "state"), ResultFile: filepath.Join(dir, "result.json")}
}

package jobrun

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// File names of a job directory, as the runners lay it out.
const (
	ManifestFile = "manifest.json"
	ResultFile   = "result.json"
)

// testPlugins are the test job process's plugins. A manifest names a real
// component type, so the test plugin is the "terraform" one and it behaves
// as its job's component is named.
var testPlugins = map[string]reconciler.Plugin{schemas.TypeTerraform: byComponent{
	"echo": echoPlugin{},
	"wait": funcPlugin(func(ctx context.Context, _ *schemas.Job, _ reconciler.Env) (*schemas.JobResult, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Minute):
			return &schemas.JobResult{}, nil
		}
	}),
}}

// byComponent hands a job to the plugin named by the job's component.
type byComponent map[string]reconciler.Plugin

func (b byComponent) Apply(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	p, ok := b[job.Component]
	if !ok {
		return nil, fmt.Errorf("no test plugin %q", job.Component)
	}
	return p.Apply(ctx, job, env)
}

func (b byComponent) Destroy(ctx context.Context, job *schemas.Job, env reconciler.Env) error {
	p, ok := b[job.Component]
	if !ok {
		return fmt.Errorf("no test plugin %q", job.Component)
	}
	return p.Destroy(ctx, job, env)
}

// echoPlugin returns its inputs as outputs and marks "token" sensitive.
type echoPlugin struct{}

func (echoPlugin) Apply(_ context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	fmt.Fprintf(env.Log, "echo: %s\n", job.Operation)
	env.Logger.Info("echoing", "inputs", len(job.Inputs))
	res := &schemas.JobResult{Outputs: job.Inputs, Changed: true}
	if _, ok := job.Inputs["token"]; ok {
		res.Sensitive = []string{"token"}
	}
	return res, nil
}

func (echoPlugin) Destroy(_ context.Context, _ *schemas.Job, env reconciler.Env) error {
	fmt.Fprintln(env.Log, "echo: destroyed")
	return os.WriteFile(filepath.Join(env.StateDir, "destroyed"), nil, 0o600)
}

// funcPlugin is a plugin whose Apply and Destroy are one function.
type funcPlugin func(context.Context, *schemas.Job, reconciler.Env) (*schemas.JobResult, error)

func (f funcPlugin) Apply(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	return f(ctx, job, env)
}

func (f funcPlugin) Destroy(ctx context.Context, job *schemas.Job, env reconciler.Env) error {
	_, err := f(ctx, job, env)
	return err
}

// testJob returns a valid job for the test plugin behaviour, with its own
// state directory.
func testJob(t *testing.T, behaviour string) *schemas.Job {
	return &schemas.Job{
		APIVersion: schemas.APIVersion,
		Kind:       schemas.KindJob,
		ID:         "j-" + behaviour,
		Install:    "inst-1",
		Component:  behaviour,
		Operation:  schemas.OpCreate,
		Plugin:     schemas.TypeTerraform,
		Version:    "1.0.0",
		Generation: 1,
		Commit:     strings.Repeat("a", 40),
		Timeout:    "30s",
		StateDir:   filepath.Join(t.TempDir(), "state"),
	}
}

// readResult reads a result file the job wrote.
func readResult(path string) (*schemas.JobResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res schemas.JobResult
	return &res, json.Unmarshal(b, &res)
}

// dirArtifacts serves the fixture modules by repository name (the last
// element of the artifact's local reference), for tests of a plugin rather
// than of the artifact path: it checks no digest.
type dirArtifacts struct{ root string }

func (d dirArtifacts) Extract(_ context.Context, a schemas.Artifact, dir string) error {
	repo, _, _ := strings.Cut(a.Local, "@")
	return os.CopyFS(dir, os.DirFS(filepath.Join(d.root, path.Base(repo))))
}

// digest is the digest the tests' artifacts claim; dirArtifacts checks none.
const digest = "sha256:0000000000000000000000000000000000000000000000000000000000000000"

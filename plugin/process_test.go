package plugin

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

func notesProcess(t testing.TB, granted schemas.PluginCapabilities) *Process {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &Process{Runner: Runner{Path: exe, Args: []string{"serve-notes"}}, Granted: granted}
}

// TestProcessRoundTrip drives the notes plugin, in its own process,
// through every operation it has.
func TestProcessRoundTrip(t *testing.T) {
	ctx := context.Background()
	p := notesProcess(t, schemas.PluginCapabilities{WritableState: true})
	job := testJob(t, "notes", schemas.OpUpdate, map[string]any{"text": "hello"})
	if err := os.MkdirAll(job.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	env := reconciler.Env{StateDir: job.StateDir, Log: &log}

	m, proto, err := p.Handshake(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if proto != 1 || m.Name != "notes" {
		t.Errorf("handshake = %s protocol %d", m.Name, proto)
	}
	if diff := cmp.Diff([]string{"apply", "destroy", "drift", "health"}, m.Operations); diff != "" {
		t.Errorf("operations (-want +got):\n%s", diff)
	}

	res, err := p.Drift(ctx, job, env)
	if err != nil || len(res.Drift) != 1 || res.Drift[0].Action != schemas.DriftMissing {
		t.Fatalf("drift before apply = %+v, %v", res, err)
	}
	res, err = p.Apply(ctx, job, env)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Changed || res.Outputs["bytes"] != float64(5) {
		t.Errorf("apply = %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(job.StateDir, "note.txt")); string(b) != "hello" {
		t.Errorf("note.txt = %q", b)
	}
	if !strings.Contains(log.String(), "writing note") {
		t.Errorf("the plugin's stderr did not reach the job's log: %q", log.String())
	}
	res, err = p.Apply(ctx, job, env)
	if err != nil || res.Changed {
		t.Errorf("second apply = %+v, %v; want unchanged", res, err)
	}
	h, err := p.Health(ctx, job, env)
	if err != nil || h.Status != schemas.HealthReady {
		t.Errorf("health = %+v, %v", h, err)
	}
	if err := p.Destroy(ctx, job, env); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(job.StateDir, "note.txt")); !os.IsNotExist(err) {
		t.Errorf("note.txt after destroy: %v", err)
	}
	// A failure inside the plugin comes back as an *Error with the
	// plugin's message.
	bad := testJob(t, "notes", schemas.OpUpdate, map[string]any{"text": ""})
	_, err = p.Apply(ctx, bad, reconciler.Env{StateDir: job.StateDir, Log: &log})
	var pe *Error
	if !errors.As(err, &pe) || pe.Code != schemas.PluginFailed || !strings.Contains(pe.Message, "input text is empty") || pe.Exit != ExitFailed {
		t.Errorf("apply of an empty note = %v", err)
	}
	// Plan and debug are not declared: refused before the plugin runs.
	if _, err := p.Plan(ctx, job, env); !errors.Is(err, ErrUnsupported) {
		t.Errorf("plan = %v, want ErrUnsupported", err)
	}
}

// TestProcessWithoutWritableState: a plugin not granted writableState
// writes to a state directory of its own, gone after the job, and is
// refused outright when its manifest says it needs one.
func TestProcessWithoutWritableState(t *testing.T) {
	ctx := context.Background()
	p := notesProcess(t, schemas.PluginCapabilities{})
	job := testJob(t, "notes", schemas.OpUpdate, map[string]any{"text": "hello"})
	_, err := p.Apply(ctx, job, reconciler.Env{StateDir: job.StateDir})
	if !errors.Is(err, ErrNotGranted) || !strings.Contains(err.Error(), "writableState") {
		t.Fatalf("apply = %v, want ErrNotGranted naming writableState", err)
	}
	if _, err := os.Stat(job.StateDir); !os.IsNotExist(err) {
		t.Errorf("state directory touched by a refused plugin: %v", err)
	}
}

// BenchmarkProcess measures what a small Go plugin (the test binary
// serving notes) costs behind the protocol, handshake excluded: one
// process per operation, with the job's network and with a network
// namespace of its own, against the same call in process.
func BenchmarkProcess(b *testing.B) {
	ctx := context.Background()
	job := testJob(b, "notes", schemas.OpHealth, map[string]any{"text": "hello"})
	env := reconciler.Env{StateDir: job.StateDir}
	if err := os.MkdirAll(job.StateDir, 0o700); err != nil {
		b.Fatal(err)
	}
	b.Run("in-process", func(b *testing.B) {
		for b.Loop() {
			if _, err := (notes{}).Health(ctx, job, env); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, bc := range []struct {
		name    string
		granted schemas.PluginCapabilities
	}{
		{"process", schemas.PluginCapabilities{WritableState: true, Network: true}},
		{"process-own-network", schemas.PluginCapabilities{WritableState: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := notesProcess(b, bc.granted)
			if _, _, err := p.Handshake(ctx); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := p.Health(ctx, job, env); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package plugin

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nuon.dev/nuon/plugin/exchange"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// TestExchange runs the notes plugin as the image form does, in three
// steps that share only files: Prepare writes the request, the executor
// (exchange.Exec) runs the plugin on it, and Exchanged reads the answer as
// Do reads a plugin's stdout; an exchange a plugin forged, cut or never
// finished fails the job with why, and a refusal reaches it.
func TestExchange(t *testing.T) {
	ctx := context.Background()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m := notesManifest()
	m.Operations = Operations(notes{})
	job := testJob(t, "notes", schemas.OpUpdate, map[string]any{"text": "hello"})
	state := t.TempDir()

	// run prepares, executes argv and reads back; edit changes the out
	// directory between the plugin and the reading.
	run := func(t *testing.T, granted schemas.PluginCapabilities, argv []string, edit func(out string)) (*schemas.JobResult, string, error) {
		in, out := t.TempDir(), t.TempDir()
		p := &Process{Manifest: &m, Granted: granted}
		if err := p.Prepare(ctx, job, reconciler.Env{}, in, ContainerPaths{In: in, State: state, Work: t.TempDir()}); err != nil {
			return nil, "", err
		}
		e := exchange.Exec{In: in, Out: out, Argv: argv}
		if err := e.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(out)
		}
		q, err := Exchanged(in, out)
		if err != nil {
			return nil, "", err
		}
		var log bytes.Buffer
		res, err := q.Apply(ctx, job, reconciler.Env{Log: &log})
		return res, log.String(), err
	}
	serve := []string{exe, "serve-notes"}
	res, _, err := run(t, schemas.PluginCapabilities{WritableState: true}, serve, nil)
	if err != nil || !res.Changed || res.Outputs["bytes"] != float64(5) {
		t.Fatalf("apply through the exchange = %+v, %v", res, err)
	}
	if b, _ := os.ReadFile(filepath.Join(state, "note.txt")); string(b) != "hello" {
		t.Errorf("the note: %q", b)
	}

	write := func(name, data string) func(string) {
		return func(out string) {
			if err := os.WriteFile(filepath.Join(out, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tt := range []struct {
		name    string
		granted schemas.PluginCapabilities
		argv    []string
		edit    func(string)
		is      error
		want    string
	}{
		{"not granted what it needs", schemas.PluginCapabilities{}, serve, nil, ErrNotGranted, "writableState"},
		{"garbage", schemas.PluginCapabilities{WritableState: true}, serve, write(exchange.Response, "not json"), ErrProtocol, ""},
		{"never finished", schemas.PluginCapabilities{WritableState: true}, serve, func(out string) { os.Remove(filepath.Join(out, exchange.Exit)) }, ErrProtocol, "without an exit"},
		{"too much", schemas.PluginCapabilities{WritableState: true}, []string{"/bin/sh", "-c", "head -c 17000000 /dev/zero"}, nil, ErrTooLarge, "more than"},
		{"exit 1, no response", schemas.PluginCapabilities{WritableState: true}, []string{"/bin/sh", "-c", "exit 1"}, nil, ErrProtocol, "exited 1"},
		{"a forged ending", schemas.PluginCapabilities{WritableState: true}, serve, write(exchange.Exit, "99999999999"), ErrProtocol, "ended by"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := run(t, tt.granted, tt.argv, tt.edit)
			if err == nil || !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("= %v; want %v saying %q", err, tt.is, tt.want)
			}
		})
	}
}

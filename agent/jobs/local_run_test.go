package jobs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/schemas"
)

func TestLocalRunSucceeds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		plugin    string
		operation string
		inputs    map[string]any
		want      *schemas.JobResult
		wantLog   []string
	}{
		{
			name:   "outputs",
			plugin: "echo",
			inputs: map[string]any{"url": "https://api.example.com", "replicas": 2.0, "token": "s3cret"},
			want: &schemas.JobResult{
				Outputs:   map[string]any{"url": "https://api.example.com", "replicas": 2.0, "token": "s3cret"},
				Sensitive: []string{"token"},
				Changed:   true,
			},
			wantLog: []string{"echo: create", "msg=echoing", "job=j-echo", "msg=\"job succeeded\""},
		},
		{
			name:      "delete",
			plugin:    "echo",
			operation: schemas.OpDelete,
			want:      &schemas.JobResult{Changed: true},
			wantLog:   []string{"echo: destroyed"},
		},
		{
			name:    "stdout and stderr",
			plugin:  "noisy",
			want:    &schemas.JobResult{},
			wantLog: []string{"line on stdout", "line on stderr"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job := testJob(t, tt.plugin)
			job.Inputs = tt.inputs
			if tt.operation != "" {
				job.Operation = tt.operation
			}
			dir := filepath.Join(t.TempDir(), "job")
			var mirrored bytes.Buffer
			l := testRunner(t)
			l.Log = &mirrored

			got, err := l.Run(context.Background(), job, dir)
			if err != nil {
				t.Fatal(err)
			}
			want := *tt.want
			want.APIVersion, want.Kind, want.Job = schemas.APIVersion, "JobResult", job.ID
			if diff := cmp.Diff(&want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			log := readFile(t, filepath.Join(dir, LogFile))
			for _, s := range tt.wantLog {
				if !strings.Contains(log, s) {
					t.Errorf("log lacks %q:\n%s", s, log)
				}
			}
			if mirrored.String() != log {
				t.Errorf("Log got:\n%s\nwant what dir/log has:\n%s", mirrored.String(), log)
			}
			m, err := readManifest(filepath.Join(dir, ManifestFile))
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(dir, ResultFile); m.ResultFile != want {
				t.Errorf("manifest resultFile = %q, want %q", m.ResultFile, want)
			}
			if free, err := lockFree(dir); !free || err != nil {
				t.Errorf("lock free = %v, %v after Run", free, err)
			}
		})
	}
}

func TestLocalRunAppendsLog(t *testing.T) {
	t.Parallel()
	job := testJob(t, "noisy")
	dir := t.TempDir()
	l := testRunner(t)
	for range 2 {
		if _, err := l.Run(context.Background(), job, dir); err != nil {
			t.Fatal(err)
		}
	}
	log := readFile(t, filepath.Join(dir, LogFile))
	if n := strings.Count(log, "==> "); n != 2 {
		t.Errorf("log has %d run headers, want 2:\n%s", n, log)
	}
	if n := strings.Count(log, "line on stdout"); n != 2 {
		t.Errorf("log has output of %d runs, want 2:\n%s", n, log)
	}
}

func TestLocalRunFails(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		plugin     string
		edit       func(*schemas.Job)
		wantIs     error
		wantMsg    []string
		wantResult *schemas.JobResult
		noDir      bool
		command    []string
	}{
		{
			name:    "plugin error",
			plugin:  "fail",
			wantIs:  ErrJobFailed,
			wantMsg: []string{"job j-fail: job failed: bucket already exists"},
			wantResult: &schemas.JobResult{
				APIVersion: schemas.APIVersion, Kind: "JobResult", Job: "j-fail",
				Outputs: map[string]any{"partial": true}, Error: "bucket already exists",
			},
		},
		{
			name:    "crash without a result",
			plugin:  "crash",
			wantIs:  ErrJobFailed,
			wantMsg: []string{"exit status 3", "last lines of the log", "crashing hard"},
		},
		{
			name:    "panic",
			plugin:  "panic",
			wantIs:  ErrJobFailed,
			wantMsg: []string{"plugin terraform panicked: plugin bug"},
			wantResult: &schemas.JobResult{
				APIVersion: schemas.APIVersion, Kind: "JobResult", Job: "j-panic",
				Error: "plugin terraform panicked: plugin bug",
			},
		},
		{
			name:    "unknown plugin",
			plugin:  "echo",
			edit:    func(j *schemas.Job) { j.Plugin = schemas.TypeHelm },
			wantIs:  ErrJobFailed,
			wantMsg: []string{`job j-echo: job failed: unknown plugin "helm" (this job process has: terraform)`},
			wantResult: &schemas.JobResult{
				APIVersion: schemas.APIVersion, Kind: "JobResult", Job: "j-echo",
				Error: `unknown plugin "helm" (this job process has: terraform)`,
			},
		},
		{
			name:    "invalid job",
			plugin:  "echo",
			edit:    func(j *schemas.Job) { j.Operation = "upsert" },
			wantIs:  schemas.ErrInvalidJob,
			wantMsg: []string{`manifest.json:1:`, `operation: must be one of create, update, delete, drift, health or debug, not "upsert"`},
			noDir:   true,
		},
		{
			name:    "command not found",
			plugin:  "echo",
			command: []string{"/nonexistent/no-such-nuon", "job", "run"},
			wantIs:  os.ErrNotExist,
			wantMsg: []string{"no-such-nuon"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job := testJob(t, tt.plugin)
			if tt.edit != nil {
				tt.edit(job)
			}
			dir := filepath.Join(t.TempDir(), "job")
			l := testRunner(t)
			if tt.command != nil {
				l.Command = tt.command
			}
			got, err := l.Run(context.Background(), job, dir)
			if !errors.Is(err, tt.wantIs) {
				t.Fatalf("error %v, want one wrapping %v", err, tt.wantIs)
			}
			for _, s := range tt.wantMsg {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error lacks %q:\n%v", s, err)
				}
			}
			if diff := cmp.Diff(tt.wantResult, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if _, err := os.Stat(dir); tt.noDir != errors.Is(err, os.ErrNotExist) {
				t.Errorf("job directory: %v", err)
			}
		})
	}
}

func TestLocalRunCancelStopsGroup(t *testing.T) {
	t.Parallel()
	job := testJob(t, "sleep")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Cancel once the grandchild runs, or when waiting for it fails.
		awaitFile(filepath.Join(job.StateDir, "sleeper.pid"))
		cancel()
	}()
	dir := t.TempDir()
	start := time.Now()
	res, err := testRunner(t).Run(ctx, job, dir)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if errors.Is(err, ErrJobFailed) {
		t.Errorf("error %v wraps ErrJobFailed", err)
	}
	if res == nil || !strings.Contains(res.Error, "stopped: context canceled") {
		t.Errorf("result %+v, want one that says the job was stopped", res)
	}
	sleeper := pidIn(t, filepath.Join(job.StateDir, "sleeper.pid"))
	killAtEnd(t, sleeper)
	if !gone(sleeper) {
		t.Errorf("grandchild %d still runs after Run returned", sleeper)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Run took %s to stop the job", d)
	}
}

func TestLocalRunTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		plugin  string
		timeout string
		wantMsg string
	}{
		// The job process honours its own deadline and reports it.
		{"job deadline", "sleep", "300ms", "timed out after 300ms"},
		// The job process ignores it: the runner stops it with SIGTERM, and
		// SIGKILL once KillGrace is over.
		{"runner deadline", "stubborn", "200ms", "timed out after 200ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job := testJob(t, tt.plugin)
			job.Timeout = tt.timeout
			start := time.Now()
			_, err := testRunner(t).Run(context.Background(), job, t.TempDir())
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrJobFailed) {
				t.Fatalf("error %v, want context.DeadlineExceeded and ErrJobFailed", err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q lacks %q", err, tt.wantMsg)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("Run took %s", d)
			}
		})
	}
}

func TestLocalRunStopsLeftovers(t *testing.T) {
	t.Parallel()
	job := testJob(t, "orphan")
	dir := t.TempDir()
	if _, err := testRunner(t).Run(context.Background(), job, dir); err != nil {
		t.Fatal(err)
	}
	sleeper := pidIn(t, filepath.Join(job.StateDir, "sleeper.pid"))
	killAtEnd(t, sleeper)
	if !gone(sleeper) {
		t.Errorf("grandchild %d left by a finished job still runs", sleeper)
	}
	if free, err := lockFree(dir); !free || err != nil {
		t.Errorf("lock free = %v, %v after Run", free, err)
	}
}

func TestLocalRunCanceledBeforeStart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := filepath.Join(t.TempDir(), "job")
	if _, err := testRunner(t).Run(ctx, testJob(t, "echo"), dir); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("job directory exists: %v", err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

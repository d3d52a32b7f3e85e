package jobs

import (
	"context"
	"errors"
	"nuon.dev/nuon/internal/atomicfile"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/schemas"
)

// TestRecoverAfterAgentDies starts a job from a separate agent process,
// kills that agent with SIGKILL while the job runs, and recovers the job
// from this process as a restarted agent would.
func TestRecoverAfterAgentDies(t *testing.T) {
	t.Parallel()
	job := testJob(t, "wait")
	dir := t.TempDir()
	if err := atomicfile.WriteJSON(filepath.Join(dir, "job.json"), job); err != nil {
		t.Fatal(err)
	}
	agent := exec.Command(os.Args[0], "-test.run=^$")
	agent.Env = append(os.Environ(), envAgent+"="+dir, "GORACE=atexit_sleep_ms=0")
	agent.Stderr = t.Output()
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	jobPid := pidIn(t, filepath.Join(job.StateDir, "started"))
	killAtEnd(t, jobPid)
	if err := agent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := agent.Wait(); err == nil {
		t.Fatal("agent exited normally; want it killed")
	}
	if gone(jobPid) {
		t.Fatal("job process died with its agent")
	}

	l := testRunner(t)
	if _, err := l.Run(context.Background(), job, dir); !errors.Is(err, ErrRunning) {
		t.Fatalf("Run while the job's process lives: error %v, want ErrRunning", err)
	}

	type outcome struct {
		res *schemas.JobResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := l.Recover(context.Background(), dir)
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		t.Fatalf("Recover returned (%+v, %v) while the job runs", o.res, o.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := os.WriteFile(filepath.Join(job.StateDir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-done:
		if o.err != nil {
			t.Fatal(o.err)
		}
		want := &schemas.JobResult{APIVersion: schemas.APIVersion, Kind: "JobResult", Job: job.ID, Outputs: map[string]any{"waited": true}}
		if diff := cmp.Diff(want, o.res); diff != "" {
			t.Errorf("result (-want +got):\n%s", diff)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Recover did not return after the job ended")
	}
}

func TestRecoverWithoutProcess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string)
		want    *schemas.JobResult
		wantIs  error
		wantMsg string
	}{
		{
			name:   "never started",
			setup:  func(*testing.T, string) {},
			wantIs: ErrNotFinished,
		},
		{
			name: "no directory",
			setup: func(t *testing.T, dir string) {
				if err := os.Remove(dir); err != nil {
					t.Fatal(err)
				}
			},
			wantIs: ErrNotFinished,
		},
		{
			name: "agent died before the manifest",
			setup: func(t *testing.T, dir string) {
				f, err := createLock(dir)
				if err != nil {
					t.Fatal(err)
				}
				f.Close()
			},
			wantIs: ErrNotFinished,
		},
		{
			name:   "crashed",
			setup:  runJob("crash"),
			wantIs: ErrNotFinished,
		},
		{
			name:  "succeeded",
			setup: runJob("echo"),
			want:  &schemas.JobResult{APIVersion: schemas.APIVersion, Kind: "JobResult", Job: "j-echo", Changed: true},
		},
		{
			name:    "failed",
			setup:   runJob("fail"),
			want:    &schemas.JobResult{APIVersion: schemas.APIVersion, Kind: "JobResult", Job: "j-fail", Outputs: map[string]any{"partial": true}, Error: "bucket already exists"},
			wantIs:  ErrJobFailed,
			wantMsg: "job j-fail: job failed: bucket already exists",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			tt.setup(t, dir)
			start := time.Now()
			got, err := testRunner(t).Recover(context.Background(), dir)
			if d := time.Since(start); d > time.Second {
				t.Errorf("Recover took %s", d)
			}
			if !errors.Is(err, tt.wantIs) {
				t.Fatalf("error %v, want %v", err, tt.wantIs)
			}
			if tt.wantMsg != "" && err.Error() != tt.wantMsg {
				t.Errorf("error %q, want %q", err, tt.wantMsg)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
		})
	}
}

// runJob runs a job of plugin in dir, whatever its outcome.
func runJob(plugin string) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		testRunner(t).Run(context.Background(), testJob(t, plugin), dir)
	}
}

func TestRecoverHonoursContext(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	held, err := createLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := testRunner(t).Recover(ctx, dir); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want context.DeadlineExceeded", err)
	}
}

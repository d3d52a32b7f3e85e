package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"nuon.dev/nuon/internal/atomicfile"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"nuon.dev/nuon/schemas"
)

// Run executes job as a child process and waits for it; see the package
// documentation for the files it keeps in dir and the lock it holds. It
// returns ErrRunning without starting anything while a process of an
// earlier run of the job is still alive: call Recover for that.
//
// A job that failed returns its result, if it wrote one, and an error
// wrapping ErrJobFailed; one that hit its timeout also wraps
// context.DeadlineExceeded. When ctx ends first, the job's processes are
// stopped and the error wraps ctx.Err().
func (l *Local) Run(ctx context.Context, job *schemas.Job, dir string) (*schemas.JobResult, error) {
	return l.RunEnv(ctx, job, dir, nil)
}

// RunEnv is Run with env added to the job process's environment.
func (l *Local) RunEnv(ctx context.Context, job *schemas.Job, dir string, env []string) (*schemas.JobResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("job %s: %w", job.ID, err)
	}
	r, err := l.newRun(job, dir)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", job.ID, err)
	}
	r.env = env
	defer r.close()
	for _, step := range []func() error{r.lockDir, r.writeManifest, r.openLog, r.start} {
		if err := step(); err != nil {
			return nil, fmt.Errorf("job %s: %w", job.ID, err)
		}
	}
	r.wait(ctx)
	leftover := r.release()
	r.drainLog()
	res, err := r.outcome()
	if leftover != nil {
		err = errors.Join(err, fmt.Errorf("job %s: %w", job.ID, leftover))
	}
	return res, err
}

// run is one Run of one job: what its steps share.
type run struct {
	l       *Local
	job     schemas.Job
	dir     string
	timeout time.Duration
	logger  *slog.Logger
	// env is the job's extra environment (RunEnv).
	env []string

	lock     *os.File
	log      *os.File
	logStart int64
	mirror   *mirror

	cmd     *exec.Cmd
	started time.Time
	// exited is closed once the job process has exited; waitErr and ended
	// are set before.
	exited  chan struct{}
	waitErr error
	ended   time.Time
	// cause is why the runner stopped the job, if it did: ctx's error, or
	// context.DeadlineExceeded with timedOut set.
	cause    error
	timedOut bool
}

func (l *Local) newRun(job *schemas.Job, dir string) (*run, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	r := &run{l: l, job: *job, dir: dir, exited: make(chan struct{})}
	r.job.ResultFile = filepath.Join(dir, ResultFile)
	b, err := json.Marshal(&r.job)
	if err != nil {
		return nil, err
	}
	// The job process would refuse a manifest that does not validate.
	if _, err := schemas.DecodeJob(filepath.Join(dir, ManifestFile), b); err != nil {
		return nil, err
	}
	r.timeout, _ = time.ParseDuration(r.job.Timeout)
	r.logger = l.logger().With("install", job.Install, "component", job.Component, "job", job.ID, "plugin", job.Plugin)
	return r, nil
}

// lockDir takes the job's lock before anything in dir changes, then
// removes the result of an earlier run: from here on a result in dir can
// only come from the process this run starts.
func (r *run) lockDir() error {
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return err
	}
	lock, err := createLock(r.dir)
	if err != nil {
		return err
	}
	r.lock = lock
	if err := os.Remove(r.job.ResultFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return atomicfile.SyncDir(r.dir)
}

func (r *run) writeManifest() error {
	return atomicfile.WriteJSON(filepath.Join(r.dir, ManifestFile), &r.job)
}

// openLog opens dir/log for appending; every run adds a header line so
// that the runs of a retried job stay apart.
func (r *run) openLog() error {
	f, err := os.OpenFile(filepath.Join(r.dir, LogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	r.log = f
	st, err := f.Stat()
	if err != nil {
		return err
	}
	r.logStart = st.Size()
	_, err = fmt.Fprintf(f, "==> %s job %s: %s %s (%s)\n",
		time.Now().UTC().Format(time.RFC3339), r.job.ID, r.job.Operation, r.job.Component, r.job.Plugin)
	return err
}

// start starts the job process in a process group of its own. Its output
// goes straight to dir/log rather than through a pipe to the agent, so a
// job outlives the agent without losing its output or dying of SIGPIPE.
// The lock's descriptor becomes the child's fd 3.
func (r *run) start() error {
	argv, err := r.l.command()
	if err != nil {
		return err
	}
	cmd := exec.Command(argv[0], append(argv[1:], filepath.Join(r.dir, ManifestFile))...)
	cmd.Env = append(append(os.Environ(), r.l.Env...), r.env...)
	cmd.Stdout = r.log
	cmd.Stderr = r.log
	cmd.ExtraFiles = []*os.File{r.lock}
	// No Pdeathsig: the job must survive the agent.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if r.l.Log != nil {
		m, err := startMirror(filepath.Join(r.dir, LogFile), r.logStart, r.l.Log)
		if err != nil {
			return err
		}
		r.mirror = m
	}
	r.started = time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	r.cmd = cmd
	r.logger.Info("job started", "pid", cmd.Process.Pid, "operation", r.job.Operation)
	go func() {
		r.waitErr = cmd.Wait()
		r.ended = time.Now()
		close(r.exited)
	}()
	return nil
}

// wait waits for the job process to exit, stopping it when ctx ends or
// when the job overruns its own timeout by the margin.
func (r *run) wait(ctx context.Context) {
	deadline := time.NewTimer(r.timeout + r.l.timeoutMargin())
	defer deadline.Stop()
	select {
	case <-r.exited:
		return
	case <-ctx.Done():
		r.cause = ctx.Err()
	case <-deadline.C:
		r.cause, r.timedOut = context.DeadlineExceeded, true
	}
	r.logger.Info("stopping job", "reason", r.cause)
	r.signal(syscall.SIGTERM)
	select {
	case <-r.exited:
		return
	case <-time.After(r.l.killGrace()):
	}
	r.logger.Warn("job did not stop in time; killing it", "grace", r.l.killGrace())
	r.signal(syscall.SIGKILL)
	<-r.exited
}

// signal sends sig to the job's whole process group.
func (r *run) signal(sig syscall.Signal) {
	if err := syscall.Kill(-r.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.logger.Warn("signal job", "signal", sig, "error", err)
	}
}

// release drops the agent's copy of the lock and makes sure that, once Run
// returns, no process of the job is left: a process the job started
// inherits the lock and holds it past the job's own exit. What is left of
// the job's process group is stopped like the job itself.
func (r *run) release() error {
	r.lock.Close()
	r.lock = nil
	if free, err := lockFree(r.dir); err != nil || free {
		return err
	}
	r.logger.Warn("processes of the job outlived it; stopping them")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		r.signal(sig)
		if r.awaitLock(r.l.killGrace()) {
			return nil
		}
	}
	return fmt.Errorf("%w: a process outside the job's process group still holds %s", ErrRunning, filepath.Join(r.dir, LockFile))
}

// awaitLock reports whether the job's lock became free within d.
func (r *run) awaitLock(d time.Duration) bool {
	end := time.Now().Add(d)
	for {
		if free, err := lockFree(r.dir); err != nil || free {
			return err == nil
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(lockPoll)
	}
}

// drainLog copies the rest of the job's output to Local.Log.
func (r *run) drainLog() {
	if r.mirror != nil {
		r.mirror.close()
		r.mirror = nil
	}
}

// outcome reads the job's result and turns how its process ended into
// Run's result and error.
func (r *run) outcome() (*schemas.JobResult, error) {
	id := r.job.ID
	status := "exit status 0"
	if r.waitErr != nil {
		status = r.waitErr.Error()
	}
	elapsed := r.ended.Sub(r.started)
	r.logger.Info("job exited", "status", status, "duration", elapsed.Round(time.Millisecond))
	res, err := readResult(r.job.ResultFile)
	if errors.Is(err, fs.ErrNotExist) {
		res, err = nil, nil
	}
	if err == nil && res != nil && res.Job != id {
		res, err = nil, fmt.Errorf("result %s is for job %q", r.job.ResultFile, res.Job)
	}
	switch {
	case r.timedOut || (r.cause == nil && r.waitErr != nil && elapsed >= r.timeout):
		return res, fmt.Errorf("job %s: %w: timed out after %s: %w", id, ErrJobFailed, r.timeout, context.DeadlineExceeded)
	case r.cause != nil:
		return res, fmt.Errorf("job %s: stopped (%s): %w", id, status, r.cause)
	case err != nil:
		return nil, fmt.Errorf("job %s: %w: %s: %w", id, ErrJobFailed, status, err)
	case res != nil && res.Error != "":
		return res, fmt.Errorf("job %s: %w: %s", id, ErrJobFailed, res.Error)
	case r.waitErr != nil:
		return res, fmt.Errorf("job %s: %w: %s%s", id, ErrJobFailed, status, r.logTail())
	case res == nil:
		return nil, fmt.Errorf("job %s: %w: exited without a result%s", id, ErrJobFailed, r.logTail())
	}
	return res, nil
}

// Bounds of the log excerpt in an error.
const (
	tailLines = 20
	tailBytes = 4 << 10
)

// logTail returns the last lines this run added to dir/log, for an error
// message.
func (r *run) logTail() string {
	f, err := os.Open(filepath.Join(r.dir, LogFile))
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := readTail(f, r.logStart, tailBytes)
	if err != nil || len(b) == 0 {
		return ""
	}
	return "; last lines of the log:\n" + lastLines(string(b), tailLines)
}

func (r *run) close() {
	r.drainLog()
	if r.log != nil {
		r.log.Close()
	}
	if r.lock != nil {
		r.lock.Close()
	}
}

// Package exchange is how a job hands a request to a plugin that runs in
// a container of its own, and takes its response back, through files: the
// Kubernetes runner's image form of a vendor's plugin (agent/jobs, "Plugin
// images"). It needs the standard library only, so the executor that
// carries it into the plugin's container (cmd/nuon-plugin-exec) stays a
// small static binary that holds nothing a plugin could abuse.
//
// # The files
//
// The job's side (on Kubernetes, the agent, before the pod exists)
// writes into the in directory, which the plugin's container mounts
// read-only:
//
//	request.json   the PluginRequest, as the plugin reads it on stdin
//	admitted.json  the plugin's signed manifest, what it is granted and
//	               the protocol agreed: what the job's side reads back
//	refused        why the plugin was refused, instead of the two above
//
// The executor (Exec) writes into the out directory:
//
//	response.json  the plugin's stdout, bounded
//	stderr         the plugin's stderr, bounded
//	exit           how it ended, written last: its exit code, or
//	               "too-large" (its stdout passed the bound and it was
//	               killed), or "stopped" (the executor was told to stop)
//
// Everything in out is the plugin's to forge: the job's side reads it as
// it reads a plugin's stdout, bounded and parsed strictly.
package exchange

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Names of the exchange's files.
const (
	Request  = "request.json"
	Admitted = "admitted.json"
	Refused  = "refused"
	Response = "response.json"
	Stderr   = "stderr"
	Exit     = "exit"
)

// Endings written to Exit besides an exit code.
const (
	TooLarge = "too-large"
	Stopped  = "stopped"
)

// Defaults of Exec.
const (
	DefaultMaxResponse = 16 << 20
	DefaultMaxLog      = 16 << 20
	DefaultKillGrace   = 5 * time.Second
)

// Exec runs a plugin's executable once on the request in In.
type Exec struct {
	// In holds the request; Out receives the response, the log and the
	// ending.
	In, Out string
	// Argv is the plugin's executable and its arguments.
	Argv []string
	// MaxResponse bounds stdout: past it the plugin's process group is
	// killed. Default DefaultMaxResponse.
	MaxResponse int64
	// MaxLog bounds what of stderr is kept. Default DefaultMaxLog.
	MaxLog int64
	// KillGrace is between SIGTERM and SIGKILL when ctx ends. Default
	// DefaultKillGrace.
	KillGrace time.Duration
}

// Run runs the plugin with the request on its stdin, its stdout and
// stderr into Out, in a process group of its own and with this process's
// environment (a container's: only what the plugin is granted) less the
// variables the kubelet adds to every container (ServiceEnviron), and
// writes how it ended to Out/exit last. Without a request (the job's side
// refused the plugin) it runs nothing and writes nothing. Its error is
// about the exchange itself, never about the plugin's outcome.
func (e *Exec) Run(ctx context.Context) error {
	if len(e.Argv) == 0 {
		return errors.New("exchange: no executable")
	}
	in, err := os.Open(filepath.Join(e.In, Request))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer in.Close()
	maxResp, maxLog, grace := e.MaxResponse, e.MaxLog, e.KillGrace
	if maxResp <= 0 {
		maxResp = DefaultMaxResponse
	}
	if maxLog <= 0 {
		maxLog = DefaultMaxLog
	}
	if grace <= 0 {
		grace = DefaultKillGrace
	}
	resp, err := os.OpenFile(filepath.Join(e.Out, Response), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer resp.Close()
	logf, err := os.OpenFile(filepath.Join(e.Out, Stderr), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()

	cmd := exec.Command(e.Argv[0], e.Argv[1:]...)
	cmd.Env = slices.DeleteFunc(os.Environ(), ServiceEnviron)
	cmd.Stdin = in
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var once sync.Once
	tooLarge := false
	cmd.Stdout = &bounded{w: resp, max: maxResp, full: func() {
		once.Do(func() {
			tooLarge = true
			KillGroup(cmd, syscall.SIGKILL)
		})
	}}
	cmd.Stderr = &bounded{w: logf, max: maxLog}
	cmd.WaitDelay = grace + time.Second
	if err := cmd.Start(); err != nil {
		return writeExit(e.Out, "127", fmt.Errorf("start %s: %w", e.Argv[0], err))
	}
	waitErr := Wait(ctx, cmd, grace)
	var ee *exec.ExitError
	switch {
	case tooLarge:
		return writeExit(e.Out, TooLarge, nil)
	case ctx.Err() != nil:
		return writeExit(e.Out, Stopped, nil)
	case waitErr == nil:
		return writeExit(e.Out, "0", nil)
	case errors.As(waitErr, &ee) && ee.Exited():
		return writeExit(e.Out, strconv.Itoa(ee.ExitCode()), nil)
	case errors.As(waitErr, &ee):
		return writeExit(e.Out, "signal", nil)
	default:
		return writeExit(e.Out, "127", waitErr)
	}
}

// ServiceEnviron reports whether the environment entry kv (NAME=VALUE) is
// one the kubelet gives every container of a pod whatever the pod says:
// the API server's Service (KUBERNETES_SERVICE_HOST, KUBERNETES_PORT...),
// which enableServiceLinks: false does not withhold. A plugin is granted
// no API server; it does not learn where one is either.
func ServiceEnviron(kv string) bool {
	name, _, _ := strings.Cut(kv, "=")
	return strings.HasPrefix(name, "KUBERNETES_SERVICE_") || name == "KUBERNETES_PORT" || strings.HasPrefix(name, "KUBERNETES_PORT_")
}

// writeExit writes the ending atomically, then returns err.
func writeExit(dir, ending string, err error) error {
	tmp := filepath.Join(dir, "."+Exit)
	if werr := os.WriteFile(tmp, []byte(ending+"\n"), 0o644); werr != nil {
		return errors.Join(err, werr)
	}
	return errors.Join(err, os.Rename(tmp, filepath.Join(dir, Exit)))
}

// Wait waits for cmd, started in a process group of its own (Setpgid),
// to exit. When ctx ends first, the group gets SIGTERM, then SIGKILL
// after grace. Whatever the process left running in its group is killed
// before Wait returns. The plugin runner waits for a plugin process the
// same way.
func Wait(ctx context.Context, cmd *exec.Cmd, grace time.Duration) error {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-done:
		case <-ctx.Done():
			KillGroup(cmd, syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(grace):
				KillGroup(cmd, syscall.SIGKILL)
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	<-stopped
	KillGroup(cmd, syscall.SIGKILL)
	return err
}

// KillGroup sends sig to the process group of cmd's process (started with
// Setpgid), if it was started.
func KillGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, sig)
	}
}

// bounded writes up to max bytes to w, then drops the rest and calls full
// once.
type bounded struct {
	w    io.Writer
	max  int64
	n    int64
	full func()
}

func (b *bounded) Write(p []byte) (int, error) {
	if room := b.max - b.n; int64(len(p)) > room {
		if room > 0 {
			_, _ = b.w.Write(p[:room])
			b.n = b.max
		}
		if b.full != nil {
			b.full()
		}
		return len(p), nil
	}
	n, err := b.w.Write(p)
	b.n += int64(n)
	if err != nil {
		return len(p), nil // keep draining: the plugin must not block
	}
	return n, nil
}

// Ending reads Out/exit: the exit code, or TooLarge, Stopped or "signal"
// with code -1; ok is false when the executor never finished.
func Ending(out string) (ending string, code int, ok bool) {
	b, err := os.ReadFile(filepath.Join(out, Exit))
	if err != nil || len(b) > 32 {
		return "", -1, false
	}
	s := string(b)
	if n := len(s); n > 0 && s[n-1] == '\n' {
		s = s[:n-1]
	}
	if c, err := strconv.Atoi(s); err == nil && c >= 0 && c < 256 {
		return s, c, true
	}
	return s, -1, true
}

// ExecutorName is the executor's file name (cmd/nuon-plugin-exec).
const ExecutorName = "nuon-plugin-exec"

// CopySelf copies the running executable into dir as ExecutorName,
// executable by anyone: what the image form's first init container does,
// from nuon's image, into the volume the plugin's container runs the
// executor from.
func CopySelf(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("copy the executor: %w", err)
	}
	defer in.Close()
	dst := filepath.Join(dir, ExecutorName)
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o555)
	if err != nil {
		return fmt.Errorf("copy the executor: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy the executor to %s: %w", dst, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copy the executor to %s: %w", dst, err)
	}
	return os.Chmod(dst, 0o555)
}

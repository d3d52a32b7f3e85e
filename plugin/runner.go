package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"nuon.dev/nuon/plugin/exchange"
	"nuon.dev/nuon/schemas"
)

// Defaults of a Runner.
const (
	// DefaultMaxResponse bounds a response: 16 MiB, far more than outputs,
	// a plan record or a debug answer (itself bounded) need.
	DefaultMaxResponse = 16 << 20
	// DefaultMaxLog bounds what a plugin writes on stderr that reaches the
	// job's log: 16 MiB; the rest is dropped, with a note.
	DefaultMaxLog = 16 << 20
	// DefaultKillGrace is how long a plugin has between SIGTERM (its
	// context ended) and SIGKILL of its whole process group.
	DefaultKillGrace = 5 * time.Second
)

// Runner runs one plugin executable, one process per request.
//
// The process gets a clean environment: PATH, HOME and TMPDIR (its
// request's work directory), LANG=C.UTF-8 and NUON_PLUGIN_PROTOCOL, then
// only what is granted: NUON_SECRET_* with the secrets capability, AWS_*
// with cloudRole, each variable named in env. It runs in its own process
// group, and in a network namespace of its own unless it is granted the
// network; when ctx ends the group gets SIGTERM, then SIGKILL after
// KillGrace, and whatever the group left behind is killed when the
// plugin exits.
type Runner struct {
	// Path is the plugin's executable; Args its arguments.
	Path string
	Args []string
	// Environ is the job's environment, which grants are drawn from.
	// Default: os.Environ().
	Environ []string
	// Log receives the plugin's stderr. Default: discarded.
	Log io.Writer
	// MaxResponse bounds stdout. Default: DefaultMaxResponse.
	MaxResponse int64
	// MaxLog bounds what of stderr reaches Log. Default: DefaultMaxLog.
	MaxLog int64
	// KillGrace is between SIGTERM and SIGKILL. Default: DefaultKillGrace.
	KillGrace time.Duration
	// SharedNetwork runs a plugin that is not granted the network in the
	// job's network all the same, where network namespaces are not
	// allowed. Default: such a plugin gets a network namespace of its
	// own, with nothing in it but a loopback that is down.
	SharedNetwork bool
}

// isolateNetwork starts the process in a new network namespace: as root
// directly, otherwise inside a new user namespace that maps the job's own
// user and group, so that nothing but the network changes.
func isolateNetwork(a *syscall.SysProcAttr) {
	a.Cloneflags |= syscall.CLONE_NEWNET
	if os.Geteuid() != 0 {
		a.Cloneflags |= syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Geteuid(), HostID: os.Geteuid(), Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getegid(), HostID: os.Getegid(), Size: 1}}
		a.GidMappingsEnableSetgroups = false
	}
}

// Call sends req to a new plugin process and returns its response, with
// granted as the capabilities it may use. The response has been parsed
// with ParseResponse; a response with an error is returned with an
// *Error. An error that is not an *Error means the process or its output
// broke the protocol (ErrProtocol), or ctx ended (it wraps ctx's error).
func (r *Runner) Call(ctx context.Context, req *schemas.PluginRequest, granted schemas.PluginCapabilities) (*schemas.PluginResponse, error) {
	g := granted
	sent := *req
	sent.Granted = &g
	req = &sent
	in, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if err := schemas.ValidateJSON(schemas.SchemaPluginRequest, in); err != nil {
		return nil, fmt.Errorf("plugin request %s: %w", req.Operation, err)
	}
	name := r.Path
	if req.Job != nil {
		name = req.Job.Plugin
	}
	out, exit, err := r.exec(ctx, name+" "+req.Operation, in, granted, req.WorkDir)
	if err != nil {
		return nil, err
	}
	return answer(req, name, out, exit)
}

// answer is the response of the plugin name to req: its stdout out, read
// with ParseResponse, and its exit code, as Call describes.
func answer(req *schemas.PluginRequest, name string, out []byte, exit int) (*schemas.PluginResponse, error) {
	resp, perr := ParseResponse(req, out)
	if perr != nil {
		if exit != ExitOK && errors.Is(perr, ErrNoResponse) {
			return nil, fmt.Errorf("plugin %s %s: exited %d (%s) with no response: %w", name, req.Operation, exit, exitMeaning(exit), ErrProtocol)
		}
		return nil, fmt.Errorf("plugin %s %s (exit %d): %w", name, req.Operation, exit, perr)
	}
	if resp.Plugin != nil {
		name = resp.Plugin.Name
	}
	if resp.Error != nil {
		return resp, &Error{Plugin: name, Operation: req.Operation, Code: resp.Error.Code, Message: resp.Error.Message, Exit: exit}
	}
	if exit != ExitOK {
		return nil, fmt.Errorf("plugin %s %s: exited %d (%s) with a response that has no error: %w", name, req.Operation, exit, exitMeaning(exit), ErrProtocol)
	}
	return resp, nil
}

// Exec runs the plugin once with stdin as its input, whatever it is, and
// returns its stdout and exit code, with the Runner's bounds, environment
// and process group. It is for test kits that send what a job never
// would; a job uses Call.
func (r *Runner) Exec(ctx context.Context, stdin []byte, granted schemas.PluginCapabilities, workDir string) ([]byte, int, error) {
	return r.exec(ctx, r.Path, stdin, granted, workDir)
}

// exec runs the process with in on its stdin and returns its stdout and
// exit code; what names the plugin and operation in errors.
func (r *Runner) exec(ctx context.Context, what string, in []byte, granted schemas.PluginCapabilities, workDir string) ([]byte, int, error) {
	maxResp := r.MaxResponse
	if maxResp <= 0 {
		maxResp = DefaultMaxResponse
	}
	maxLog := r.MaxLog
	if maxLog <= 0 {
		maxLog = DefaultMaxLog
	}
	grace := r.KillGrace
	if grace <= 0 {
		grace = DefaultKillGrace
	}
	environ := r.Environ
	if environ == nil {
		environ = os.Environ()
	}
	logw := r.Log
	if logw == nil {
		logw = io.Discard
	}

	path := r.Path
	if strings.ContainsRune(path, filepath.Separator) && !filepath.IsAbs(path) {
		// The process runs in its work directory; a relative path
		// means one relative to the job's.
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, 0, err
		}
		path = abs
	}
	cmd := exec.Command(path, r.Args...)
	cmd.Env = Environ(environ, granted, workDir)
	cmd.Dir = workDir
	cmd.Stdin = bytes.NewReader(in)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !granted.Network && !r.SharedNetwork {
		isolateNetwork(cmd.SysProcAttr)
	}
	var overflow sync.Once
	tooLarge := false
	stdout := &boundedBuffer{max: maxResp, full: func() {
		overflow.Do(func() {
			tooLarge = true
			exchange.KillGroup(cmd, syscall.SIGKILL)
		})
	}}
	cmd.Stdout = stdout
	cmd.Stderr = &logWriter{w: logw, max: maxLog}
	cmd.WaitDelay = grace + time.Second

	if err := cmd.Start(); err != nil {
		if cmd.SysProcAttr.Cloneflags&syscall.CLONE_NEWNET != 0 && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC)) {
			return nil, 0, fmt.Errorf("start plugin %s in a network namespace of its own (it is not granted the network): %w; "+
				"where namespaces are not allowed, grant it network or set the runner's SharedNetwork", r.Path, err)
		}
		return nil, 0, fmt.Errorf("start plugin %s: %w", r.Path, err)
	}
	// Whatever the plugin left running in its group goes with it.
	waitErr := exchange.Wait(ctx, cmd, grace)

	if tooLarge {
		return nil, 0, fmt.Errorf("plugin %s: more than %d bytes on stdout: %w", what, maxResp, ErrTooLarge)
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("plugin %s: stopped: %w", what, err)
	}
	var ee *exec.ExitError
	switch {
	case waitErr == nil:
		return stdout.buf.Bytes(), 0, nil
	case errors.As(waitErr, &ee) && ee.Exited():
		return stdout.buf.Bytes(), ee.ExitCode(), nil
	case errors.As(waitErr, &ee):
		return nil, 0, fmt.Errorf("plugin %s: %s: %w", what, ee.ProcessState, ErrProtocol)
	}
	return nil, 0, fmt.Errorf("plugin %s: %w", what, waitErr)
}

// Environ is the environment of a plugin process granted g, drawn from
// the job's environ: PATH, HOME and TMPDIR set to workDir, LANG, the
// protocol version, and what g grants, nothing else.
func Environ(environ []string, g schemas.PluginCapabilities, workDir string) []string {
	env := []string{"LANG=C.UTF-8", fmt.Sprintf("NUON_PLUGIN_PROTOCOL=%d", Protocol)}
	if workDir != "" {
		env = append(env, "HOME="+workDir, "TMPDIR="+workDir)
	}
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		switch {
		case k == "PATH",
			g.Secrets && strings.HasPrefix(k, "NUON_SECRET_"),
			g.CloudRole && strings.HasPrefix(k, "AWS_"),
			slices.Contains(g.Env, k) && k != "HOME" && k != "TMPDIR":
			env = append(env, kv)
		}
	}
	return env
}

// boundedBuffer keeps up to max bytes and calls full once more arrive.
type boundedBuffer struct {
	buf  bytes.Buffer
	max  int64
	full func()
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if int64(b.buf.Len())+int64(len(p)) > b.max {
		b.full()
		return 0, ErrTooLarge
	}
	return b.buf.Write(p)
}

// logWriter passes up to max bytes to w and drops the rest, with a note;
// it never fails, so that a plugin is never blocked on its stderr.
type logWriter struct {
	w       io.Writer
	max, n  int64
	dropped bool
}

func (l *logWriter) Write(p []byte) (int, error) {
	if l.n >= l.max {
		if !l.dropped {
			l.dropped = true
			fmt.Fprintf(l.w, "\n[plugin log cut off after %d bytes]\n", l.max)
		}
		return len(p), nil
	}
	q := p
	if rest := l.max - l.n; int64(len(q)) > rest {
		q = q[:rest]
	}
	l.n += int64(len(q))
	_, _ = l.w.Write(q)
	return len(p), nil
}

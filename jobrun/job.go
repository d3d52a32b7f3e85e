package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	rtdebug "runtime/debug"
	"slices"
	"strings"
	"time"

	"nuon.dev/nuon/internal/atomicfile"
	"nuon.dev/nuon/internal/debugcmd"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// Main executes the manifest at path in this process: it validates the
// manifest, runs the plugin for job.Plugin (Apply for create/update,
// Destroy for delete, and for the read-only operations the plugin's
// reconciler.DriftChecker, HealthChecker or Debugger, or an error
// wrapping ErrUnsupported) under the job's timeout, and writes the JobResult
// atomically to job.ResultFile, with Error set on failure. It returns the
// plugin's error.
//
// A manifest that does not validate gets no result file: its error wraps
// schemas.ErrInvalidJob and there is no trustworthy place to write one. An
// unknown plugin gets a result whose error wraps ErrUnknownPlugin. The
// caller passes a ctx that ends on SIGTERM, which is how the runner stops
// a job.
func Main(ctx context.Context, manifestPath string, plugins map[string]reconciler.Plugin, artifacts reconciler.ArtifactSource, out io.Writer) error {
	_, err := run(ctx, manifestPath, plugins, artifacts, out)
	return err
}

// ErrUnknownPlugin: the job process has no plugin for the job's type.
var ErrUnknownPlugin = errors.New("unknown plugin")

// run is Main, returning the result it wrote (nil when it wrote none).
func run(ctx context.Context, manifestPath string, plugins map[string]reconciler.Plugin, artifacts reconciler.ArtifactSource, out io.Writer) (*schemas.JobResult, error) {
	data, err := os.ReadFile(manifestPath)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	job, err := schemas.DecodeJob(manifestPath, data)
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = io.Discard
	}
	res, runErr := execute(ctx, job, plugins, artifacts, out)
	written, err := writeResult(job, res, runErr)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", job.ID, errors.Join(runErr, fmt.Errorf("write result: %w", err)))
	}
	if runErr != nil {
		return written, fmt.Errorf("job %s: %w", job.ID, runErr)
	}
	return written, nil
}

// execute runs the job's plugin and returns what it reported. Its errors
// do not name the job: they become the result's Error.
func execute(ctx context.Context, job *schemas.Job, plugins map[string]reconciler.Plugin, artifacts reconciler.ArtifactSource, out io.Writer) (*schemas.JobResult, error) {
	plugin, ok := plugins[job.Plugin]
	if !ok {
		known := slices.Sorted(maps.Keys(plugins))
		return nil, fmt.Errorf("%w %q (this job process has: %s)", ErrUnknownPlugin, job.Plugin, strings.Join(known, ", "))
	}
	if err := os.MkdirAll(job.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	timeout, _ := time.ParseDuration(job.Timeout)
	jobCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(out, nil)).With(
		"install", job.Install, "component", job.Component, "job", job.ID, "plugin", job.Plugin)
	env := reconciler.Env{StateDir: job.StateDir, Artifacts: artifacts, Log: out, Logger: logger}

	logger.Info("job started", "operation", job.Operation, "version", job.Version, "generation", job.Generation)
	start := time.Now()
	res, err := callPlugin(jobCtx, plugin, job, env)
	switch {
	case err == nil:
		logger.Info("job succeeded", "duration", time.Since(start).Round(time.Millisecond), "changed", res != nil && res.Changed)
		return res, nil
	case ctx.Err() != nil:
		err = fmt.Errorf("stopped: %w", err)
	case errors.Is(jobCtx.Err(), context.DeadlineExceeded):
		err = fmt.Errorf("timed out after %s: %w", timeout, err)
	}
	logger.Error("job failed", "duration", time.Since(start).Round(time.Millisecond), "error", err)
	return res, err
}

// callPlugin runs the plugin method the job's operation calls for. A
// plugin that panics fails the job with a result rather than leave none.
func callPlugin(ctx context.Context, plugin reconciler.Plugin, job *schemas.Job, env reconciler.Env) (res *schemas.JobResult, err error) {
	defer func() {
		if v := recover(); v != nil {
			fmt.Fprintf(env.Log, "panic: %v\n%s", v, rtdebug.Stack())
			res, err = nil, fmt.Errorf("plugin %s panicked: %v", job.Plugin, v)
		}
	}()
	switch job.Operation {
	case schemas.OpDelete:
		if err := plugin.Destroy(ctx, job, env); err != nil {
			return nil, err
		}
		return &schemas.JobResult{Changed: true}, nil
	case schemas.OpDrift:
		dc, ok := plugin.(reconciler.DriftChecker)
		if !ok {
			return nil, unsupported(job)
		}
		res, err := dc.Drift(ctx, job, env)
		if res != nil {
			// A drift check changes nothing, whatever the plugin says.
			res.Changed = false
		}
		return res, err
	case schemas.OpHealth:
		hc, ok := plugin.(reconciler.HealthChecker)
		if !ok {
			return nil, unsupported(job)
		}
		h, err := hc.Health(ctx, job, env)
		if err != nil {
			return nil, err
		}
		return &schemas.JobResult{Health: h}, nil
	case schemas.OpDebug:
		d, ok := plugin.(reconciler.Debugger)
		if !ok {
			return nil, unsupported(job)
		}
		return runDebug(ctx, d, job, env)
	}
	return plugin.Apply(ctx, job, env)
}

// ErrUnsupported: the job's plugin does not implement the job's
// operation. Running the job again fails the same way.
var ErrUnsupported = errors.New("operation not supported")

func unsupported(job *schemas.Job) error {
	return fmt.Errorf("%w: plugin %s has no %s operation", ErrUnsupported, job.Plugin, job.Operation)
}

// runDebug parses the job's command against the plugin's allow-list,
// runs it under debug.timeout with its output bounded by debug.maxBytes,
// and answers with the output redacted by RedactAnswer. A refused command
// gets no answer, and an error wrapping debugcmd.ErrRefused that says why.
func runDebug(ctx context.Context, d reconciler.Debugger, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	cmd, err := debugcmd.Parse(job.Plugin, job.Debug.Command)
	if err != nil {
		return nil, err
	}
	if t, err := time.ParseDuration(job.Debug.Timeout); err == nil && t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	out := debugcmd.NewLimit(job.Debug.EffectiveMaxBytes())
	env.Logger.Info("debug command", "command", strings.Join(cmd.Words(), " "))
	err = d.Debug(ctx, job, env, cmd, out)
	if errors.Is(err, debugcmd.ErrLimit) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	return &schemas.JobResult{Answer: out.Answer(cmd, RedactAnswer)}, nil
}

// RedactAnswer removes secrets from a debug answer before it leaves the
// job process. The plugins already keep secret values out (Secrets show
// keys only, sensitive Terraform attributes show as sensitive); this is
// the hook where the install-wide redactor (internal/redact) plugs in once
// it exists, so that answers pass through the same redaction as every
// other output. Until then it replaces the values of the install's
// secrets (the reconciler.SecretEnvPrefix variables), raw and
// JSON-escaped, with "[redacted]", as the agent does.
var RedactAnswer debugcmd.Redactor = redactSecretEnv

func redactSecretEnv(s string) string {
	var values []string
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, reconciler.SecretEnvPrefix) && len(v) >= 4 {
			values = append(values, v)
			if q, _ := json.Marshal(v); string(q[1:len(q)-1]) != v {
				values = append(values, string(q[1:len(q)-1]))
			}
		}
	}
	// The longest first, so that a secret holding another goes whole.
	slices.SortFunc(values, func(a, b string) int { return len(b) - len(a) })
	for _, v := range values {
		s = strings.ReplaceAll(s, v, "[redacted]")
	}
	return s
}

// writeResult writes the job's result file: what the plugin reported,
// stamped with the job, and its error if it failed. It returns what it
// wrote.
func writeResult(job *schemas.Job, res *schemas.JobResult, runErr error) (*schemas.JobResult, error) {
	out := schemas.JobResult{APIVersion: schemas.APIVersion, Kind: schemas.KindJobResult, Job: job.ID}
	if res != nil {
		out.Outputs, out.Sensitive, out.Changed = res.Outputs, res.Sensitive, res.Changed
		out.Drift, out.Health, out.Answer = res.Drift, res.Health, res.Answer
	}
	if runErr != nil {
		out.Error = runErr.Error()
		out.Refused = errors.Is(runErr, debugcmd.ErrRefused)
	}
	if err := os.MkdirAll(filepath.Dir(job.ResultFile), 0o700); err != nil {
		return nil, err
	}
	return &out, atomicfile.WriteJSON(job.ResultFile, &out)
}

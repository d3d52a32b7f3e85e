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
	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/plugin"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// Main executes the manifest at path in this process: it validates the
// manifest, runs the plugin for job.Plugin (Apply for create/update,
// Destroy for delete) under the job's timeout, and writes the JobResult
// atomically to job.ResultFile, with Error set on failure. It returns the
// plugin's error.
//
// A manifest that does not validate gets no result file: its error wraps
// schemas.ErrInvalidJob and there is no trustworthy place to write one. An
// unknown plugin gets a result whose error wraps ErrUnknownPlugin. The
// caller passes a ctx that ends on SIGTERM, which is how the runner stops
// a job.
//
// Nothing leaves the job with a secret in it: the job's log (out) passes
// through a redact.Writer built from the process's NUON_SECRET_*
// variables, and so do the result's error and outputs and the error Main
// returns. With WithStdio, so does everything this process and its
// children write to fds 1 and 2.
func Main(ctx context.Context, manifestPath string, plugins map[string]reconciler.Plugin, artifacts reconciler.ArtifactSource, out io.Writer, opts ...Option) error {
	_, err := run(ctx, manifestPath, plugins, artifacts, out, opts)
	return err
}

// Option changes how Main and PodMain run a job.
type Option func(*options)

type options struct {
	stdio bool
}

// WithStdio makes the job's log this process's stdout and routes
// everything written to fds 1 and 2 (by the plugins, by the libraries they
// use and by the tools they start, such as terraform) through the job's
// redactor into it; out is then not used. It is for the job process
// itself, `nuon job run`, not for a caller that runs a job in its own
// process.
func WithStdio() Option { return func(o *options) { o.stdio = true } }

// ErrUnknownPlugin: the job process has no plugin for the job's type.
var ErrUnknownPlugin = errors.New("unknown plugin")

// run is Main, returning the result it wrote (nil when it wrote none).
// Its error, its result and what it wrote to out are redacted, and out
// has had everything by the time it returns.
func run(ctx context.Context, manifestPath string, plugins map[string]reconciler.Plugin, artifacts reconciler.ArtifactSource, out io.Writer, opts []Option) (res *schemas.JobResult, err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	red, redErr := redact.FromEnviron(os.Environ())
	if out == nil {
		out = io.Discard
	}
	if o.stdio {
		s, stdout, err := routeStdio()
		if err != nil {
			return nil, red.Error(fmt.Errorf("route stdout and stderr: %w", err))
		}
		log := red.Writer(stdout)
		s.copyTo(log)
		defer func() {
			s.restore()
			log.Close()
			stdout.Close()
		}()
		out = log
	} else {
		log := red.Writer(out)
		defer log.Close()
		out = log
	}
	if redErr != nil {
		slog.New(slog.NewTextHandler(out, nil)).Warn("secrets that cannot be redacted safely are not resolved", "error", redErr)
	}
	res, err = runJob(ctx, manifestPath, plugins, artifacts, out, red)
	return res, red.Error(err)
}

func runJob(ctx context.Context, manifestPath string, plugins map[string]reconciler.Plugin, artifacts reconciler.ArtifactSource, out io.Writer, red *redact.Redactor) (*schemas.JobResult, error) {
	data, err := os.ReadFile(manifestPath)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	job, err := decodeJob(manifestPath, data, plugins)
	if err != nil {
		return nil, err
	}
	res, runErr := execute(ctx, job, plugins, artifacts, out)
	written, err := writeResult(job, res, runErr, red)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", job.ID, errors.Join(runErr, fmt.Errorf("write result: %w", err)))
	}
	if runErr != nil {
		return written, fmt.Errorf("job %s: %w", job.ID, runErr)
	}
	return written, nil
}

// builtinTypes are the component types the job schema lists.
var builtinTypes = []string{schemas.TypeTerraform, schemas.TypeHelm, schemas.TypeManifests, schemas.TypeImage}

// decodeJob reads the manifest. A job for a vendor's plugin, one this
// process has besides the built-ins (a *plugin.Process, or one it refuses
// to run), may name a component type the job schema does not list; it is
// checked against the schema otherwise.
func decodeJob(manifestPath string, data []byte, plugins map[string]reconciler.Plugin) (*schemas.Job, error) {
	job, err := schemas.DecodeJob(manifestPath, data)
	if err == nil {
		return job, nil
	}
	vendor, perr := plugin.DecodeJob(manifestPath, data)
	if perr != nil || slices.Contains(builtinTypes, vendor.Plugin) {
		return nil, err
	}
	if _, ok := plugins[vendor.Plugin]; !ok {
		return nil, err
	}
	// Every other rule of a job holds for a vendor's plugin's too: check
	// it as the job of a built-in.
	probe := *vendor
	probe.Plugin = schemas.TypeTerraform
	b, mErr := json.Marshal(&probe)
	if mErr != nil {
		return nil, mErr
	}
	if _, err := schemas.DecodeJob(manifestPath, b); err != nil {
		return nil, err
	}
	return vendor, nil
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

// runDebug parses the job's command against the plugin's allow-list and
// runs it under debug.timeout with its output bounded by debug.maxBytes.
// A refused command gets no answer, and an error wrapping
// debugcmd.ErrRefused that says why. writeResult redacts the answer.
func runDebug(ctx context.Context, d reconciler.Debugger, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	_, builtin := debugcmd.Allowed[job.Plugin]
	if _, process := d.(*plugin.Process); process && !builtin {
		// A vendor's plugin has an allow-list of its own, which it
		// applies to the words; the job process bounds the answer.
		return runVendorDebug(ctx, d, job, env)
	}
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
	return &schemas.JobResult{Answer: out.Answer(cmd, nil)}, nil
}

// runVendorDebug is runDebug for a vendor's plugin, which parses the
// command's words against its own allow-list.
func runVendorDebug(ctx context.Context, d reconciler.Debugger, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	if t, err := time.ParseDuration(job.Debug.Timeout); err == nil && t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	out := debugcmd.NewLimit(job.Debug.EffectiveMaxBytes())
	env.Logger.Info("debug command", "command", strings.Join(job.Debug.Command, " "))
	if err := d.Debug(ctx, job, env, debugcmd.Command{}, out); err != nil && !errors.Is(err, debugcmd.ErrLimit) {
		return nil, err
	}
	a := out.Answer(debugcmd.Command{}, nil)
	a.Command = slices.Clone(job.Debug.Command)
	return &schemas.JobResult{Answer: a}, nil
}

// writeResult writes the job's result file: what the plugin reported,
// stamped with the job, and its error if it failed, with every secret
// redacted. It returns what it wrote.
func writeResult(job *schemas.Job, res *schemas.JobResult, runErr error, red *redact.Redactor) (*schemas.JobResult, error) {
	out := schemas.JobResult{APIVersion: schemas.APIVersion, Kind: schemas.KindJobResult, Job: job.ID}
	if res != nil {
		out.Outputs, out.Sensitive, out.Changed = res.Outputs, res.Sensitive, res.Changed
		out.Drift, out.Health, out.Answer = redactReports(res, red)
		if res.Plan != nil {
			// The plan record rides in the result too: its diff quotes
			// resources, redacted here as drift is.
			p := *res.Plan
			p.Diff = red.String(p.Diff)
			out.Plan = &p
		}
		if res.BrokenLock != nil {
			l := *res.BrokenLock
			l.Who = red.String(l.Who)
			out.BrokenLock = &l
		}
		if out.Outputs != nil {
			v, err := schemas.WalkStrings(out.Outputs, "", func(_, s string) (any, error) { return red.String(s), nil })
			if err != nil {
				return nil, err
			}
			out.Outputs, _ = v.(map[string]any)
		}
	}
	if runErr != nil {
		out.Error = red.String(runErr.Error())
		out.Refused = errors.Is(runErr, debugcmd.ErrRefused)
	}
	if err := os.MkdirAll(filepath.Dir(job.ResultFile), 0o700); err != nil {
		return nil, err
	}
	return &out, atomicfile.WriteJSON(job.ResultFile, &out)
}

// redactReports returns copies of res's drift, health and debug answer
// with every secret redacted: a debug answer may show an object whose
// manifest had a secret substituted in, a drift diff or a health message
// may quote a value.
func redactReports(res *schemas.JobResult, red *redact.Redactor) ([]schemas.ResourceDrift, *schemas.Health, *schemas.Answer) {
	var drift []schemas.ResourceDrift
	for _, d := range res.Drift {
		d.Diff = red.String(d.Diff)
		fields := make([]string, len(d.Fields))
		for i, f := range d.Fields {
			fields[i] = red.String(f)
		}
		if d.Fields != nil {
			d.Fields = fields
		}
		drift = append(drift, d)
	}
	var health *schemas.Health
	if res.Health != nil {
		h := *res.Health
		h.Message = red.String(h.Message)
		h.Resources = nil
		for _, r := range res.Health.Resources {
			r.Message = red.String(r.Message)
			h.Resources = append(h.Resources, r)
		}
		health = &h
	}
	var answer *schemas.Answer
	if res.Answer != nil {
		a := *res.Answer
		a.Output = red.String(a.Output)
		answer = &a
	}
	return drift, health, answer
}

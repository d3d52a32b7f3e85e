// Package plugintest is the test kit for plugin authors: it runs a plugin
// executable through the protocol the way a job does, and a few ways a
// job never would, and checks every answer against the protocol's JSON
// Schemas and rules. `nuon plugin test PATH` runs it from the command
// line; Test runs it inside a Go test.
//
// The checks, in order:
//
//   - handshake: a manifest that validates, protocol 1 agreed;
//   - an unknown protocol version offered alone: refused as unsupported
//     (exit 3), not answered in a version the job does not speak;
//   - a request that is not JSON: refused as invalid (exit 2) with a
//     response, not a crash;
//   - an operation the manifest does not declare: unsupported (exit 3);
//   - the declared operations on the sample job, each in a state of the
//     kit's own: plan, apply, apply again (must change nothing), drift
//     (must find nothing), health (not Failed), debug (when the sample
//     has a command), destroy, drift again (what is gone, or a failure
//     saying there is nothing to check), destroy again;
//   - a request in a protocol version the plugin did not agree to:
//     unsupported.
//
// The plugin runs as a job runs it: its own process group, a clean
// environment with only what its manifest asks granted (from the kit's
// environment), bounded time and output.
package plugintest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/plugin"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// DefaultTimeout bounds each call to the plugin.
const DefaultTimeout = 2 * time.Minute

// Kit says which plugin to test and with what.
type Kit struct {
	// Path is the plugin's executable; Args its arguments.
	Path string
	Args []string
	// Job is the sample job (its Operation, StateDir and ResultFile are
	// the kit's own); nil means a job with no inputs.
	Job *schemas.Job
	// Environ is what the plugin's grants are drawn from. Default:
	// os.Environ().
	Environ []string
	// Timeout bounds each call. Default: DefaultTimeout.
	Timeout time.Duration
	// Artifacts gives the sample job's artifacts (an OCI image layout
	// for `nuon plugin test --artifacts`). Default: none.
	Artifacts reconciler.ArtifactSource
}

// Result is one check.
type Result struct {
	Check string `json:"check"`
	OK    bool   `json:"ok"`
	// Message says what was wrong, or what was seen.
	Message  string        `json:"message,omitempty"`
	Duration time.Duration `json:"duration"`
}

// Report is the outcome of a kit's run.
type Report struct {
	Plugin   *schemas.PluginManifest `json:"plugin,omitempty"`
	Protocol int                     `json:"protocol,omitempty"`
	Results  []Result                `json:"results"`
}

// Failed counts the checks that failed.
func (r *Report) Failed() int {
	n := 0
	for _, c := range r.Results {
		if !c.OK {
			n++
		}
	}
	return n
}

// Test runs the kit in a Go test: each failed check is an error.
func Test(t testing.TB, k Kit) *Report {
	t.Helper()
	rep, err := k.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Results {
		if c.OK {
			t.Logf("ok   %s (%s) %s", c.Check, c.Duration.Round(time.Millisecond), c.Message)
		} else {
			t.Errorf("FAIL %s: %s", c.Check, c.Message)
		}
	}
	return rep
}

// Run runs every check. Its error means the kit could not run at all (no
// scratch directory); a plugin that fails a check is in the report.
func (k Kit) Run(ctx context.Context) (*Report, error) {
	work, err := os.MkdirTemp("", "nuon-plugin-test-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	r := &run{kit: k, work: work, report: &Report{}}
	if r.kit.Timeout <= 0 {
		r.kit.Timeout = DefaultTimeout
	}
	if r.kit.Environ == nil {
		r.kit.Environ = os.Environ()
	}
	if !r.handshake(ctx) {
		return r.report, nil
	}
	r.unknownProtocol(ctx)
	r.garbage(ctx)
	r.undeclared(ctx)
	r.operations(ctx)
	r.wrongProtocol(ctx)
	return r.report, nil
}

type run struct {
	kit      Kit
	work     string
	report   *Report
	manifest *schemas.PluginManifest
	n        int
}

func (r *run) add(check string, start time.Time, err error, seen string) bool {
	res := Result{Check: check, OK: err == nil, Message: seen, Duration: time.Since(start)}
	if err != nil {
		res.Message = err.Error()
	}
	r.report.Results = append(r.report.Results, res)
	return err == nil
}

func (r *run) runner(log *strings.Builder) plugin.Runner {
	return plugin.Runner{Path: r.kit.Path, Args: r.kit.Args, Environ: r.kit.Environ, Log: log, KillGrace: time.Second}
}

func (r *run) dir(name string) string {
	r.n++
	d := filepath.Join(r.work, fmt.Sprintf("%02d-%s", r.n, name))
	_ = os.MkdirAll(d, 0o700)
	return d
}

func (r *run) granted() schemas.PluginCapabilities {
	if r.manifest == nil {
		return schemas.PluginCapabilities{}
	}
	return r.manifest.Capabilities
}

func (r *run) handshake(ctx context.Context) bool {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, r.kit.Timeout)
	defer cancel()
	var log strings.Builder
	p := &plugin.Process{Runner: r.runner(&log)}
	m, proto, err := p.Handshake(ctx)
	if err != nil {
		return r.add("handshake", start, withLog(err, &log), "")
	}
	if len(m.Operations) == 0 || (!slices.Contains(m.Operations, schemas.PluginApply) && !slices.Contains(m.Operations, schemas.PluginHealth)) {
		return r.add("handshake", start, errors.New("the manifest declares neither apply nor health"), "")
	}
	r.manifest, r.report.Plugin, r.report.Protocol = m, m, proto
	return r.add("handshake", start, nil, fmt.Sprintf("%s %s, protocol %d, operations %s, needs %s",
		m.Name, m.Version, proto, strings.Join(m.Operations, ","), describe(m.Capabilities)))
}

func describe(c schemas.PluginCapabilities) string {
	need := plugin.Missing(c, schemas.PluginCapabilities{})
	if len(need) == 0 {
		return "nothing"
	}
	return strings.Join(need, ", ")
}

// raw sends stdin and expects a response with error code want and its
// exit code.
func (r *run) raw(ctx context.Context, check string, stdin []byte, want string) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, r.kit.Timeout)
	defer cancel()
	var log strings.Builder
	rn := r.runner(&log)
	out, exit, err := rn.Exec(ctx, stdin, r.granted(), r.dir(check))
	if err != nil {
		r.add(check, start, withLog(err, &log), "")
		return
	}
	if err := schemas.ValidateJSON(schemas.SchemaPluginResponse, out); err != nil {
		r.add(check, start, withLog(fmt.Errorf("want a response with error %s; exit %d, %w", want, exit, err), &log), "")
		return
	}
	var resp schemas.PluginResponse
	_ = json.Unmarshal(out, &resp)
	wantExit := plugin.ExitCode(&schemas.PluginResponse{Error: &schemas.PluginError{Code: want}})
	switch {
	case resp.Error == nil:
		err = fmt.Errorf("want error %s, the plugin answered without an error (exit %d)", want, exit)
	case resp.Error.Code != want:
		err = fmt.Errorf("want error %s, got %s: %s", want, resp.Error.Code, resp.Error.Message)
	case exit != wantExit:
		err = fmt.Errorf("want exit %d with error %s, got exit %d", wantExit, want, exit)
	}
	msg := ""
	if resp.Error != nil {
		msg = resp.Error.Code + ": " + resp.Error.Message
	}
	r.add(check, start, err, msg)
}

func (r *run) unknownProtocol(ctx context.Context) {
	b, _ := json.Marshal(schemas.PluginRequest{APIVersion: schemas.APIVersion, Kind: schemas.KindPluginRequest,
		Protocol: 999, Protocols: []int{999}, Operation: schemas.PluginHandshake})
	r.raw(ctx, "handshake in protocol 999 only", b, schemas.PluginUnsupported)
}

func (r *run) garbage(ctx context.Context) {
	r.raw(ctx, "a request that is not JSON", []byte("apply everything, please\n"), schemas.PluginInvalid)
}

func (r *run) undeclared(ctx context.Context) {
	for _, op := range schemas.PluginOperations {
		if slices.Contains(r.manifest.Operations, op) {
			continue
		}
		job := r.job(op)
		b, _ := json.Marshal(schemas.PluginRequest{APIVersion: schemas.APIVersion, Kind: schemas.KindPluginRequest,
			Protocol: r.report.Protocol, Operation: op, Job: job, StateDir: r.dir("state"), WorkDir: r.dir("work")})
		r.raw(ctx, op+" (not declared)", b, schemas.PluginUnsupported)
	}
}

func (r *run) wrongProtocol(ctx context.Context) {
	op := r.manifest.Operations[0]
	b, _ := json.Marshal(schemas.PluginRequest{APIVersion: schemas.APIVersion, Kind: schemas.KindPluginRequest,
		Protocol: 999, Operation: op, Job: r.job(op), StateDir: r.dir("state"), WorkDir: r.dir("work")})
	r.raw(ctx, op+" in protocol 999", b, schemas.PluginUnsupported)
}

// job is the sample job for operation op, with the kit's own files.
func (r *run) job(op string) *schemas.Job {
	var j schemas.Job
	if r.kit.Job != nil {
		j = *r.kit.Job
	} else {
		j = schemas.Job{APIVersion: schemas.APIVersion, Kind: schemas.KindJob, ID: "kit-1", Install: "kit",
			Component: "sample", Version: "1.0.0", Generation: 1, Commit: strings.Repeat("0", 40), Timeout: "5m"}
	}
	if r.manifest != nil {
		j.Plugin = r.manifest.Name
	}
	j.Operation = map[string]string{
		schemas.PluginApply: schemas.OpUpdate, schemas.PluginPlan: schemas.OpUpdate, schemas.PluginDestroy: schemas.OpDelete,
		schemas.PluginDrift: schemas.OpDrift, schemas.PluginHealth: schemas.OpHealth, schemas.PluginDebug: schemas.OpDebug,
	}[op]
	j.StateDir = filepath.Join(r.work, "state")
	j.ResultFile = filepath.Join(r.work, "result.json")
	if op != schemas.PluginDebug {
		j.Debug = nil
	}
	return &j
}

// operations runs the declared operations on the sample job, as jobs
// would, in one state directory.
func (r *run) operations(ctx context.Context) {
	has := func(op string) bool { return slices.Contains(r.manifest.Operations, op) }
	var log strings.Builder
	p := &plugin.Process{Runner: r.runner(&log), Granted: r.granted()}
	_ = os.MkdirAll(filepath.Join(r.work, "state"), 0o700)
	var src reconciler.ArtifactSource = noArtifacts{}
	if r.kit.Artifacts != nil {
		src = r.kit.Artifacts
	}
	env := reconciler.Env{StateDir: filepath.Join(r.work, "state"), Artifacts: src}
	step := func(check, op string, judge func(*schemas.PluginResponse) (string, error)) {
		if !has(op) {
			return
		}
		start := time.Now()
		log.Reset()
		cctx, cancel := context.WithTimeout(ctx, r.kit.Timeout)
		defer cancel()
		env.Log = &log
		resp, err := p.Do(cctx, op, r.job(op), env)
		if err != nil && mayFail[check] && errors.Is(err, plugin.ErrFailed) {
			// About a component that is gone, a plugin may answer that
			// there is nothing to check.
			r.add(check, start, nil, "failed, which is allowed here: "+err.Error())
			return
		}
		if err != nil {
			r.add(check, start, withLog(err, &log), "")
			return
		}
		seen, err := judge(resp)
		r.add(check, start, err, seen)
	}
	any := func(resp *schemas.PluginResponse) (string, error) { return summary(resp), nil }
	step("plan", schemas.PluginPlan, func(resp *schemas.PluginResponse) (string, error) {
		if len(resp.Plan) == 0 {
			return "", errors.New("a plan with no plan record")
		}
		return summary(resp), nil
	})
	step("apply", schemas.PluginApply, any)
	step("apply again changes nothing", schemas.PluginApply, func(resp *schemas.PluginResponse) (string, error) {
		if resp.Changed {
			return "", errors.New("the second apply of the same job reported a change: apply is not idempotent")
		}
		return summary(resp), nil
	})
	step("drift after apply finds nothing", schemas.PluginDrift, func(resp *schemas.PluginResponse) (string, error) {
		if len(resp.Drift) > 0 {
			return "", fmt.Errorf("drift right after apply: %+v", resp.Drift)
		}
		if resp.Changed {
			return "", errors.New("a drift check reported a change")
		}
		return summary(resp), nil
	})
	step("health after apply", schemas.PluginHealth, func(resp *schemas.PluginResponse) (string, error) {
		if resp.Health == nil {
			return "", errors.New("a health response with no health")
		}
		if resp.Health.Status == schemas.HealthFailed && has(schemas.PluginApply) {
			return "", fmt.Errorf("health right after apply is %s: %s", resp.Health.Status, resp.Health.Message)
		}
		return summary(resp), nil
	})
	if r.kit.Job != nil && r.kit.Job.Debug != nil {
		step("debug", schemas.PluginDebug, func(resp *schemas.PluginResponse) (string, error) {
			if resp.Answer == nil {
				return "", errors.New("a debug response with no answer")
			}
			return summary(resp), nil
		})
	}
	step("destroy", schemas.PluginDestroy, any)
	step("drift after destroy", schemas.PluginDrift, any)
	step("destroy again", schemas.PluginDestroy, any)
}

// mayFail are the checks where an operation may fail with code failed:
// a drift check of a component that was destroyed.
var mayFail = map[string]bool{"drift after destroy": true}

// summary says in a few words what a response holds.
func summary(resp *schemas.PluginResponse) string {
	var parts []string
	if resp.Changed {
		parts = append(parts, "changed")
	}
	if len(resp.Outputs) > 0 {
		parts = append(parts, fmt.Sprintf("%d outputs", len(resp.Outputs)))
	}
	if len(resp.Plan) > 0 {
		parts = append(parts, fmt.Sprintf("plan of %d bytes", len(resp.Plan)))
	}
	if len(resp.Drift) > 0 {
		parts = append(parts, fmt.Sprintf("%d drifted", len(resp.Drift)))
	}
	if resp.Health != nil {
		parts = append(parts, "health "+resp.Health.Status)
	}
	if resp.Answer != nil {
		parts = append(parts, fmt.Sprintf("answer of %d bytes", resp.Answer.Bytes))
	}
	return strings.Join(parts, ", ")
}

func withLog(err error, log *strings.Builder) error {
	s := strings.TrimSpace(log.String())
	if s == "" {
		return err
	}
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return fmt.Errorf("%w\nplugin log:\n%s", err, s)
}

// noArtifacts is the kit's artifact source: sample jobs carry none.
type noArtifacts struct{}

func (noArtifacts) Extract(_ context.Context, a schemas.Artifact, _ string) error {
	return fmt.Errorf("the test kit has no artifact %s %s", a.Name, a.Digest)
}

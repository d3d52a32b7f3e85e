package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"nuon.dev/nuon/internal/debugcmd"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// Process is a plugin run as its own process behind the protocol, seen by
// the job process as a reconciler.Plugin: each operation is a handshake
// (once per Process) and one request. Before the first request it checks
// the plugin's manifest: a protocol both sides speak, the operation
// declared, and no capability the job does not grant. A plugin refused
// this way never sees a job, so nothing is half-applied.
type Process struct {
	// Runner starts the plugin; its Log, when nil, becomes the job's log.
	Runner Runner
	// Granted are the capabilities the job grants the plugin.
	Granted schemas.PluginCapabilities
	// Manifest, when set, is the plugin's manifest as the job knows it
	// already, and there is no handshake: a built-in served by the job's
	// own binary, or a plugin whose manifest came with its artifact,
	// pinned by digest. The plugin still answers in Manifest's newest
	// protocol this side speaks, or its response is refused.
	Manifest *schemas.PluginManifest
	// Artifact is the digest of the plugin's own artifact, when it runs
	// from one: a job of a vendor's plugin lists it among its artifacts
	// (synced and recorded like the others), and it is not extracted
	// again for the plugin.
	Artifact string
	// Staged, when set, is a staged directory (Staged, Process.Stage)
	// holding the job's artifacts, extracted by the agent: each
	// operation takes them from there instead of extracting them.
	Staged string
	// Exchange, when set, is the out directory of an exchange (package
	// exchange): the plugin ran in a container of its own on the request
	// Prepare wrote, and each operation reads its response there instead
	// of starting it (see Exchanged).
	Exchange string

	once     sync.Once
	manifest *schemas.PluginManifest
	protocol int
	err      error
}

var (
	_ reconciler.Plugin        = (*Process)(nil)
	_ reconciler.DriftChecker  = (*Process)(nil)
	_ reconciler.HealthChecker = (*Process)(nil)
	_ reconciler.Debugger      = (*Process)(nil)
)

// Handshake asks the plugin for its manifest, once, and returns it with
// the protocol version agreed.
func (p *Process) Handshake(ctx context.Context) (*schemas.PluginManifest, int, error) {
	p.once.Do(func() {
		if p.Manifest != nil {
			p.manifest, p.protocol = p.Manifest, Negotiate(Protocols, p.Manifest.Protocols)
			if p.protocol == 0 {
				p.err = fmt.Errorf("plugin %s speaks protocols %v; this job speaks %v: %w", p.Manifest.Name, p.Manifest.Protocols, Protocols, ErrVersion)
			}
			return
		}
		dir, err := os.MkdirTemp("", "nuon-plugin-handshake-")
		if err != nil {
			p.err = err
			return
		}
		defer os.RemoveAll(dir)
		req := &schemas.PluginRequest{APIVersion: schemas.APIVersion, Kind: schemas.KindPluginRequest,
			Protocol: Protocol, Protocols: Protocols, Operation: schemas.PluginHandshake, WorkDir: dir}
		r := p.Runner
		resp, err := r.Call(ctx, req, schemas.PluginCapabilities{})
		if err != nil {
			p.err = fmt.Errorf("handshake: %w", err)
			return
		}
		p.manifest, p.protocol = resp.Plugin, resp.Protocol
	})
	return p.manifest, p.protocol, p.err
}

// Apply runs operation apply.
func (p *Process) Apply(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	resp, err := p.Do(ctx, schemas.PluginApply, job, env)
	if err != nil {
		return nil, err
	}
	res := result(resp)
	if job.Plan != nil && len(resp.Plan) > 0 {
		// The job asked for a plan record (approvals): the plugin's plan
		// is that record, checked as the job result's.
		if res.Plan, err = parsePlanRecord(resp.Plan); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// parsePlanRecord reads the plan record of an apply in record mode: one
// PlanRecord, no unknown field, with a valid hash. Its errors wrap
// ErrProtocol.
func parsePlanRecord(raw json.RawMessage) (*schemas.PlanRecord, error) {
	var rec schemas.PlanRecord
	if err := decodeStrict(raw, &rec); err != nil {
		return nil, fmt.Errorf("%w: plan record: %w", ErrProtocol, err)
	}
	if !schemas.ValidPlanHash(rec.Hash) {
		return nil, fmt.Errorf("%w: plan record: hash %q", ErrProtocol, rec.Hash)
	}
	return &rec, nil
}

// Destroy runs operation destroy.
func (p *Process) Destroy(ctx context.Context, job *schemas.Job, env reconciler.Env) error {
	_, err := p.Do(ctx, schemas.PluginDestroy, job, env)
	return err
}

// Drift runs operation drift.
func (p *Process) Drift(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.JobResult, error) {
	resp, err := p.Do(ctx, schemas.PluginDrift, job, env)
	if err != nil {
		return nil, err
	}
	res := result(resp)
	res.Changed = false
	return res, nil
}

// Health runs operation health.
func (p *Process) Health(ctx context.Context, job *schemas.Job, env reconciler.Env) (*schemas.Health, error) {
	resp, err := p.Do(ctx, schemas.PluginHealth, job, env)
	if err != nil {
		return nil, err
	}
	if resp.Health == nil {
		return &schemas.Health{Status: schemas.HealthUnknown, Message: "the plugin did not say"}, nil
	}
	return resp.Health, nil
}

// Plan runs operation plan and returns the plan record.
func (p *Process) Plan(ctx context.Context, job *schemas.Job, env reconciler.Env) (json.RawMessage, error) {
	resp, err := p.Do(ctx, schemas.PluginPlan, job, env)
	if err != nil {
		return nil, err
	}
	return resp.Plan, nil
}

// Debug runs operation debug and writes the plugin's answer to out,
// which bounds it. The job process parsed the command already; the
// plugin parses the job's words again against its own allow-list.
func (p *Process) Debug(ctx context.Context, job *schemas.Job, env reconciler.Env, _ debugcmd.Command, out io.Writer) error {
	resp, err := p.Do(ctx, schemas.PluginDebug, job, env)
	if err != nil {
		return err
	}
	if resp.Answer != nil {
		_, err = io.WriteString(out, resp.Answer.Output)
	}
	return err
}

// result is the job result of a response.
func result(resp *schemas.PluginResponse) *schemas.JobResult {
	return &schemas.JobResult{Outputs: resp.Outputs, Sensitive: resp.Sensitive, Changed: resp.Changed,
		Drift: resp.Drift, Health: resp.Health}
}

// Do runs operation op of job: the handshake, the checks, the job's
// artifacts extracted into a work directory of the request's own, then
// the request. Without writableState the plugin gets an empty state
// directory of its own instead of the component's.
func (p *Process) Do(ctx context.Context, op string, job *schemas.Job, env reconciler.Env) (*schemas.PluginResponse, error) {
	m, proto, err := p.Handshake(ctx)
	if err != nil {
		return nil, err
	}
	if err := Check(m, op, p.Granted); err != nil {
		return nil, err
	}
	if p.Exchange != "" {
		return p.collect(op, proto, job, env.Log)
	}
	stateDir, err := reconciler.StateDir(job, env)
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "nuon-plugin-"+job.ID+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	if !p.Granted.WritableState {
		stateDir = filepath.Join(work, "state")
		if err := os.Mkdir(stateDir, 0o700); err != nil {
			return nil, err
		}
	}
	req := &schemas.PluginRequest{APIVersion: schemas.APIVersion, Kind: schemas.KindPluginRequest,
		Protocol: proto, Operation: op, Job: job, StateDir: stateDir, WorkDir: filepath.Join(work, "tmp")}
	if err := os.Mkdir(req.WorkDir, 0o700); err != nil {
		return nil, err
	}
	if p.Staged != "" {
		// Extracted already, by the agent: read-only to the plugin.
		for _, s := range stagedArtifacts(job) {
			dir := filepath.Join(p.Staged, filepath.FromSlash(s.rel))
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				return nil, fmt.Errorf("artifact %s: not staged in %s: %v", s.a.Name, p.Staged, err)
			}
			req.Artifacts = append(req.Artifacts, schemas.PluginArtifact{Name: s.a.Name, Digest: s.a.Digest, MediaType: s.a.MediaType, Dir: dir})
		}
	}
	for i, a := range job.Artifacts {
		if p.Staged != "" || (p.Artifact != "" && a.Digest == p.Artifact && a.Name == schemas.PluginArtifactName) {
			continue
		}
		dir := filepath.Join(work, "artifacts", strconv.Itoa(i)+"-"+a.Name)
		if err := reconciler.ExtractFresh(ctx, env, a, dir); err != nil {
			return nil, err
		}
		req.Artifacts = append(req.Artifacts, schemas.PluginArtifact{Name: a.Name, Digest: a.Digest, MediaType: a.MediaType, Dir: dir})
	}
	r := p.Runner
	if r.Log == nil {
		r.Log = env.Log
	}
	return r.Call(ctx, req, p.Granted)
}

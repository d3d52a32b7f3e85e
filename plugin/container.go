package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"nuon.dev/nuon/internal/atomicfile"
	"nuon.dev/nuon/plugin/exchange"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// A plugin in a container of its own (the Kubernetes runner's image
// form) gets its request through files (package exchange): the agent
// prepares it (Prepare) on a volume the pod mounts read-only, before the
// pod exists, the executor feeds it to the plugin in the plugin's
// container, and the job's side reads the response (a Process with
// Exchange set) in the pod's last container, as the protocol reads a
// plugin's stdout. Prepare is the only step that reaches the install
// registry, so the pod needs no network of its own.

// ContainerPaths are where the plugin's container sees what Prepare
// writes and what the plugin may use.
type ContainerPaths struct {
	// In is the exchange's in directory (read-only to the plugin).
	In string
	// State is the state directory the plugin's container mounts: the
	// component's own with writableState, an empty one otherwise.
	State string
	// Work is its scratch directory.
	Work string
}

// Admitted is what the job's side writes beside the request, where the
// plugin cannot change it, for the side that reads the response.
type Admitted struct {
	Manifest  schemas.PluginManifest     `json:"manifest"`
	Granted   schemas.PluginCapabilities `json:"granted"`
	Protocol  int                        `json:"protocol"`
	Operation string                     `json:"operation"`
}

// Operation is the plugin operation a job's operation calls for.
func Operation(job *schemas.Job) string {
	switch job.Operation {
	case schemas.OpDelete:
		return schemas.PluginDestroy
	case schemas.OpDrift:
		return schemas.PluginDrift
	case schemas.OpHealth:
		return schemas.PluginHealth
	case schemas.OpDebug:
		return schemas.PluginDebug
	}
	return schemas.PluginApply
}

// Prepare writes into the directory in the request for operation op of
// job that the plugin's container will read (exchange.Request), as Do
// would send it: the checks first (a protocol both speak, the operation
// declared, nothing needed beyond the grants), then the job's artifacts
// extracted under in/artifacts, named as the container sees them (at),
// and what was admitted (exchange.Admitted). A refusal is written as
// exchange.Refused instead, and returned.
func (p *Process) Prepare(ctx context.Context, job *schemas.Job, env reconciler.Env, in string, at ContainerPaths) error {
	if err := p.prepare(ctx, job, env, in, at); err != nil {
		return p.Refuse(in, err)
	}
	return nil
}

// Refuse writes the refusal err into the exchange's in directory, where
// Exchanged finds it, and returns it.
func (p *Process) Refuse(in string, err error) error {
	if werr := atomicfile.Write(filepath.Join(in, exchange.Refused), []byte(err.Error()+"\n"), 0o644); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

func (p *Process) prepare(ctx context.Context, job *schemas.Job, env reconciler.Env, in string, at ContainerPaths) error {
	op := Operation(job)
	m, proto, err := p.Handshake(ctx)
	if err != nil {
		return err
	}
	if err := Check(m, op, p.Granted); err != nil {
		return err
	}
	g := p.Granted
	req := &schemas.PluginRequest{APIVersion: schemas.APIVersion, Kind: schemas.KindPluginRequest,
		Protocol: proto, Operation: op, Job: job, StateDir: at.State, WorkDir: at.Work, Granted: &g}
	arts, err := stageArtifacts(ctx, job, env, in)
	if err != nil {
		return err
	}
	for _, s := range arts {
		req.Artifacts = append(req.Artifacts, schemas.PluginArtifact{Name: s.a.Name, Digest: s.a.Digest, MediaType: s.a.MediaType, Dir: path.Join(at.In, s.rel)})
	}
	raw, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if err := schemas.ValidateJSON(schemas.SchemaPluginRequest, raw); err != nil {
		return fmt.Errorf("plugin request %s: %w", op, err)
	}
	if err := atomicfile.WriteJSON(filepath.Join(in, exchange.Admitted), &Admitted{Manifest: *m, Granted: p.Granted, Protocol: proto, Operation: op}); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(in, exchange.Request), raw, 0o644)
}

// Exchanged is the plugin whose request Prepare wrote into in, answered
// in out: a Process that reads the response instead of starting the
// plugin. A refusal Prepare wrote fails every operation with its reason;
// an exchange without what Prepare writes fails them too.
func Exchanged(in, out string) (*Process, error) {
	if b, err := os.ReadFile(filepath.Join(in, exchange.Refused)); err == nil {
		return nil, fmt.Errorf("%s", string(trimNL(b)))
	}
	var a Admitted
	raw, err := os.ReadFile(filepath.Join(in, exchange.Admitted))
	if err != nil {
		return nil, fmt.Errorf("plugin exchange: nothing was prepared: %w", err)
	}
	if err := decodeStrict(raw, &a); err != nil {
		return nil, fmt.Errorf("plugin exchange %s: %w", exchange.Admitted, err)
	}
	m := a.Manifest
	return &Process{Manifest: &m, Granted: a.Granted, Exchange: out}, nil
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == '\n' {
		b = b[:len(b)-1]
	}
	return b
}

// collect reads the response of the plugin's container to operation op
// in protocol proto from the exchange's out directory, with the Runner's
// bounds: its stderr into the job's log, its ending, its stdout parsed as
// Call parses it.
func (p *Process) collect(op string, proto int, job *schemas.Job, log io.Writer) (*schemas.PluginResponse, error) {
	r := p.Runner
	maxResp, maxLog := r.MaxResponse, r.MaxLog
	if maxResp <= 0 {
		maxResp = DefaultMaxResponse
	}
	if maxLog <= 0 {
		maxLog = DefaultMaxLog
	}
	if log == nil {
		log = io.Discard
	}
	name := job.Plugin
	if f, err := os.Open(filepath.Join(p.Exchange, exchange.Stderr)); err == nil {
		_, _ = io.Copy(&logWriter{w: log, max: maxLog}, io.LimitReader(f, maxLog+1))
		f.Close()
	}
	ending, exit, ok := exchange.Ending(p.Exchange)
	switch {
	case !ok:
		return nil, fmt.Errorf("plugin %s %s: its container ended without an exit: %w", name, op, ErrProtocol)
	case ending == exchange.TooLarge:
		return nil, fmt.Errorf("plugin %s %s: more than %d bytes on stdout: %w", name, op, maxResp, ErrTooLarge)
	case ending == exchange.Stopped:
		return nil, fmt.Errorf("plugin %s %s: stopped: %w", name, op, context.DeadlineExceeded)
	case exit < 0:
		return nil, fmt.Errorf("plugin %s %s: ended by %s: %w", name, op, ending, ErrProtocol)
	}
	f, err := os.Open(filepath.Join(p.Exchange, exchange.Response))
	if errors.Is(err, fs.ErrNotExist) {
		return answer(&schemas.PluginRequest{Protocol: proto, Operation: op, Job: job}, name, nil, exit)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out, err := io.ReadAll(io.LimitReader(f, maxResp+1))
	if err != nil {
		return nil, err
	}
	if int64(len(out)) > maxResp {
		return nil, fmt.Errorf("plugin %s %s: more than %d bytes on stdout: %w", name, op, maxResp, ErrTooLarge)
	}
	return answer(&schemas.PluginRequest{Protocol: proto, Operation: op, Job: job}, name, out, exit)
}

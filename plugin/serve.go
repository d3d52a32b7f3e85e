package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"nuon.dev/nuon/internal/debugcmd"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// Planner is a plugin that can say what an apply would change without
// changing anything (operation plan), as a plan record.
type Planner interface {
	Plan(ctx context.Context, job *schemas.Job, env reconciler.Env) (json.RawMessage, error)
}

// Server is the plugin side of the protocol for a plugin written in Go:
// it reads one request, calls Plugin and writes one response. The
// built-in plugins run behind it as `nuon plugin serve NAME`.
type Server struct {
	// Manifest is what the handshake states. Its Operations are what
	// Plugin implements; Operations fills them in.
	Manifest schemas.PluginManifest
	Plugin   reconciler.Plugin
}

// Operations lists the operations p implements.
func Operations(p reconciler.Plugin) []string {
	ops := []string{}
	if _, ok := p.(Planner); ok {
		ops = append(ops, schemas.PluginPlan)
	}
	ops = append(ops, schemas.PluginApply, schemas.PluginDestroy)
	if _, ok := p.(reconciler.DriftChecker); ok {
		ops = append(ops, schemas.PluginDrift)
	}
	if _, ok := p.(reconciler.HealthChecker); ok {
		ops = append(ops, schemas.PluginHealth)
	}
	if _, ok := p.(reconciler.Debugger); ok {
		ops = append(ops, schemas.PluginDebug)
	}
	return ops
}

// Serve answers the request on stdin on stdout, logs to stderr, and
// returns the exit code the process ends with.
func (s *Server) Serve(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	resp := s.serve(ctx, stdin, stderr)
	data, err := json.Marshal(resp)
	if err != nil {
		fmt.Fprintf(stderr, "plugin %s: encode response: %v\n", s.Manifest.Name, err)
		return ExitFailed
	}
	if _, err := stdout.Write(append(data, '\n')); err != nil {
		fmt.Fprintf(stderr, "plugin %s: write response: %v\n", s.Manifest.Name, err)
		return ExitFailed
	}
	return ExitCode(resp)
}

func (s *Server) serve(ctx context.Context, stdin io.Reader, stderr io.Writer) *schemas.PluginResponse {
	resp := &schemas.PluginResponse{APIVersion: schemas.APIVersion, Kind: schemas.KindPluginResponse, Protocol: Protocol, Operation: schemas.PluginHandshake}
	fail := func(code string, format string, args ...any) *schemas.PluginResponse {
		resp.Error = &schemas.PluginError{Code: code, Message: fmt.Sprintf(format, args...)}
		return resp
	}
	data, err := io.ReadAll(io.LimitReader(stdin, DefaultMaxResponse+1))
	if err != nil {
		return fail(schemas.PluginInvalid, "read request: %v", err)
	}
	if len(data) > DefaultMaxResponse {
		return fail(schemas.PluginInvalid, "request larger than %d bytes", DefaultMaxResponse)
	}
	// An invalid request is still answered in its own operation when it
	// names one, so that the job reads the answer as one to its request.
	var head struct {
		Operation string `json:"operation"`
	}
	if json.NewDecoder(bytes.NewReader(data)).Decode(&head) == nil && (head.Operation == schemas.PluginHandshake || slices.Contains(schemas.PluginOperations, head.Operation)) {
		resp.Operation = head.Operation
	}
	// The job validated the request against its schema before it sent it
	// (Runner.Call); here it is decoded strictly and its few rules checked
	// in Go, which spares each plugin process compiling every schema
	// (a third of its start-up).
	var req schemas.PluginRequest
	if err := decodeStrict(data, &req); err != nil {
		return fail(schemas.PluginInvalid, "plugin request: %v", err)
	}
	if err := checkRequest(&req); err != nil {
		return fail(schemas.PluginInvalid, "plugin request: %v", err)
	}
	resp.Operation = req.Operation
	m := s.Manifest
	if len(m.Operations) == 0 {
		m.Operations = Operations(s.Plugin)
	}
	if req.Operation == schemas.PluginHandshake {
		offered := req.Protocols
		if len(offered) == 0 {
			offered = []int{req.Protocol}
		}
		resp.Plugin = &m
		if v := Negotiate(m.Protocols, offered); v != 0 {
			resp.Protocol = v
			return resp
		}
		return fail(schemas.PluginUnsupported, "plugin %s speaks protocols %v, the job %v", m.Name, m.Protocols, offered)
	}
	if !slices.Contains(m.Protocols, req.Protocol) {
		return fail(schemas.PluginUnsupported, "plugin %s speaks protocols %v, not %d", m.Name, m.Protocols, req.Protocol)
	}
	resp.Protocol = req.Protocol
	if !slices.Contains(m.Operations, req.Operation) {
		return fail(schemas.PluginUnsupported, "plugin %s has no %s operation", m.Name, req.Operation)
	}
	if req.Job.Plugin != m.Name {
		return fail(schemas.PluginInvalid, "plugin %s got a job for plugin %s", m.Name, req.Job.Plugin)
	}
	env := reconciler.Env{
		StateDir:  req.StateDir,
		Artifacts: dirSource(req.Artifacts),
		Log:       stderr,
		Logger:    slog.New(slog.NewTextHandler(stderr, nil)),
	}
	if err := s.call(ctx, &req, env, resp); err != nil {
		code := schemas.PluginFailed
		if errors.Is(err, debugcmd.ErrRefused) {
			code = schemas.PluginRefused
		}
		return fail(code, "%v", err)
	}
	return resp
}

// checkRequest checks what a request must hold, as its schema says.
func checkRequest(req *schemas.PluginRequest) error {
	switch {
	case req.APIVersion != schemas.APIVersion:
		return fmt.Errorf("apiVersion %q, want %s", req.APIVersion, schemas.APIVersion)
	case req.Kind != schemas.KindPluginRequest:
		return fmt.Errorf("kind %q, want %s", req.Kind, schemas.KindPluginRequest)
	case req.Protocol < 1:
		return errors.New("no protocol version")
	case req.Operation == schemas.PluginHandshake:
		return nil
	case !slices.Contains(schemas.PluginOperations, req.Operation):
		return fmt.Errorf("unknown operation %q", req.Operation)
	case req.Job == nil || req.StateDir == "" || req.WorkDir == "":
		return fmt.Errorf("a %s request needs a job, a stateDir and a workDir", req.Operation)
	case req.Job.ID == "" || !ValidName(req.Job.Plugin):
		return errors.New("the job has no id or plugin name")
	}
	return nil
}

// call runs the request's operation and fills in resp.
func (s *Server) call(ctx context.Context, req *schemas.PluginRequest, env reconciler.Env, resp *schemas.PluginResponse) error {
	job := req.Job
	fill := func(res *schemas.JobResult) {
		if res != nil {
			resp.Outputs, resp.Sensitive, resp.Changed = res.Outputs, res.Sensitive, res.Changed
			resp.Drift, resp.Health = res.Drift, res.Health
		}
	}
	// An apply that records a plan for approval (job.plan, mode record)
	// answers with its plan record.
	plan := func(res *schemas.JobResult) error {
		if res == nil || res.Plan == nil {
			return nil
		}
		b, err := json.Marshal(res.Plan)
		resp.Plan = b
		return err
	}
	switch req.Operation {
	case schemas.PluginPlan:
		plan, err := s.Plugin.(Planner).Plan(ctx, job, env)
		resp.Plan = plan
		return err
	case schemas.PluginApply:
		res, err := s.Plugin.Apply(ctx, job, env)
		fill(res)
		if err != nil {
			return err
		}
		return plan(res)
	case schemas.PluginDestroy:
		if err := s.Plugin.Destroy(ctx, job, env); err != nil {
			return err
		}
		resp.Changed = true
		return nil
	case schemas.PluginDrift:
		res, err := s.Plugin.(reconciler.DriftChecker).Drift(ctx, job, env)
		fill(res)
		resp.Changed = false
		return err
	case schemas.PluginHealth:
		h, err := s.Plugin.(reconciler.HealthChecker).Health(ctx, job, env)
		resp.Health = h
		return err
	case schemas.PluginDebug:
		if job.Debug == nil {
			return &debugcmd.Refusal{Reason: "a debug request has no command"}
		}
		cmd, err := debugcmd.Parse(job.Plugin, job.Debug.Command)
		if err != nil {
			return err
		}
		out := debugcmd.NewLimit(job.Debug.EffectiveMaxBytes())
		err = s.Plugin.(reconciler.Debugger).Debug(ctx, job, env, cmd, out)
		if err != nil && !errors.Is(err, debugcmd.ErrLimit) {
			return err
		}
		resp.Answer = out.Answer(cmd, nil)
		return nil
	}
	return fmt.Errorf("no operation %q", req.Operation)
}

// dirSource gives a plugin the artifacts the job extracted for it: the
// job process pulled and verified them, so extracting one here copies its
// directory.
type dirSource []schemas.PluginArtifact

var _ reconciler.ArtifactSource = dirSource(nil)

func (d dirSource) Extract(ctx context.Context, a schemas.Artifact, dir string) error {
	for _, pa := range d {
		if pa.Digest == a.Digest && pa.Name == a.Name {
			return copyTree(ctx, pa.Dir, dir)
		}
	}
	return fmt.Errorf("artifact %s %s is not among the request's", a.Name, a.Digest)
}

// copyTree copies the regular files and directories of src into dst;
// anything else (a link, a device) is refused, as artifacts hold none.
func copyTree(ctx context.Context, src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o700)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			return copyFile(path, target, info.Mode().Perm())
		}
		return fmt.Errorf("artifact file %s: not a regular file or directory", rel)
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm|0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

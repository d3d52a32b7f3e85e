package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/internal/debugcmd"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
)

// requestTimeout bounds one debug job.
const requestTimeout = 2 * time.Minute

// answer deals with the operators' requests that came with the desired
// state, each once: a request the status already records is skipped, so a
// restarted agent does not run it again. Before anything runs, the agent
// checks the requester's own signature against Config.RequestTrust
// (whatever the renderer checked), that the request is for this install,
// that its deadline has not passed, that the install's operations
// settings allow its kind, and (debug) that the command is on the
// plugin's read-only allow-list; a request failing any of these is
// refused with the reason. A logs request answers with the end of the
// component's last job log; a debug request runs as a bounded debug job.
// Answers are redacted and go into the status tree as answers/<id>.txt.
func (p *pass) answer(ctx context.Context) {
	a := p.agent
	st := &p.rec.Status
	now := a.cfg.Now()
	for id, rs := range st.Requests {
		// Past the renderer's look-back: it can no longer come back.
		if now.Sub(rs.Deadline) > schemas.MaxRequestLife {
			delete(st.Requests, id)
			delete(p.rec.Answers, id)
			p.rec.dirty = true
		}
	}
	d := p.current(ctx)
	if d == nil {
		return
	}
	for _, sr := range d.Requests {
		if ctx.Err() != nil {
			return
		}
		req, err := requests.Verify(sr, a.cfg.RequestTrust)
		if err != nil {
			// The id is not the requester's word; it only names the
			// refusal.
			loose := looseRequest(sr)
			if loose == nil {
				p.log.Error("a request in the desired state is unreadable; ignored", "error", err)
				continue
			}
			if _, done := st.Requests[loose.ID]; !done {
				reason := "the requester's signature does not verify on this agent: " + err.Error()
				if a.cfg.RequestTrust == nil {
					reason = NoRequestTrust
				}
				p.settle(loose, schemas.RequestRefused, reason, nil, nil)
			}
			continue
		}
		if _, done := st.Requests[req.ID]; done {
			continue
		}
		if err := requests.Check(req, a.cfg.Install, now); err != nil {
			p.settle(req, schemas.RequestRefused, err.Error(), nil, nil)
			continue
		}
		if !d.Install.Operations.Allows(req.Type) {
			p.settle(req, schemas.RequestRefused, fmt.Sprintf("%s requests are turned off by the install's own operations settings (operations.%s: false)", req.Type, req.Type), nil, nil)
			continue
		}
		if g := p.customerGate(); !g.requests {
			reason := "requests are turned off by the customer's policy (requests: false)"
			if g.broken != "" {
				reason = "the customer's policy cannot be read: " + g.broken
			}
			p.settle(req, schemas.RequestRefused, reason, nil, nil)
			continue
		}
		p.run1(ctx, d, req)
	}
}

// NoRequestTrust is the reason every request is refused by an agent that
// trusts no operator key.
const NoRequestTrust = "this agent trusts no operator key for requests: start it with --request-trust FILE " +
	"(or $NUON_REQUEST_TRUST), an allowed_signers file listing the operators' keys, like trust/requests on main"

// run1 answers one checked request.
func (p *pass) run1(ctx context.Context, d *Desired, req *schemas.Request) {
	a := p.agent
	log := p.log.With("request", req.ID, "component", req.Component)
	cs, ok := p.rec.Status.Components[req.Component]
	spec := p.rec.Applied[req.Component]
	if req.Component == "" || !ok || spec == nil {
		p.settle(req, schemas.RequestRefused, fmt.Sprintf("no applied component %q in this install", req.Component), nil, nil)
		return
	}
	if req.Type == schemas.RequestLogs {
		out, n, cut, err := jobLog(a.jobDir(cs.Job), req.Logs, schemas.DefaultDebugMaxBytes, a.cfg.Now())
		if err != nil {
			p.settle(req, schemas.RequestRefused, fmt.Sprintf("no log of %s's last job %s: %v", req.Component, cs.Job, err), nil, nil)
			return
		}
		p.settle(req, schemas.RequestAnswered, "", &schemas.Answer{Command: []string{"logs", req.Component}, Output: out, Bytes: n, Truncated: cut}, nil)
		log.Info("logs request answered", "bytes", n)
		return
	}
	if _, err := debugcmd.Parse(spec.Type, req.Command); err != nil {
		p.settle(req, schemas.RequestRefused, err.Error(), nil, nil)
		return
	}
	if !slices.Contains(a.cfg.Plugins, spec.Type) {
		p.settle(req, schemas.RequestRefused, fmt.Sprintf("this agent has no %s plugin", spec.Type), nil, nil)
		return
	}
	job := a.newJob(d, spec, schemas.OpDebug)
	job.Debug = &schemas.DebugRequest{Command: req.Command, Timeout: requestTimeout.String()}
	job.Timeout = requestTimeout.String()
	log = log.With("job", job.ID, "plugin", spec.Type)
	log.Info("debug request started", "requester", req.Requester)
	res, err := a.cfg.Runner.Run(ctx, job, a.jobDir(job.ID))
	if ctx.Err() != nil {
		return // stopping: not answered, so it runs after the restart
	}
	switch {
	case err != nil:
		p.settle(req, schemas.RequestRefused, "the debug job failed: "+err.Error(), nil, job)
	case res.Refused || res.Error != "":
		p.settle(req, schemas.RequestRefused, res.Error, nil, job)
	case res.Answer == nil:
		p.settle(req, schemas.RequestRefused, "the debug job gave no answer", nil, job)
	default:
		p.settle(req, schemas.RequestAnswered, "", res.Answer, job)
	}
}

// settle records how req ended: its state, and its answer as a blob.
func (p *pass) settle(req *schemas.Request, state, reason string, ans *schemas.Answer, job *schemas.Job) {
	a := p.agent
	st := &p.rec.Status
	if st.Requests == nil {
		st.Requests = map[string]schemas.RequestState{}
	}
	rs := schemas.RequestState{State: state, Type: req.Type, Component: req.Component, Requester: req.Requester,
		Deadline: req.Deadline.UTC(), At: a.cfg.Now().UTC().Truncate(time.Second), Reason: a.red.String(reason)}
	if job != nil {
		rs.Job = job.ID
		p.jobs = append(p.jobs, job)
	}
	if ans != nil {
		rs.Answer = schemas.AnswersDir + "/" + req.ID + ".txt"
		rs.Bytes, rs.Truncated = ans.Bytes, ans.Truncated
		p.rec.Answers[req.ID] = a.red.Bytes([]byte(ans.Output))
	}
	st.Requests[req.ID] = rs
	if state == schemas.RequestRefused {
		p.log.Warn("request refused", "request", req.ID, "requester", req.Requester, "reason", rs.Reason)
		p.note("request %s (%s from %s) refused: %s", req.ID, req.Type, req.Requester, rs.Reason)
		return
	}
	p.note("request %s (%s from %s) answered: %d bytes in %s", req.ID, req.Type, req.Requester, rs.Bytes, rs.Answer)
}

// looseRequest reads a request file without trusting it, to name a
// refusal; nil when it has no usable id.
func looseRequest(sr schemas.SignedRequest) *schemas.Request {
	var r schemas.Request
	if json.Unmarshal([]byte(sr.File), &r) != nil || !requestIDOK(r.ID) {
		return nil
	}
	return &r
}

func requestIDOK(id string) bool {
	if id == "" || len(id) > 63 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// jobLog returns the end of a job's log: the lines within since (lines
// that carry a time=… field older than that are left out), the last tail
// of them, and at most max bytes (the newest), with the log's size and
// whether it was cut.
func jobLog(dir string, bounds *schemas.LogsRequest, max int, now time.Time) (string, int, bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, jobs.LogFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", 0, false, errors.New("the job left no log")
		}
		return "", 0, false, err
	}
	var since time.Time
	tail := 0
	if bounds != nil {
		if d, err := time.ParseDuration(bounds.Since); err == nil && d > 0 {
			since = now.Add(-d)
		}
		tail = bounds.Tail
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !since.IsZero() {
			if t, ok := lineTime(line); ok && t.Before(since) {
				continue
			}
		}
		lines = append(lines, line)
	}
	if tail > 0 && len(lines) > tail {
		lines = lines[len(lines)-tail:]
	}
	out := strings.Join(lines, "\n")
	if len(lines) > 0 {
		out += "\n"
	}
	n, cut := len(out), false
	if len(out) > max {
		out, cut = out[len(out)-max:], true
	}
	return out, n, cut, nil
}

// lineTime reads the time=… field of a log/slog text line.
func lineTime(line string) (time.Time, bool) {
	i := strings.Index(line, "time=")
	if i < 0 {
		return time.Time{}, false
	}
	v, _, _ := strings.Cut(line[i+len("time="):], " ")
	t, err := time.Parse(time.RFC3339Nano, strings.Trim(v, `"`))
	return t, err == nil
}

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// apply plans the difference between the desired and the applied state and
// runs the jobs (see schedule), then sets the install's phase.
func (p *pass) apply(ctx context.Context) (outcome, error) {
	a := p.agent
	d := p.desired
	have := map[string]*reconciler.Applied{}
	outs := reconciler.Outputs{}
	sensitive := map[string][]string{}
	for name, cs := range p.rec.Status.Components {
		have[name] = &reconciler.Applied{Spec: p.rec.Applied[name], Status: cs}
		if cs.Phase == schemas.PhaseApplied {
			outs[name] = cs.Outputs
			sensitive[name] = cs.Sensitive
		}
	}
	if _, ok := outs[schemas.SandboxComponent]; !ok && d.Components[schemas.SandboxComponent] != nil {
		// Until the agent has applied the sandbox, the outputs create
		// recorded say where its registry is.
		if seed := a.sandboxSeed(); seed != nil {
			outs[schemas.SandboxComponent] = seed
		}
	}
	plan := reconciler.NewPlan(d.Components, d.Install.Components, have)
	var mu sync.Mutex
	failed := false
	schedule(ctx, plan, d.Install.Components, a.cfg.Concurrency, func(ctx context.Context, s reconciler.Step) {
		mu.Lock()
		blocker := p.blocker(s)
		switch {
		case blocker != "" && p.behindApproval(s):
			// A change that waits for its dependency's approval is
			// deferred with it, never blocked (which counts as failed).
			if p.rec.Status.Components[s.Component].Phase != schemas.PhaseApplied {
				p.setPhase(s.Component, schemas.PhasePending, blocker)
			}
		case blocker != "":
			p.setPhase(s.Component, schemas.PhaseBlocked, blocker)
		}
		mu.Unlock()
		if blocker == "" {
			p.step(ctx, s, &mu, outs, sensitive)
		}
	})
	p.finish()
	for _, cs := range p.rec.Status.Components {
		failed = failed || cs.Phase == schemas.PhaseFailed
	}
	a.retry.schedule(failed, a)
	return applied, nil
}

// schedule sets when failed components run again: after 4 intervals, then
// doubling with every pass that still fails, up to MaxBackoff.
func (r *jobRetry) schedule(failed bool, a *Agent) {
	if !failed {
		r.failures = 0
		return
	}
	r.failures++
	r.at = a.cfg.Now().Add(a.backoff(r.failures + 1))
}

// blocker says why a step cannot run yet: a dependency that is not applied.
// Callers hold the lock.
func (p *pass) blocker(s reconciler.Step) string {
	if s.Action != reconciler.Apply {
		return ""
	}
	for _, dep := range s.Desired.DependsOn {
		if cs := p.rec.Status.Components[dep]; cs.Phase != schemas.PhaseApplied {
			phase := cs.Phase
			if phase == "" {
				phase = "not applied"
			}
			return fmt.Sprintf("waiting for %s (%s)", dep, phase)
		}
	}
	return ""
}

func (p *pass) setPhase(name, phase, msg string) {
	cs := p.rec.Status.Components[name]
	if cs.Phase != phase || cs.Error != msg {
		p.rec.dirty = true
	}
	cs.Phase, cs.Error = phase, msg
	if d := p.desired; d != nil {
		if want, ok := d.Components[name]; ok && cs.Version == "" {
			cs.Version = want.Version
		}
	}
	p.rec.Status.Components[name] = cs
}

// step runs one plan step.
func (p *pass) step(ctx context.Context, s reconciler.Step, mu *sync.Mutex, outs reconciler.Outputs, sensitive map[string][]string) {
	a := p.agent
	log := p.log.With("component", s.Component)
	typ := ""
	var spec *schemas.ComponentState
	if s.Action == reconciler.Apply {
		typ = s.Desired.Type
	} else if s.Applied != nil && s.Applied.Spec != nil {
		typ = s.Applied.Spec.Type
		spec = s.Applied.Spec
	}
	if s.Action == reconciler.Delete && s.Component == schemas.SandboxComponent {
		// The agent never destroys the sandbox it runs on: nuon install
		// delete does, with the deprovision role, once every component is
		// gone. The record goes; the state stays where create put it.
		mu.Lock()
		delete(p.rec.Status.Components, s.Component)
		delete(p.rec.Applied, s.Component)
		p.rec.dirty = true
		p.note("left the sandbox to nuon install delete (not destroyed by the agent)")
		mu.Unlock()
		log.Info("sandbox no longer desired; left in place for nuon install delete")
		return
	}
	if s.Action == reconciler.Delete && spec == nil {
		// Never run: nothing to destroy, only the record to drop.
		mu.Lock()
		delete(p.rec.Status.Components, s.Component)
		p.rec.dirty = true
		mu.Unlock()
		return
	}
	supported := slices.Contains(a.cfg.Plugins, typ) || (typ == schemas.TypeImage && a.cfg.Sync != nil)
	if !supported {
		mu.Lock()
		p.setPhase(s.Component, schemas.PhaseNotReady, fmt.Sprintf("this agent has no %s plugin yet", typ))
		mu.Unlock()
		log.Warn("component type not supported by this agent", "plugin", typ)
		return
	}
	op := schemas.OpDelete
	if s.Action == reconciler.Apply {
		mu.Lock()
		resolved, err := reconciler.Resolve(s.Desired, outs, sensitive)
		mu.Unlock()
		if err != nil {
			mu.Lock()
			p.setPhase(s.Component, schemas.PhaseFailed, err.Error())
			mu.Unlock()
			return
		}
		spec = resolved
		if op = reconciler.Decide(resolved, s.Applied); op == "" {
			log.Debug("unchanged; no job")
			return
		}
		if typ == schemas.TypeImage && !p.imageAllowed(s, spec, mu) {
			// The customer's approval of the copy is missing: nothing
			// is copied (step_approve.go).
			return
		}
		if a.cfg.Sync != nil {
			if err := syncArtifacts(ctx, a.cfg.Sync, p.desired.Install.Channel, s.Component, spec.Artifacts); err != nil {
				mu.Lock()
				p.setPhase(s.Component, schemas.PhaseFailed, "sync artifacts: "+err.Error())
				mu.Unlock()
				log.Error("artifact sync failed; no job started", "error", err)
				return
			}
		}
		if typ == schemas.TypeImage {
			// An image component is its artifacts: synced is applied.
			mu.Lock()
			p.record(a.newJob(p.desired, spec, op), spec, s.Action, &schemas.JobResult{}, nil)
			mu.Unlock()
			return
		}
	} else if typ == schemas.TypeImage {
		// Deleting an image component leaves the copies in the install
		// registry, which the registry's own lifecycle policy collects.
		mu.Lock()
		p.record(a.newJob(p.desired, spec, op), spec, s.Action, &schemas.JobResult{}, nil)
		mu.Unlock()
		return
	}
	if s.Action == reconciler.Apply && p.planFirst(spec) {
		// Plan first, apply the saved plan once allowed (step_approve.go).
		p.approve(ctx, p.desired, s, spec, op, mu, outs, sensitive)
		return
	}
	job := a.newJob(p.desired, spec, op)
	log = log.With("job", job.ID, "plugin", typ)
	entry, err := a.journal(job, spec, s.Action)
	if err != nil {
		mu.Lock()
		p.setPhase(s.Component, schemas.PhaseFailed, err.Error())
		mu.Unlock()
		return
	}
	log.Info("job started", "operation", op, "version", job.Version)
	start := time.Now()
	res, err := a.run(ctx, job, p.desired.Install.Sandbox.Role)
	log.Info("job finished", "operation", op, "duration", time.Since(start).Round(time.Millisecond), "error", errString(err, res))
	mu.Lock()
	defer mu.Unlock()
	p.journal = append(p.journal, entry)
	p.jobs = append(p.jobs, job)
	if ctx.Err() != nil && err != nil {
		// The agent is stopping: leave the journal entry, so a restart
		// waits for the job and records how it ended.
		p.journal = p.journal[:len(p.journal)-1]
		p.setPhase(s.Component, schemas.PhasePending, "interrupted: the agent stopped during the job")
		return
	}
	p.record(job, spec, s.Action, res, err)
	if s.Action == reconciler.Apply && err == nil {
		outs[s.Component] = res.Outputs
		sensitive[s.Component] = res.Sensitive
	}
}

// record applies a job's outcome to the status. Callers hold the lock.
func (p *pass) record(job *schemas.Job, spec *schemas.ComponentState, action string, res *schemas.JobResult, err error) {
	p.rec.dirty = true
	name := job.Component
	if err == nil && res != nil && res.Error != "" {
		err = errors.New(res.Error)
	}
	cs := p.rec.Status.Components[name]
	cs.Job = job.ID
	if err != nil {
		cs.Phase, cs.Error = schemas.PhaseFailed, err.Error()
		cs.Version = job.Version
		p.rec.Status.Components[name] = cs
		if action == reconciler.Apply {
			// What a failed job may have created is destroyed with the
			// spec it ran with.
			p.rec.Applied[name] = spec
		}
		p.note("%s %s %s failed: %v", job.Operation, name, job.Version, err)
		return
	}
	if action == reconciler.Delete {
		delete(p.rec.Status.Components, name)
		delete(p.rec.Applied, name)
		p.note("%s", done(job))
		return
	}
	cs = schemas.ComponentStatus{
		Phase:     schemas.PhaseApplied,
		Version:   job.Version,
		Spec:      reconciler.SpecHash(spec),
		Outputs:   res.Outputs,
		Sensitive: res.Sensitive,
		Job:       job.ID,
		Digests:   map[string]string{},
		Health:    res.Health,
		// A dead job's lock broken to run: reported until the next apply.
		BrokenLock: res.BrokenLock,
	}
	// An apply is as good as a drift check: the schedule starts again.
	p.agent.checked[name] = p.agent.cfg.Now()
	for _, art := range job.Artifacts {
		cs.Digests[art.Name] = art.Digest
	}
	if len(cs.Digests) == 0 {
		cs.Digests = nil
	}
	p.rec.Status.Components[name] = cs
	p.rec.Applied[name] = spec
	p.note("%s", done(job))
}

// finish sets the install's phase after the jobs.
func (p *pass) finish() {
	st := &p.rec.Status
	phase := schemas.InstallReady
	for name, cs := range st.Components {
		if _, desired := p.desired.Components[name]; !desired || cs.Phase != schemas.PhaseApplied {
			phase = schemas.InstallDegraded
		}
	}
	for name := range p.desired.Components {
		if _, ok := st.Components[name]; !ok {
			phase = schemas.InstallDegraded
		}
	}
	phase = p.awaiting(phase)
	if st.Phase != phase {
		p.rec.dirty = true
	}
	st.Phase = phase
	if phase == schemas.InstallReady && st.Applied != st.Desired {
		st.Applied = st.Desired
		p.rec.dirty = true
	}
}

// run runs one apply or delete job; a sandbox job whose install names a
// role runs with that role's credentials in its environment.
func (a *Agent) run(ctx context.Context, job *schemas.Job, role *schemas.SandboxRole) (*schemas.JobResult, error) {
	if job.Component != schemas.SandboxComponent || role == nil {
		return a.cfg.Runner.Run(ctx, job, a.jobDir(job.ID))
	}
	er, ok := a.cfg.Runner.(jobs.EnvRunner)
	if !ok {
		return nil, fmt.Errorf("sandbox: the job runner cannot give a job the role %s's credentials", role.ARN)
	}
	if a.cfg.AssumeRole == nil {
		return nil, fmt.Errorf("sandbox: this agent cannot assume the role %s (no AWS identity configured)", role.ARN)
	}
	env, err := a.cfg.AssumeRole(ctx, *role)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return er.RunEnv(ctx, job, a.jobDir(job.ID), env)
}

// sandboxSeed reads the sandbox outputs nuon install create recorded in
// SandboxDir/outputs.json, or nil.
func (a *Agent) sandboxSeed() map[string]any {
	if a.cfg.SandboxDir == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(a.cfg.SandboxDir, SandboxOutputsFile))
	if err != nil {
		return nil
	}
	var outs map[string]any
	if err := json.Unmarshal(b, &outs); err != nil {
		a.log.Warn("sandbox outputs unreadable", "file", filepath.Join(a.cfg.SandboxDir, SandboxOutputsFile), "error", err)
		return nil
	}
	return outs
}

// SandboxOutputsFile is where, in Config.SandboxDir, nuon install create
// records the sandbox's outputs.
const SandboxOutputsFile = "outputs.json"

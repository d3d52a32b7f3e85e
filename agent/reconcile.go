package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/internal/atomicfile"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// reconcile is one pass of the agent's loop; its step functions run in
// order (see Agent.Reconcile).
type reconcile struct {
	agent *Agent
	log   *slog.Logger
	done  bool

	desiredHead plumbing.Hash // remote desired ref
	remoteHead  plumbing.Hash // remote status ref
	localHead   plumbing.Hash // local status ref
	rec         *record
	desired     *Desired
	changed     bool // the record changed and needs a commit
	summary     []string
	jobs        []*schemas.Job
	pending     []string // pending journal files to remove once recorded
	pushed      bool
}

func (r *reconcile) report() *Report {
	rep := &Report{Idle: r.done && !r.changed, StatusCommit: r.localHead, Pushed: r.pushed, Jobs: r.jobs}
	if r.rec != nil {
		rep.Status = r.rec.Status
	}
	return rep
}

// poll reads the remote desired and status refs in one request.
func (r *reconcile) poll(ctx context.Context) error {
	a := r.agent
	heads, err := a.cfg.Remote.Heads(ctx, DesiredRef(a.cfg.Install), StatusRef(a.cfg.Install))
	if err != nil {
		return fmt.Errorf("poll: %w", err)
	}
	r.desiredHead = heads[DesiredRef(a.cfg.Install)]
	r.remoteHead = heads[StatusRef(a.cfg.Install)]
	return nil
}

// loadStatus reads what was applied from the local status ref; a new
// workdir adopts the remote status so history continues.
func (r *reconcile) loadStatus(ctx context.Context) error {
	a := r.agent
	local, err := a.store.Reference(StatusRef(a.cfg.Install))
	switch {
	case err == nil:
		r.localHead = local.Hash()
	case errors.Is(err, plumbing.ErrReferenceNotFound) && !r.remoteHead.IsZero():
		if err := a.cfg.Remote.Fetch(ctx, a.store, r.remoteHead); err != nil {
			return fmt.Errorf("fetch status: %w", err)
		}
		if err := a.store.SetReference(plumbing.NewHashReference(StatusRef(a.cfg.Install), r.remoteHead)); err != nil {
			return err
		}
		r.localHead = r.remoteHead
		r.log.Info("adopted the remote status", "commit", short(r.remoteHead))
	case errors.Is(err, plumbing.ErrReferenceNotFound):
	default:
		return fmt.Errorf("read local status: %w", err)
	}
	if r.localHead.IsZero() {
		r.rec = newRecord(a.cfg.Install)
		r.changed = true
	} else if r.rec, err = a.loadRecord(r.localHead); err != nil {
		return err
	}
	// Whether this agent verifies artifacts is part of its status; a
	// change is worth a commit of its own.
	if p := a.artifactPolicy(); r.rec.Status.Artifacts != p {
		r.rec.Status.Artifacts = p
		r.changed = true
	}
	return nil
}

// pendingJob is a journal entry: written before a job starts, removed once
// a status commit records its outcome.
type pendingJob struct {
	Job    *schemas.Job            `json:"job"`
	Spec   *schemas.ComponentState `json:"spec"`
	Action string                  `json:"action"`
}

// recover finishes what a crashed agent left: for each job journalled as
// started, wait for any process of it still running and record its result.
func (r *reconcile) recover(ctx context.Context) error {
	a := r.agent
	if a.recovered {
		return nil
	}
	files, err := filepath.Glob(filepath.Join(a.cfg.Workdir, "pending", "*.json"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("recover: %w", err)
		}
		var p pendingJob
		if err := json.Unmarshal(data, &p); err != nil || p.Job == nil {
			r.log.Warn("dropping an unreadable journal entry", "file", f, "error", err)
			r.pending = append(r.pending, f)
			continue
		}
		log := r.log.With("job", p.Job.ID, "component", p.Job.Component)
		log.Info("recovering a job the agent was running when it stopped")
		res, err := a.cfg.Runner.Recover(ctx, a.jobDir(p.Job.ID))
		switch {
		case errors.Is(err, jobs.ErrNotFinished):
			log.Info("the job did not finish; it will be planned again")
		case err != nil && ctx.Err() != nil:
			return err
		default:
			r.record(p.Job, p.Spec, p.Action, res, err)
			log.Info("recorded the outcome of the recovered job", "error", errString(err, res))
		}
		r.pending = append(r.pending, f)
	}
	if len(r.pending) > 0 {
		r.changed = true
	}
	a.recovered = true
	return nil
}

// due reports whether the status calls for work even though the desired
// ref did not move: a component failed or was interrupted (retried after a
// pause), or a recovery changed the record.
func (r *reconcile) due() bool {
	if r.changed {
		return true
	}
	for _, cs := range r.rec.Status.Components {
		if cs.Phase == schemas.PhaseFailed || cs.Phase == schemas.PhasePending {
			return r.agent.cfg.Now().After(r.agent.retryAt)
		}
	}
	return false
}

// fetch brings the desired commit into the local store, unless the ref did
// not move since the last reconcile.
func (r *reconcile) fetch(ctx context.Context) error {
	a := r.agent
	st := r.rec.Status
	switch {
	case r.desiredHead.IsZero():
		r.log.Debug("no desired state rendered for this install yet")
		r.done = !r.changed
		if r.changed {
			r.rec.Status.Phase = schemas.InstallReady
		}
		return nil
	case st.Refusal != nil && st.Refusal.Commit == r.desiredHead.String():
		r.done = true // already refused and recorded
		return nil
	case st.Desired == r.desiredHead.String() && st.Refusal == nil && !r.due():
		r.done = true
		return nil
	}
	if err := a.cfg.Remote.Fetch(ctx, a.store, r.desiredHead); err != nil {
		return fmt.Errorf("fetch %s: %w", short(r.desiredHead), err)
	}
	return nil
}

// verify checks the desired commit; a refusal is recorded, not returned.
func (r *reconcile) verify(context.Context) error {
	if r.done || r.desiredHead.IsZero() {
		return nil
	}
	a := r.agent
	st := &r.rec.Status
	applied := Applied{Generation: st.Generation}
	if st.Desired != "" {
		applied.Commit = plumbing.NewHash(st.Desired)
	}
	d, err := Verify(a.store, r.desiredHead, a.cfg.Install, a.cfg.Trust, applied)
	var ref *Refusal
	if errors.As(err, &ref) {
		r.log.Error("refusing desired state; nothing applied", "commit", short(r.desiredHead), "reason", ref.Reason)
		st.Refusal = &schemas.Refusal{Commit: r.desiredHead.String(), Reason: ref.Reason}
		st.Phase = schemas.InstallRefused
		r.changed = true
		r.summary = append(r.summary, "Refused "+short(r.desiredHead)+": "+ref.Reason)
		return nil
	}
	if err != nil {
		return err
	}
	r.desired = d
	if st.Desired != d.Commit.String() {
		r.log.Info("new desired state", "commit", short(d.Commit), "generation", d.Generation, "signer", d.Signer.Principal)
		r.changed = true
	}
	if st.Refusal != nil {
		r.log.Info("desired state accepted again", "commit", short(d.Commit))
		r.changed = true
		st.Refusal = nil
	}
	st.Desired = d.Commit.String()
	st.Generation = d.Generation
	return nil
}

// apply plans the difference and runs the jobs, each after the ones it
// depends on, at most Concurrency at once.
func (r *reconcile) apply(ctx context.Context) error {
	if r.desired == nil {
		return nil
	}
	a := r.agent
	d := r.desired
	applied := map[string]*reconciler.Applied{}
	outs := reconciler.Outputs{}
	sensitive := map[string][]string{}
	for name, cs := range r.rec.Status.Components {
		applied[name] = &reconciler.Applied{Spec: r.rec.Applied[name], Status: cs}
		if cs.Phase == schemas.PhaseApplied {
			outs[name] = cs.Outputs
			sensitive[name] = cs.Sensitive
		}
	}
	plan := reconciler.NewPlan(d.Components, d.Install.Components, applied)

	var mu sync.Mutex
	finished := map[string]chan struct{}{}
	for _, s := range plan.Steps {
		finished[s.Component+"/"+s.Action] = make(chan struct{})
	}
	sem := make(chan struct{}, a.cfg.Concurrency)
	var wg sync.WaitGroup
	for _, s := range plan.Steps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(finished[s.Component+"/"+s.Action])
			for _, dep := range s.After {
				key := dep + "/" + reconciler.Apply
				if s.Action == reconciler.Delete && !slices.Contains(d.Install.Components, dep) {
					key = dep + "/" + reconciler.Delete
				}
				if ch, ok := finished[key]; ok {
					<-ch
				}
			}
			mu.Lock()
			blocker := r.blocker(s)
			mu.Unlock()
			if blocker != "" {
				mu.Lock()
				r.setPhase(s.Component, schemas.PhaseBlocked, blocker)
				mu.Unlock()
				return
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			r.step(ctx, s, &mu, outs, sensitive)
		}()
	}
	wg.Wait()
	r.finish()
	return nil
}

// blocker says why a step cannot run yet: a dependency that is not applied.
// Callers hold the lock.
func (r *reconcile) blocker(s reconciler.Step) string {
	if s.Action != reconciler.Apply {
		return ""
	}
	for _, dep := range s.Desired.DependsOn {
		if cs := r.rec.Status.Components[dep]; cs.Phase != schemas.PhaseApplied {
			phase := cs.Phase
			if phase == "" {
				phase = "not applied"
			}
			return fmt.Sprintf("waiting for %s (%s)", dep, phase)
		}
	}
	return ""
}

func (r *reconcile) setPhase(name, phase, msg string) {
	cs := r.rec.Status.Components[name]
	if cs.Phase != phase || cs.Error != msg {
		r.changed = true
	}
	cs.Phase, cs.Error = phase, msg
	if d := r.desired; d != nil {
		if want, ok := d.Components[name]; ok && cs.Version == "" {
			cs.Version = want.Version
		}
	}
	r.rec.Status.Components[name] = cs
}

// step runs one plan step.
func (r *reconcile) step(ctx context.Context, s reconciler.Step, mu *sync.Mutex, outs reconciler.Outputs, sensitive map[string][]string) {
	a := r.agent
	log := r.log.With("component", s.Component)
	typ := ""
	var spec *schemas.ComponentState
	if s.Action == reconciler.Apply {
		typ = s.Desired.Type
	} else if s.Applied != nil && s.Applied.Spec != nil {
		typ = s.Applied.Spec.Type
		spec = s.Applied.Spec
	}
	if s.Action == reconciler.Delete && spec == nil {
		// Never run: nothing to destroy, only the record to drop.
		mu.Lock()
		delete(r.rec.Status.Components, s.Component)
		r.changed = true
		mu.Unlock()
		return
	}
	supported := slices.Contains(a.cfg.Plugins, typ) || (typ == schemas.TypeImage && a.cfg.Sync != nil)
	if !supported {
		mu.Lock()
		r.setPhase(s.Component, schemas.PhaseNotReady, fmt.Sprintf("this agent has no %s plugin yet", typ))
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
			r.setPhase(s.Component, schemas.PhaseFailed, err.Error())
			mu.Unlock()
			return
		}
		spec = resolved
		if op = reconciler.Decide(resolved, s.Applied); op == "" {
			log.Debug("unchanged; no job")
			return
		}
		if a.cfg.Sync != nil {
			if err := a.cfg.Sync.Sync(ctx, spec.Artifacts); err != nil {
				mu.Lock()
				r.setPhase(s.Component, schemas.PhaseFailed, "sync artifacts: "+err.Error())
				mu.Unlock()
				log.Error("artifact sync failed; no job started", "error", err)
				return
			}
		}
		if typ == schemas.TypeImage {
			// An image component is its artifacts: synced is applied.
			mu.Lock()
			r.record(a.newJob(r.desired, spec, op), spec, s.Action, &schemas.JobResult{}, nil)
			mu.Unlock()
			return
		}
	} else if typ == schemas.TypeImage {
		// Deleting an image component leaves the copies in the install
		// registry, which the registry's own lifecycle policy collects.
		mu.Lock()
		r.record(a.newJob(r.desired, spec, op), spec, s.Action, &schemas.JobResult{}, nil)
		mu.Unlock()
		return
	}
	job := a.newJob(r.desired, spec, op)
	log = log.With("job", job.ID, "plugin", typ)
	pendingFile := filepath.Join(a.cfg.Workdir, "pending", job.ID+".json")
	entry, _ := json.Marshal(pendingJob{Job: job, Spec: spec, Action: s.Action})
	if err := atomicfile.Write(pendingFile, entry, 0o600); err != nil {
		mu.Lock()
		r.setPhase(s.Component, schemas.PhaseFailed, "journal: "+err.Error())
		mu.Unlock()
		return
	}
	log.Info("job started", "operation", op, "version", job.Version)
	start := time.Now()
	res, err := a.cfg.Runner.Run(ctx, job, a.jobDir(job.ID))
	log.Info("job finished", "operation", op, "duration", time.Since(start).Round(time.Millisecond), "error", errString(err, res))
	mu.Lock()
	defer mu.Unlock()
	r.pending = append(r.pending, pendingFile)
	r.jobs = append(r.jobs, job)
	if ctx.Err() != nil && err != nil {
		// The agent is stopping: leave the journal entry, so a restart
		// waits for the job and records how it ended.
		r.pending = r.pending[:len(r.pending)-1]
		r.setPhase(s.Component, schemas.PhasePending, "interrupted: the agent stopped during the job")
		return
	}
	r.record(job, spec, s.Action, res, err)
	if s.Action == reconciler.Apply && err == nil {
		outs[s.Component] = res.Outputs
		sensitive[s.Component] = res.Sensitive
	}
}

// record applies a job's outcome to the status. Callers hold the lock.
func (r *reconcile) record(job *schemas.Job, spec *schemas.ComponentState, action string, res *schemas.JobResult, err error) {
	r.changed = true
	name := job.Component
	if err == nil && res != nil && res.Error != "" {
		err = errors.New(res.Error)
	}
	cs := r.rec.Status.Components[name]
	cs.Job = job.ID
	if err != nil {
		cs.Phase, cs.Error = schemas.PhaseFailed, err.Error()
		cs.Version = job.Version
		r.rec.Status.Components[name] = cs
		if action == reconciler.Apply {
			// What a failed job may have created is destroyed with the
			// spec it ran with.
			r.rec.Applied[name] = spec
		}
		r.summary = append(r.summary, fmt.Sprintf("%s %s %s failed: %v", job.Operation, name, job.Version, err))
		r.agent.retryAt = r.agent.cfg.Now().Add(r.agent.cfg.Interval * 4)
		return
	}
	if action == reconciler.Delete {
		delete(r.rec.Status.Components, name)
		delete(r.rec.Applied, name)
		r.summary = append(r.summary, fmt.Sprintf("deleted %s", name))
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
	}
	for _, art := range job.Artifacts {
		cs.Digests[art.Name] = art.Digest
	}
	if len(cs.Digests) == 0 {
		cs.Digests = nil
	}
	r.rec.Status.Components[name] = cs
	r.rec.Applied[name] = spec
	r.summary = append(r.summary, fmt.Sprintf("%sd %s %s", strings.TrimSuffix(job.Operation, "e"), name, job.Version))
}

// finish sets the install's phase after the jobs.
func (r *reconcile) finish() {
	st := &r.rec.Status
	phase := schemas.InstallReady
	for name, cs := range st.Components {
		if _, desired := r.desired.Components[name]; !desired || cs.Phase != schemas.PhaseApplied {
			phase = schemas.InstallDegraded
		}
	}
	for name := range r.desired.Components {
		if _, ok := st.Components[name]; !ok {
			phase = schemas.InstallDegraded
		}
	}
	if st.Phase != phase {
		r.changed = true
	}
	st.Phase = phase
	if phase == schemas.InstallReady && st.Applied != st.Desired {
		st.Applied = st.Desired
		r.changed = true
	}
}

// writeStatus commits the record locally when it changed.
func (r *reconcile) writeStatus(context.Context) error {
	if !r.changed {
		return nil
	}
	a := r.agent
	summary := strings.Join(r.summary, "\n")
	if summary == "" {
		summary = "No jobs ran."
	}
	r.rec.Jobs = r.jobs
	commit, err := a.commitRecord(r.rec, r.localHead, summary)
	if err != nil {
		return err
	}
	r.localHead = commit
	for _, f := range r.pending {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("clear journal: %w", err)
		}
	}
	r.log.Info("status written", "commit", short(commit), "phase", r.rec.Status.Phase, "generation", r.rec.Status.Generation)
	if err := a.pruneJobDirs(keepJobDirs); err != nil {
		r.log.Warn("pruning old job directories", "error", err)
	}
	return nil
}

// keepJobDirs is how many finished jobs' directories (manifest, log,
// result) stay in the workdir; the status history keeps every manifest.
const keepJobDirs = 100

// pruneJobDirs removes the oldest job directories beyond keep, never one
// whose job is still journalled.
func (a *Agent) pruneJobDirs(keep int) error {
	entries, err := os.ReadDir(filepath.Join(a.cfg.Workdir, "jobs"))
	if err != nil || len(entries) <= keep {
		return err
	}
	type dir struct {
		name string
		mod  time.Time
	}
	var dirs []dir
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(a.cfg.Workdir, "pending", e.Name()+".json")); err == nil {
			continue
		}
		if info, err := e.Info(); err == nil && e.IsDir() {
			dirs = append(dirs, dir{e.Name(), info.ModTime()})
		}
	}
	sort.Slice(dirs, func(i, j int) bool { return dirs[i].mod.After(dirs[j].mod) })
	for _, d := range dirs[min(keep, len(dirs)):] {
		if err := os.RemoveAll(a.jobDir(d.name)); err != nil {
			return err
		}
	}
	return nil
}

// push sends the local status to the remote when the remote lacks it.
func (r *reconcile) push(ctx context.Context) error {
	a := r.agent
	if r.localHead.IsZero() || r.localHead == r.remoteHead {
		r.pushed = !r.localHead.IsZero()
		return nil
	}
	if ctx.Err() != nil {
		// Stopping: deliver the status with a short deadline of its own.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
	}
	if err := a.cfg.Remote.Push(ctx, a.store, StatusRef(a.cfg.Install), r.remoteHead, r.localHead); err != nil {
		return fmt.Errorf("push status: %w", err)
	}
	r.pushed = true
	r.log.Info("status pushed", "commit", short(r.localHead))
	return nil
}

// newJob writes the manifest of one job.
func (a *Agent) newJob(d *Desired, spec *schemas.ComponentState, op string) *schemas.Job {
	var suffix [3]byte
	_, _ = rand.Read(suffix[:])
	job := &schemas.Job{
		APIVersion: schemas.APIVersion,
		Kind:       schemas.KindJob,
		ID:         fmt.Sprintf("%s-g%d-%s-%s", spec.Name, d.Generation, op, hex.EncodeToString(suffix[:])),
		Install:    a.cfg.Install,
		Component:  spec.Name,
		Operation:  op,
		Plugin:     spec.Type,
		Version:    spec.Version,
		Generation: d.Generation,
		Commit:     d.Commit.String(),
		Inputs:     spec.Inputs,
		Terraform:  spec.Terraform,
		Helm:       spec.Helm,
		Manifests:  spec.Manifests,
		Timeout:    a.timeout(spec).String(),
		StateDir:   filepath.Join(a.cfg.Workdir, "components", spec.Name),
	}
	job.ResultFile = filepath.Join(a.jobDir(job.ID), "result.json")
	for _, art := range spec.Artifacts {
		art.Source = "" // jobs deploy from the install registry only
		job.Artifacts = append(job.Artifacts, art)
	}
	return job
}

func (a *Agent) timeout(cs *schemas.ComponentState) time.Duration {
	var s string
	switch {
	case cs.Terraform != nil:
		s = cs.Terraform.Timeout
	case cs.Helm != nil:
		s = cs.Helm.Timeout
	case cs.Manifests != nil:
		s = cs.Manifests.Timeout
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d
	}
	return a.cfg.JobTimeout
}

func (a *Agent) jobDir(id string) string { return filepath.Join(a.cfg.Workdir, "jobs", id) }

func errString(err error, res *schemas.JobResult) string {
	if err != nil {
		return err.Error()
	}
	if res != nil && res.Error != "" {
		return res.Error
	}
	return ""
}

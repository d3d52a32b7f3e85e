package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// drift runs the drift checks that are due: every applied component whose
// mode is not off and whose last check (or apply) is older than its
// schedule, at most Config.DriftConcurrency at once. A check is a read-only
// job (schemas.OpDrift) against the spec the component was applied with.
// What differs, per resource, and the component's health go into the
// status; a check that finds what the status already says changes nothing,
// so it writes no commit. In mode correct a check that finds drift
// re-applies exactly the applied spec, once. The install's own
// `operations: {drift: false}` turns every check off, and the status says
// the customer did.
func (p *pass) drift(ctx context.Context) error {
	a := p.agent
	// The customer's policy is read every pass, whatever else is due.
	g := p.customerGate()
	d := p.current(ctx)
	if d == nil {
		return nil // nothing verified to compare with yet
	}
	st := &p.rec.Status
	for _, kind := range []string{schemas.RequestLogs, schemas.RequestDebug, schemas.RequestDrift} {
		p.veto(kind, !d.Install.Operations.Allows(kind))
	}
	if !d.Install.Operations.Allows(schemas.RequestDrift) {
		return nil
	}
	now := a.cfg.Now()
	var due []*schemas.ComponentState
	for _, name := range slices.Sorted(maps.Keys(st.Components)) {
		cs, spec := st.Components[name], p.rec.Applied[name]
		if cs.Phase != schemas.PhaseApplied || spec == nil || spec.Type == schemas.TypeImage || !slices.Contains(a.cfg.Plugins, spec.Type) {
			continue
		}
		if spec.Drift.EffectiveMode() == schemas.DriftOff {
			continue
		}
		last, ok := a.checked[name]
		if !ok {
			// Never checked nor applied by this workdir's agent: the
			// schedule starts now.
			a.checked[name] = now
			continue
		}
		if now.Sub(last) < spec.Drift.EffectiveSchedule() && !(g.decision.Allowed && a.customer.fixLater[name]) {
			continue
		}
		due = append(due, spec)
	}
	defer a.saveChecked()
	if len(due) == 0 {
		return nil
	}
	var mu sync.Mutex
	sem := make(chan struct{}, a.cfg.DriftConcurrency)
	var wg sync.WaitGroup
	for _, spec := range due {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			p.check(ctx, d, spec, &mu)
		}()
	}
	wg.Wait()
	return nil
}

// check runs one component's drift check and, in mode correct, its
// correction. Callers do not hold mu.
func (p *pass) check(ctx context.Context, d *Desired, spec *schemas.ComponentState, mu *sync.Mutex) {
	a := p.agent
	log := p.log.With("component", spec.Name, "plugin", spec.Type)
	job := a.newJob(d, spec, schemas.OpDrift)
	log = log.With("job", job.ID)
	res, err := a.cfg.Runner.Run(ctx, job, a.jobDir(job.ID))
	if ctx.Err() != nil {
		return // stopping: the check runs again after the restart
	}
	if err == nil && res != nil && res.Error != "" {
		err = fmt.Errorf("%s", res.Error)
	}
	mu.Lock()
	a.checked[spec.Name] = a.cfg.Now()
	cs := p.rec.Status.Components[spec.Name]
	if err != nil {
		mu.Unlock()
		// A check that cannot run is logged, not committed: the next
		// schedule tries again, and the phase still says what was applied.
		log.Warn("drift check failed", "error", err)
		return
	}
	found := sortDrift(res.Drift)
	changed := !equalJSON(cs.Drift, found) || !equalJSON(cs.Health, res.Health) || cs.Corrected
	cs.Drift, cs.Corrected = found, false
	if res.Health != nil {
		cs.Health = res.Health
	}
	if changed {
		p.rec.dirty = true
		p.jobs = append(p.jobs, job)
		if len(found) == 0 {
			p.note("drift check %s: no drift", spec.Name)
		} else {
			p.note("drift check %s: %d resources differ: %s", spec.Name, len(found), driftSummary(found))
		}
	}
	p.rec.Status.Components[spec.Name] = cs
	mu.Unlock()
	if len(found) == 0 || spec.Drift.EffectiveMode() != schemas.DriftCorrect {
		log.Debug("drift check done", "drift", len(found))
		return
	}
	mu.Lock()
	allowed := p.correctionAllowed(spec.Name)
	mu.Unlock()
	if !allowed {
		log.Info("drift found; the correction waits for the customer's policy", "drift", len(found), "reason", p.gate.decision.Message)
		return
	}
	if p.planFirst(spec) {
		p.correctByPlan(ctx, d, spec, len(found), mu)
		return
	}
	log.Info("drift found; re-applying the applied spec", "drift", len(found))
	fix := a.newJob(d, spec, schemas.OpUpdate)
	res, err = a.cfg.Runner.Run(ctx, fix, a.jobDir(fix.ID))
	if ctx.Err() != nil {
		return
	}
	if err == nil && res != nil && res.Error != "" {
		err = fmt.Errorf("%s", res.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	p.jobs = append(p.jobs, fix)
	p.rec.dirty = true
	cs = p.rec.Status.Components[spec.Name]
	if err != nil {
		cs.Error = "drift correction failed: " + err.Error()
		p.note("drift correction %s failed: %v", spec.Name, err)
	} else {
		cs.Corrected, cs.Error, cs.Job = true, "", fix.ID
		if res.Health != nil {
			cs.Health = res.Health
		}
		p.note("drift correction %s: re-applied %s", spec.Name, spec.Version)
	}
	p.rec.Status.Components[spec.Name] = cs
}

// correctByPlan corrects the drift of a component with approval settings
// the way its changes are applied: the correction is planned as a record
// (the plan shows what it sets back), judged by the plan policies, and
// applied only when its change kinds are auto-approved or a signed
// approval names its hash; otherwise the component waits,
// AwaitingApproval, and the install with it (deferred, not failed).
// Nothing is re-applied unseen.
func (p *pass) correctByPlan(ctx context.Context, d *Desired, spec *schemas.ComponentState, drifted int, mu *sync.Mutex) {
	p.log.Info("drift found; planning the correction", "component", spec.Name, "drift", drifted)
	step := reconciler.Step{Component: spec.Name, Action: reconciler.Apply}
	applied := p.approve(ctx, d, step, spec, schemas.OpUpdate, mu, reconciler.Outputs{}, map[string][]string{})
	mu.Lock()
	defer mu.Unlock()
	st := &p.rec.Status
	cs := st.Components[spec.Name]
	switch {
	case applied:
		cs.Corrected = true
		p.note("drift correction %s: applied its plan", spec.Name)
	case cs.Phase == schemas.PhaseAwaitingApproval:
		p.note("drift correction %s waits for approval of plan %s", spec.Name, shortPlan(cs.Plan))
	}
	st.Components[spec.Name] = cs
	if phase := p.awaiting(schemas.InstallDegraded); phase == schemas.InstallAwaitingApproval && st.Phase != phase {
		st.Phase = phase
	}
	p.rec.dirty = true
}

// current is the newest verified desired state: this pass's, or the one
// an earlier pass verified, or (after a restart) the one the status names,
// verified again from the local store. Nil when there is none, so nothing
// runs on a state the agent cannot verify: the customer's veto cannot be
// skipped by a restart.
func (p *pass) current(ctx context.Context) *Desired {
	a := p.agent
	if p.desired != nil {
		a.current = p.desired
	}
	if a.current != nil {
		return a.current
	}
	h := hashOf(p.rec.Status.Desired)
	if h.IsZero() {
		return nil
	}
	d, err := a.verifyRecorded(h)
	if err != nil && h == p.desiredHead && a.store.HasEncodedObject(h) != nil {
		// A fresh workdir that adopted the remote status has not fetched
		// the desired commit it names.
		if ferr := a.cfg.Remote.Fetch(ctx, a.store, h); ferr == nil {
			d, err = a.verifyRecorded(h)
		}
	}
	if err != nil {
		p.log.Warn("the recorded desired state does not verify; nothing runs between renders", "commit", short(h), "error", err)
		return nil
	}
	a.current = d
	return d
}

// veto records whether the install's own configuration turned kind off,
// so the status says the customer did.
func (p *pass) veto(kind string, off bool) {
	st := &p.rec.Status
	has := slices.Contains(st.Vetoed, kind)
	switch {
	case off && !has:
		st.Vetoed = append(st.Vetoed, kind)
		sort.Strings(st.Vetoed)
		p.note("%s turned off by the install's operations settings", kind)
	case !off && has:
		st.Vetoed = slices.DeleteFunc(st.Vetoed, func(k string) bool { return k == kind })
		if len(st.Vetoed) == 0 {
			st.Vetoed = nil
		}
		p.note("%s turned back on by the install's operations settings", kind)
	}
}

func sortDrift(ds []schemas.ResourceDrift) []schemas.ResourceDrift {
	if len(ds) == 0 {
		return nil
	}
	out := slices.Clone(ds)
	sort.SliceStable(out, func(i, j int) bool { return driftKey(out[i]) < driftKey(out[j]) })
	return out
}

func driftKey(d schemas.ResourceDrift) string {
	if d.Address != "" {
		return d.Address
	}
	return d.Kind + "/" + d.Namespace + "/" + d.Name
}

func driftSummary(ds []schemas.ResourceDrift) string {
	var parts []string
	for i, d := range ds {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("and %d more", len(ds)-i))
			break
		}
		parts = append(parts, driftKey(d)+" "+d.Action)
	}
	return fmt.Sprint(parts)
}

func equalJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// checkedFile keeps, in the workdir, when each component was last checked
// for drift, so a restart (or `nuon agent --once`) keeps the schedules.
const checkedFile = "drift.json"

func (a *Agent) loadChecked() {
	data, err := os.ReadFile(filepath.Join(a.cfg.Workdir, checkedFile))
	if err != nil {
		return
	}
	_ = json.Unmarshal(data, &a.checked)
	if a.checked == nil {
		a.checked = map[string]time.Time{}
	}
}

func (a *Agent) saveChecked() {
	data, err := json.Marshal(a.checked)
	if err != nil {
		return
	}
	tmp := filepath.Join(a.cfg.Workdir, checkedFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err == nil {
		_ = os.Rename(tmp, filepath.Join(a.cfg.Workdir, checkedFile))
	}
}

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"nuon.dev/nuon/internal/atomicfile"
	"nuon.dev/nuon/schemas"
)

// healthFile keeps, in the workdir, when each component's health was last
// checked, so a restart (or `nuon agent --once`) keeps the schedule.
const healthFile = "health.json"

// health re-checks, every Config.HealthInterval, how each applied
// component stands, with a read-only job (schemas.OpHealth) against the
// spec it was applied with: kstatus over the objects of a helm or
// manifests component, terraform.health for a terraform component that
// names one. So Ready means "checked within one health interval", not
// "applied once".
//
// An apply or a drift check of the component counts as a check: its
// result carries the health too.
//
// A check that cannot reach the component's resources (the cluster is
// gone) or finds some of them gone (not found) fails it: the component
// turns Failed with the reason, the install Degraded, and a status commit
// says so; the failed component is re-applied on the job retry schedule,
// so an install whose sandbox came back converges again. A check that
// finds the resources but not Ready (Progressing, Failed) records their
// health, as an apply does, and leaves the phase. A check whose result is
// what the status already says writes nothing.
func (p *pass) health(ctx context.Context) error {
	a := p.agent
	if a.cfg.HealthInterval <= 0 || p.rec.Status.Stale {
		return nil
	}
	d := p.current(ctx)
	if d == nil {
		return nil
	}
	now := a.cfg.Now()
	checked := a.loadHealthChecked()
	st := &p.rec.Status
	failed := false
	for _, name := range slices.Sorted(maps.Keys(st.Components)) {
		cs, spec := st.Components[name], p.rec.Applied[name]
		if cs.Phase != schemas.PhaseApplied || spec == nil || !healthCheckable(spec) || !slices.Contains(a.cfg.Plugins, spec.Type) {
			continue
		}
		// An apply or a drift check tells the health too (a.checked).
		last, ok := checked[name]
		if t, applied := a.checked[name]; applied && t.After(last) {
			last, ok = t, true
		}
		if !ok {
			// Never checked by this workdir's agent: the schedule starts
			// now.
			checked[name] = now
			continue
		}
		if now.Sub(last) < a.cfg.HealthInterval {
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		job := a.newJob(d, spec, schemas.OpHealth)
		log := p.log.With("component", name, "plugin", spec.Type, "job", job.ID)
		res, err := a.cfg.Runner.Run(ctx, job, a.jobDir(job.ID))
		if ctx.Err() != nil {
			return nil // stopping: checked again after the restart
		}
		checked[name] = a.cfg.Now()
		if err == nil && res != nil && res.Error != "" {
			err = fmt.Errorf("%s", res.Error)
		}
		var h *schemas.Health
		if res != nil {
			h = res.Health
		}
		if reason := healthFailure(err, h); reason != "" {
			failed = true
			cs.Phase, cs.Error = schemas.PhaseFailed, reason
			if h != nil {
				cs.Health = h
			}
			st.Components[name] = cs
			p.jobs = append(p.jobs, job)
			log.Warn("health check failed; the component is no longer Ready", "reason", reason)
			p.note("health check %s failed: %s", name, reason)
			continue
		}
		if h != nil && !equalJSON(cs.Health, h) {
			cs.Health = h
			st.Components[name] = cs
			p.jobs = append(p.jobs, job)
			p.note("health check %s: %s", name, h.Status)
		}
		log.Debug("health checked", "health", healthStatus(h))
	}
	a.saveHealthChecked(checked)
	if failed {
		st.Phase = schemas.InstallDegraded
		a.retry.schedule(true, a)
	}
	return nil
}

// healthCheckable says whether a component's plugin can check its health
// without changing anything: the Kubernetes plugins always, terraform
// when the component names an output to check.
func healthCheckable(spec *schemas.ComponentState) bool {
	switch spec.Type {
	case schemas.TypeHelm, schemas.TypeManifests:
		return true
	case schemas.TypeTerraform:
		return spec.Terraform != nil && spec.Terraform.Health != nil && spec.Terraform.Health.Output != ""
	}
	return false
}

// healthFailure says why a health check fails the component, or "" when
// it does not: the check could not run (its resources cannot be reached)
// or some of its resources are gone.
func healthFailure(err error, h *schemas.Health) string {
	if err != nil {
		return "health check failed: " + err.Error()
	}
	if h == nil {
		return ""
	}
	var gone []string
	for _, r := range h.Resources {
		if r.Status == schemas.HealthFailed && strings.Contains(strings.ToLower(r.Message), "not found") {
			id := r.Address
			if id == "" {
				id = r.Kind + "/" + r.Name
				if r.Namespace != "" {
					id = r.Kind + "/" + r.Namespace + "/" + r.Name
				}
			}
			gone = append(gone, id)
		}
	}
	if len(gone) > 0 {
		return "resources gone: " + strings.Join(gone, ", ")
	}
	return ""
}

func healthStatus(h *schemas.Health) string {
	if h == nil {
		return ""
	}
	return h.Status
}

func (a *Agent) loadHealthChecked() map[string]time.Time {
	out := map[string]time.Time{}
	if data, err := os.ReadFile(filepath.Join(a.cfg.Workdir, healthFile)); err == nil {
		_ = json.Unmarshal(data, &out)
	}
	return out
}

func (a *Agent) saveHealthChecked(checked map[string]time.Time) {
	if err := atomicfile.WriteJSON(filepath.Join(a.cfg.Workdir, healthFile), checked); err != nil {
		a.log.Warn("record the health checks", "error", err)
	}
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"nuon.dev/nuon/policy"
	"nuon.dev/nuon/policy/plans"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// approve runs the change of a component with approval settings
// (spec.Approval): it plans first (a plan-bound job in mode record, which
// changes nothing and keeps the saved plan in the component's state
// directory), and applies that saved plan, and nothing else, once it is
// allowed: at once when its change kinds are auto-approved (a no-op always
// is), else when the install's signed approvals (Desired.Approvals,
// verified against Config.Approvers) approve its very hash. Until then the
// component is AwaitingApproval and its status carries the plan's record.
//
// A plan waiting for the same resolved spec is not planned again: an
// approval never causes a re-plan. When the spec moved, the new plan keeps
// the waiting one if it makes exactly the same change (its approval still
// holds); otherwise the waiting one is gone, and so is what approved it.
//
// d is the verified desired state the change is judged under (the pass's,
// or for a drift correction the current one). approve reports whether it
// applied the saved plan.
func (p *pass) approve(ctx context.Context, d *Desired, s reconciler.Step, spec *schemas.ComponentState, op string, mu *sync.Mutex, outs reconciler.Outputs, sensitive map[string][]string) bool {
	a := p.agent
	name := s.Component
	log := p.log.With("component", name)
	specHash := reconciler.SpecHash(spec)

	mu.Lock()
	pending := p.rec.Status.Components[name].Plan
	mu.Unlock()
	rec := pending
	if rec == nil || rec.Spec != specHash {
		keep := ""
		if pending != nil {
			keep = pending.Hash
		}
		job := a.newJob(d, spec, op)
		job.Plan = &schemas.JobPlan{Mode: schemas.PlanRecordMode, Keep: keep}
		log.Info("plan started", "job", job.ID, "keep", keep)
		res, err := a.run(ctx, job, d.Install.Sandbox.Role)
		if err == nil && res != nil && res.Error != "" {
			err = errors.New(res.Error)
		}
		var got *schemas.PlanRecord
		if err == nil {
			got, err = planRecord(res, job)
		}
		mu.Lock()
		p.jobs = append(p.jobs, job)
		if err != nil {
			p.setPlan(name, nil)
			p.setPhase(name, schemas.PhaseFailed, "plan: "+err.Error())
			p.note("plan %s %s failed: %v", name, spec.Version, err)
			mu.Unlock()
			return false
		}
		mu.Unlock()
		rec = got
		rec.Spec = specHash
	}
	rec = clonePlan(rec)
	// Without approval settings the vendor asks for no approval: a
	// component planned first only because the customer's policy names it
	// waits for the customer alone.
	needs, why := false, ""
	if spec.Approval != nil {
		needs, why = spec.Approval.Needs(rec.Summary)
	}
	j, err := p.judgePlan(ctx, d, spec, rec)
	rec.Denied, rec.Warnings = j.Deny, j.Warn
	if err != nil || len(j.Deny) > 0 {
		msg := "denied by policy: " + strings.Join(j.Deny, "; ")
		if err != nil {
			// A policy that cannot be evaluated blocks, never lets through.
			msg = "blocked: " + err.Error()
			rec.Denied = []string{bound(err.Error(), maxDeferredMessage)}
		}
		mu.Lock()
		p.setPlan(name, rec)
		p.setPhase(name, schemas.PhaseRejected, bound(fmt.Sprintf("plan %s %s", rec.Hash, msg), maxDeferredMessage))
		mu.Unlock()
		log.Warn("plan blocked by policy", "plan", rec.Hash, "reason", msg)
		return false
	}
	if len(j.Warn) > 0 && !needs {
		needs, why = true, "policy warns: "+strings.Join(j.Warn, "; ")
	}
	var customer *policy.Customer
	if p.gate != nil {
		customer = p.gate.policy
	}
	customerNeeds, customerWhy := customer.Needs(name, rec.Summary)
	rec.Customer = customerWhy
	approvedBy := "auto-approved"
	if needs {
		approvers, aerr := a.approvers()
		v := approvers.Judge(d.Approvals, policy.Target{
			Install: a.cfg.Install, Channel: d.Install.Channel, Component: name, Plan: rec.Hash,
		}, a.cfg.Now())
		rec.Refused, rec.Needs, rec.Rejected = v.Refused, why, v.Rejected
		mu.Lock()
		switch {
		case v.Rejected != "":
			p.setPlan(name, rec)
			p.setPhase(name, schemas.PhaseRejected, fmt.Sprintf("plan %s rejected by %s; nothing is applied until the plan changes", rec.Hash, v.Rejected))
			mu.Unlock()
			return false
		case !v.Approved:
			switch {
			case aerr != nil:
				why += "; this agent trusts no approver key: " + aerr.Error()
			case approvers == nil:
				why += "; this agent trusts no approver key"
			}
			p.setPlan(name, rec)
			p.setPhase(name, schemas.PhaseAwaitingApproval, fmt.Sprintf("plan %s waits for approval (%s)", rec.Hash, why))
			mu.Unlock()
			log.Info("plan waits for approval", "plan", rec.Hash, "why", why, "refused", len(v.Refused))
			return false
		}
		mu.Unlock()
		approvedBy = "approved by " + strings.Join(v.Approvers, ", ")
	}
	if customerNeeds {
		by, ok := p.customerApproval(d, name, rec, customer, mu)
		if !ok {
			return false
		}
		approvedBy += "; the customer's approval by " + by
	}

	job := a.newJob(d, spec, op)
	job.Plan = &schemas.JobPlan{Mode: schemas.PlanApplyMode, Hash: rec.Hash}
	entry, err := a.journal(job, spec, s.Action)
	if err != nil {
		mu.Lock()
		p.setPhase(name, schemas.PhaseFailed, err.Error())
		mu.Unlock()
		return false
	}
	log.Info("applying saved plan", "job", job.ID, "plan", rec.Hash, "approval", approvedBy)
	start := time.Now()
	res, err := a.run(ctx, job, d.Install.Sandbox.Role)
	log.Info("job finished", "job", job.ID, "duration", time.Since(start).Round(time.Millisecond), "error", errString(err, res))
	mu.Lock()
	defer mu.Unlock()
	p.journal = append(p.journal, entry)
	p.jobs = append(p.jobs, job)
	if ctx.Err() != nil && err != nil {
		p.journal = p.journal[:len(p.journal)-1]
		p.setPhase(name, schemas.PhasePending, "interrupted: the agent stopped during the job")
		return false
	}
	p.record(job, spec, s.Action, res, err)
	if err == nil && (res == nil || res.Error == "") {
		p.note("applied plan %s of %s (%s)", rec.Hash, name, approvedBy)
		outs[name] = res.Outputs
		sensitive[name] = res.Sensitive
		return true
	}
	// A saved plan that failed to apply (stale, gone, or its apply
	// failed) is never tried again: the next pass plans afresh, and a
	// plan that needs approval needs it again.
	p.setPlan(name, nil)
	return false
}

// customerApproval judges the customer's own approvals of rec (the
// customer's policy requires one): signed by a key pinned in that policy,
// never one the vendor trusts, for this install, component and plan, not
// expired. Without one the component waits (AwaitingApproval, deferred
// for the customer's approval); a customer's reject rejects the plan. It
// returns who approved.
func (p *pass) customerApproval(d *Desired, name string, rec *schemas.PlanRecord, customer *policy.Customer, mu *sync.Mutex) (string, bool) {
	a := p.agent
	local, unreadable := a.customerApprovals()
	vendor, _ := a.approvers()
	v := customer.ApprovalKeys(vendor).Judge(local, policy.Target{
		Install: a.cfg.Install, Channel: d.Install.Channel, AnyChannel: true, Component: name, Plan: rec.Hash,
	}, a.cfg.Now())
	for _, r := range append(unreadable, v.Refused...) {
		rec.Refused = append(rec.Refused, "customer: "+r)
	}
	if len(rec.Refused) > schemas.MaxRefusals {
		rec.Refused = rec.Refused[len(rec.Refused)-schemas.MaxRefusals:]
	}
	rec.CustomerApproved = v.Approvers
	mu.Lock()
	defer mu.Unlock()
	switch {
	case v.Rejected != "":
		rec.Rejected = v.Rejected
		p.setPlan(name, rec)
		p.setPhase(name, schemas.PhaseRejected, fmt.Sprintf("plan %s rejected by the customer's approver %s; nothing is applied until the plan changes", rec.Hash, v.Rejected))
		return "", false
	case !v.Approved:
		rec.Needs = rec.Customer
		p.setPlan(name, rec)
		p.setPhase(name, schemas.PhaseAwaitingApproval, fmt.Sprintf("plan %s waits for the customer's own approval (%s)", rec.Hash, rec.Customer))
		p.log.Info("plan waits for the customer's approval", "component", name, "plan", rec.Hash, "refused", len(v.Refused)+len(unreadable))
		return "", false
	}
	return strings.Join(v.Approvers, ", "), true
}

// planRecord is the record a plan job returned, or else the one it left
// beside the saved plan in the component's state directory.
func planRecord(res *schemas.JobResult, job *schemas.Job) (*schemas.PlanRecord, error) {
	if res != nil && res.Plan != nil {
		return res.Plan, nil
	}
	recs, err := reconciler.SavedPlanRecords(job.StateDir)
	if err != nil {
		return nil, fmt.Errorf("read the saved plan's record: %w", err)
	}
	for i := range recs {
		if recs[i].Job == job.ID || (job.Plan != nil && recs[i].Hash == job.Plan.Keep) {
			return &recs[i], nil
		}
	}
	return nil, errors.New("the plan job returned no plan record")
}

// setPlan sets a component's waiting plan. Callers hold the lock.
func (p *pass) setPlan(name string, rec *schemas.PlanRecord) {
	cs := p.rec.Status.Components[name]
	if !planEqual(cs.Plan, rec) {
		p.rec.dirty = true
		if rec != nil && rec.Needs != "" && (cs.Plan == nil || cs.Plan.Hash != rec.Hash) {
			p.note("plan %s of %s waits for approval: %s", rec.Hash, name, rec.Needs)
		}
	}
	cs.Plan = rec
	p.rec.Status.Components[name] = cs
}

func planEqual(a, b *schemas.PlanRecord) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Hash == b.Hash && a.Spec == b.Spec && a.Needs == b.Needs && a.Rejected == b.Rejected && slices.Equal(a.Refused, b.Refused)
}

func clonePlan(r *schemas.PlanRecord) *schemas.PlanRecord {
	c := *r
	c.Refused = slices.Clone(r.Refused)
	return &c
}

// awaiting is the install's phase after the jobs: AwaitingApproval when
// a component waits for approval and every other one is applied, and the
// status says the change is deferred (reason approval), not failed; once
// nothing waits, that deferral ends.
func (p *pass) awaiting(phase string) string {
	st := &p.rec.Status
	var waiting []string
	other := false
	for name, cs := range st.Components {
		switch cs.Phase {
		case schemas.PhaseAwaitingApproval:
			waiting = append(waiting, name+" (plan "+shortPlan(cs.Plan)+")")
		case schemas.PhaseApplied:
		case schemas.PhasePending:
			other = other || !p.behind[name]
		default:
			other = true
		}
	}
	if len(waiting) == 0 || other || phase == schemas.InstallReady {
		if st.Deferred != nil && (st.Deferred.Reason == schemas.DeferredApproval || st.Deferred.Reason == schemas.DeferredCustomerApproval) {
			st.Deferred = nil
			p.rec.dirty = true
		}
		return phase
	}
	slices.Sort(waiting)
	reason := schemas.DeferredCustomerApproval
	for _, cs := range st.Components {
		if cs.Phase == schemas.PhaseAwaitingApproval && (cs.Plan == nil || cs.Plan.Customer == "" || cs.Plan.Needs != cs.Plan.Customer) {
			reason = schemas.DeferredApproval
		}
	}
	want := &schemas.Deferred{
		Reason:  reason,
		Message: bound(map[string]string{schemas.DeferredApproval: "waiting for a signed approval of ", schemas.DeferredCustomerApproval: "waiting for the customer's own signed approval of "}[reason]+strings.Join(waiting, ", "), maxDeferredMessage),
		Since:   p.agent.cfg.Now().UTC().Truncate(time.Second),
		Commit:  st.Desired,
	}
	if st.Deferred != nil && (st.Deferred.Reason == schemas.DeferredApproval || st.Deferred.Reason == schemas.DeferredCustomerApproval) {
		want.Since = st.Deferred.Since
	}
	if !st.Deferred.Equal(want) {
		st.Deferred = want
		p.rec.dirty = true
	}
	return schemas.InstallAwaitingApproval
}

func shortPlan(r *schemas.PlanRecord) string {
	if r == nil {
		return "?"
	}
	return strings.TrimPrefix(r.Hash, "sha256:")[:12]
}

// judgePlan evaluates the desired state's plan policies on the saved plan
// (its JSON form in the component's state directory), within their time
// bound. No policies: nothing to say.
func (p *pass) judgePlan(ctx context.Context, d *Desired, spec *schemas.ComponentState, rec *schemas.PlanRecord) (plans.Judgement, error) {
	if len(d.Policies) == 0 {
		return plans.Judgement{}, nil
	}
	set, err := plans.Compile(d.Policies)
	if err != nil {
		return plans.Judgement{}, err
	}
	dir := filepath.Join(p.agent.cfg.Workdir, "components", spec.Name)
	if spec.Name == schemas.SandboxComponent && p.agent.cfg.SandboxDir != "" {
		dir = p.agent.cfg.SandboxDir // as newJob
	}
	plan, err := reconciler.SavedPlanJSON(dir, rec.Hash)
	if err != nil {
		return plans.Judgement{}, fmt.Errorf("read the plan for its policies: %w", err)
	}
	return set.Evaluate(ctx, map[string]any{
		"install": p.agent.cfg.Install, "component": spec.Name, "type": spec.Type, "plan": plan,
	})
}

// behindApproval says whether s waits only because a dependency waits
// for an approval (or waits behind one itself), and notes it. Callers
// hold the lock.
func (p *pass) behindApproval(s reconciler.Step) bool {
	if s.Action != reconciler.Apply || s.Desired == nil {
		return false
	}
	for _, dep := range s.Desired.DependsOn {
		cs := p.rec.Status.Components[dep]
		if cs.Phase != schemas.PhaseApplied && cs.Phase != schemas.PhaseAwaitingApproval && !p.behind[dep] {
			return false
		}
	}
	if p.behind == nil {
		p.behind = map[string]bool{}
	}
	p.behind[s.Component] = true
	return true
}

// planFirst says whether a change of spec is planned as a record and
// applied only as approvals allow: its plugin plans as records, and it has
// approval settings or the customer's policy requires the customer's
// approval of some of its changes.
func (p *pass) planFirst(spec *schemas.ComponentState) bool {
	if !planBound(spec.Type) {
		return false
	}
	if spec.Approval != nil {
		return true
	}
	if p.gate == nil || p.gate.policy == nil || p.gate.policy.Require == nil {
		return false
	}
	r := p.gate.policy.Require
	return len(r.Components) == 0 || slices.Contains(r.Components, spec.Name)
}

// planBound says whether components of type typ honour approval settings:
// their plugins plan as records (schemas.JobPlan) and apply only a saved
// plan by its hash.
func planBound(typ string) bool {
	return typ == schemas.TypeTerraform || typ == schemas.TypeManifests || typ == schemas.TypeHelm
}

// imageFormat names the record an image component's change is hashed
// as (imageChange).
const imageFormat = "nuon-image"

// imageChange is the record of the change an image component's apply
// makes, for the customer's approval: an image component has no plugin
// and no saved plan, its apply is the copy of its artifacts into the
// install registry. The change kinds, against applied (the spec last
// applied, nil for none):
//
//   - create: an artifact the applied spec does not list (every artifact
//     of a first apply);
//   - update: an artifact listed by the same name with another digest;
//   - delete: an artifact the applied spec listed and the desired one no
//     longer does (its copy stays in the registry, whose lifecycle policy
//     collects it: nothing is removed, but the install stops using it);
//   - replace: never; a copy by digest is not a replacement.
//
// A change of the spec that moves no digest has no kind: it never waits.
// The hash is "sha256:" and the SHA-256 of the canonical JSON of exactly
// what the agent copies: the format, the component's name and its
// artifacts (name, source, local reference, digest, media type), sorted
// by name. An approval of that hash approves that copy and no other.
func imageChange(spec, applied *schemas.ComponentState) (*schemas.PlanRecord, error) {
	arts := slices.Clone(spec.Artifacts)
	slices.SortFunc(arts, func(x, y schemas.Artifact) int { return strings.Compare(x.Name, y.Name) })
	data, err := reconciler.Canonical(map[string]any{
		"format": imageFormat, "component": spec.Name, "artifacts": arts,
	})
	if err != nil {
		return nil, fmt.Errorf("hash the image change of %s: %w", spec.Name, err)
	}
	rec := &schemas.PlanRecord{
		Component: spec.Name,
		Hash:      reconciler.HashBytes(data),
		Spec:      reconciler.SpecHash(spec),
		Size:      int64(len(data)),
	}
	had := map[string]string{}
	if applied != nil {
		for _, art := range applied.Artifacts {
			had[art.Name] = art.Digest
		}
	}
	var lines []string
	add := func(kind, name, line string) {
		if rec.Summary.Counts == nil {
			rec.Summary.Counts = map[string]int{}
		}
		rec.Summary.Counts[kind]++
		switch kind {
		case schemas.ChangeCreate:
			rec.Summary.Create = append(rec.Summary.Create, name)
		case schemas.ChangeUpdate:
			rec.Summary.Update = append(rec.Summary.Update, name)
		case schemas.ChangeDelete:
			rec.Summary.Delete = append(rec.Summary.Delete, name)
		}
		lines = append(lines, line)
	}
	want := map[string]bool{}
	for _, art := range arts {
		want[art.Name] = true
		switch old, ok := had[art.Name]; {
		case !ok:
			add(schemas.ChangeCreate, art.Name, "+ "+art.Name+" "+art.Digest)
		case old != art.Digest:
			add(schemas.ChangeUpdate, art.Name, "~ "+art.Name+" "+old+" → "+art.Digest)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(had)) {
		if !want[name] {
			add(schemas.ChangeDelete, name, "- "+name+" "+had[name]+" (no longer used; the copy stays)")
		}
	}
	rec.Diff, rec.DiffTruncated = reconciler.BoundDiff(strings.Join(lines, "\n"))
	return rec, nil
}

// imageAllowed says whether the apply of image component spec (the copy
// of its artifacts) may run now: yes unless the customer's policy
// requires the customer's approval of its change (imageChange), and then
// only once the customer approved that change's hash. Until then nothing
// is copied, the component is AwaitingApproval with the change's record
// in its status, and the install is deferred for the customer's approval.
// Callers do not hold the lock.
func (p *pass) imageAllowed(s reconciler.Step, spec *schemas.ComponentState, mu *sync.Mutex) bool {
	var customer *policy.Customer
	if p.gate != nil {
		customer = p.gate.policy
	}
	if customer == nil || customer.Require == nil {
		return true
	}
	var applied *schemas.ComponentState
	if s.Applied != nil && s.Applied.Status.Phase != schemas.PhaseDeleted {
		applied = s.Applied.Spec
	}
	rec, err := imageChange(spec, applied)
	if err != nil {
		mu.Lock()
		p.setPhase(s.Component, schemas.PhaseFailed, err.Error())
		mu.Unlock()
		return false
	}
	needs, why := customer.Needs(s.Component, rec.Summary)
	if !needs {
		return true
	}
	rec.Customer = why
	by, ok := p.customerApproval(p.desired, s.Component, rec, customer, mu)
	if ok {
		mu.Lock()
		p.note("copying the artifacts of %s (change %s; the customer's approval by %s)", s.Component, rec.Hash, by)
		mu.Unlock()
	}
	return ok
}

package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"nuon.dev/nuon/policy"
	"nuon.dev/nuon/schemas"
)

// maxDeferredMessage bounds the message of a deferred state: a broken
// policy file's problems are summed up, not copied whole into git.
const maxDeferredMessage = 1000

// customerGate is what the customer's policy (Config.CustomerPolicy) says
// during one pass, read once per pass.
type customerGate struct {
	decision policy.Decision
	// requests says whether vendor requests are answered.
	requests bool
	// broken is the reason the policy file could not be read, if it
	// could not: the install then holds and refuses requests.
	broken string
	// policy is the customer's policy as read, nil without one.
	policy *policy.Customer
}

// customerMemory is what the agent keeps of the customer's policy between
// passes.
type customerMemory struct {
	// seen is the last decision logged, so a change is logged once.
	seen string
	// fixLater are components whose drift correction the policy held
	// back: they are checked again as soon as it allows.
	fixLater map[string]bool
}

// customerGate reads the customer's policy, once per pass, and decides
// for now. Without Config.CustomerPolicy every change is allowed. A file
// that is missing or does not parse holds the install: it is never read
// as "no rules".
func (p *pass) customerGate() *customerGate {
	if p.gate != nil {
		return p.gate
	}
	a := p.agent
	g := &customerGate{decision: policy.Decision{Allowed: true}, requests: true}
	if path := a.cfg.CustomerPolicy; path != "" {
		c, err := policy.Load(path)
		if err != nil {
			// One line: it goes into a table and a commit message.
			err = errors.New(strings.ReplaceAll(err.Error(), "\n", "; "))
			g.broken = bound(err.Error(), maxDeferredMessage)
			g.decision = policy.Decision{Reason: schemas.DeferredHold,
				Message: bound("the customer's policy cannot be read, so nothing is applied until it can: "+err.Error(), maxDeferredMessage)}
			g.requests = false
		} else {
			g.decision = policy.Decide(c, a.cfg.Now())
			g.requests = c.Requests
			g.policy = c
		}
	}
	if seen := g.decision.Reason + g.decision.Message; seen != a.customer.seen {
		a.customer.seen = seen
		if g.decision.Allowed {
			p.log.Info("the customer's policy allows changes", "window", g.decision.Window)
		} else {
			p.log.Warn("the customer's policy defers changes", "reason", g.decision.Reason, "message", g.decision.Message)
		}
	}
	p.gate = g
	return g
}

// customer lets the verified desired state be applied only when the
// customer's policy allows it now. Otherwise nothing is applied and the
// status records the change as deferred (schemas.Deferred: a hold, or no
// open window and when the next opens): one status commit when the
// deferred state changes, none on later passes. The next pass the policy
// allows applies the change.
func (p *pass) customer(context.Context) (outcome, error) {
	g := p.customerGate()
	st := &p.rec.Status
	if g.decision.Allowed || st.Desired == st.Applied {
		// Allowed, or nothing is held back.
		if st.Deferred != nil && st.Deferred.Reason != schemas.DeferredApproval && st.Deferred.Reason != schemas.DeferredCustomerApproval {
			// A plan that waits for approval stays deferred: the apply
			// step says when it no longer does (awaiting).
			p.note("No longer deferred (%s since %s): %s.", st.Deferred.Reason, st.Deferred.Since.Format(time.RFC3339), goAhead(g))
			st.Deferred = nil
		}
		if g.decision.Allowed {
			return proceed, nil
		}
		return settled, nil
	}
	want := &schemas.Deferred{
		Reason:  g.decision.Reason,
		Message: g.decision.Message,
		Since:   p.agent.cfg.Now().UTC().Truncate(time.Second),
		Commit:  st.Desired,
	}
	if !g.decision.Opens.IsZero() {
		until := g.decision.Opens
		want.Until = &until
	}
	if st.Deferred != nil && st.Deferred.Reason == want.Reason {
		want.Since = st.Deferred.Since
	}
	if !st.Deferred.Equal(want) {
		st.Deferred = want
		p.log.Info("change deferred by the customer's policy; nothing applied", "commit", short(hashOf(st.Desired)), "reason", want.Reason, "message", want.Message)
		p.note("Deferred %s (%s): %s", short(hashOf(st.Desired)), want.Reason, want.Message)
	}
	if st.Phase == "" || st.Phase == schemas.InstallRefused {
		// The phase says how the applied components stand; the
		// desired commit was accepted.
		st.Phase = schemas.InstallReady
		for _, cs := range st.Components {
			if cs.Phase != schemas.PhaseApplied {
				st.Phase = schemas.InstallDegraded
			}
		}
		p.rec.dirty = true
	}
	return deferred, nil
}

// correctionAllowed says whether a drift correction of component may run
// now; one the customer's policy holds back runs at the first check after
// it allows.
func (p *pass) correctionAllowed(component string) bool {
	a := p.agent
	if p.gate == nil || p.gate.decision.Allowed {
		delete(a.customer.fixLater, component)
		return true
	}
	if a.customer.fixLater == nil {
		a.customer.fixLater = map[string]bool{}
	}
	a.customer.fixLater[component] = true
	return false
}

func goAhead(g *customerGate) string {
	switch {
	case g.decision.Allowed && g.decision.Window != "":
		return "window " + g.decision.Window + " is open"
	case g.decision.Allowed:
		return "the customer's policy allows changes"
	}
	return "nothing is held back"
}

func bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// customerApprovalExt ends the names of the customer's signed approvals
// in Config.CustomerApprovals.
const customerApprovalExt = ".approval.json"

// Bounds of the customer's approvals folder.
const (
	maxCustomerApprovals    = 100
	maxCustomerApprovalSize = 64 << 10
)

// customerApprovals reads the customer's signed approvals: the files
// NAME.approval.json (schemas.SignedApproval, as `nuon approve -o json`
// prints them) in Config.CustomerApprovals, or else beside the customer's
// policy file, inside the install. They never come from main. A file that
// cannot be read is listed as refused, and nothing it says counts.
func (a *Agent) customerApprovals() ([]schemas.SignedApproval, []string) {
	dir := a.cfg.CustomerApprovals
	if dir == "" && a.cfg.CustomerPolicy != "" {
		dir = filepath.Dir(a.cfg.CustomerPolicy)
	}
	if dir == "" {
		return nil, nil
	}
	files, err := filepath.Glob(filepath.Join(dir, "*"+customerApprovalExt))
	if err != nil {
		return nil, []string{err.Error()}
	}
	sort.Strings(files)
	var out []schemas.SignedApproval
	var refused []string
	if len(files) > maxCustomerApprovals {
		refused = append(refused, fmt.Sprintf("%d customer approvals in %s, more than %d: only the first are read", len(files), dir, maxCustomerApprovals))
		files = files[:maxCustomerApprovals]
	}
	for _, f := range files {
		data, err := readBounded(f, maxCustomerApprovalSize)
		var s schemas.SignedApproval
		if err == nil {
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			err = dec.Decode(&s)
		}
		if err != nil {
			refused = append(refused, fmt.Sprintf("%s: %v", filepath.Base(f), err))
			continue
		}
		out = append(out, s)
	}
	return out, refused
}

// readBounded reads at most limit bytes of path; a larger file is an
// error.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return data, nil
}

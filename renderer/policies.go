package renderer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/policy"
	"nuon.dev/nuon/schemas"
)

// maxApprovalFiles bounds the approvals read per install: more are
// dropped, newest name last, with a warning.
const maxApprovalFiles = 200

// approvalOf is a component's approval rules for install in: the
// install's override (installs/<id>.yaml approvals), else nuon.yaml's.
func approvalOf(in schemas.Install, c schemas.Component) *schemas.ApprovalSettings {
	if a, ok := in.Approvals[c.Name]; ok {
		return a
	}
	return c.Approval
}

// loadApprovals reads the approvals filed on schemas.ApprovalsRef
// (Options.Approvals) and keeps, per install of the source, the ones
// signed by a key trust/approvals on main lists and not expired: each such
// install gets installs/<id>/approvals.json and is rendered. The renderer
// does not judge a key's channel scope or the plan: the agent, which knows
// both, checks every approval again. An approval that does not verify is
// dropped and the render warns. Without trust/approvals on main no
// approval is accepted.
func (r *renderRun) loadApprovals(context.Context) error {
	if r.opts.Approvals.IsZero() {
		return nil
	}
	approvers, err := r.approvalTrust()
	if err != nil || approvers == nil {
		return err
	}
	_, files, err := gitobj.ReadCommitFiles(r.st, r.opts.Approvals, 64<<10)
	if err != nil {
		return fmt.Errorf("read %s: %w", schemas.ApprovalsRef, err)
	}
	by := map[string][]schemas.SignedApproval{}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		parts := strings.Split(name, "/")
		if len(parts) != 3 || parts[0] != schemas.ApprovalsDir || !strings.HasSuffix(parts[2], ".json") {
			r.result.Warnings = append(r.result.Warnings, fmt.Sprintf("%s: %s is not an approval file (approvals/<install>/<name>.json)", schemas.ApprovalsRef, name))
			continue
		}
		id := parts[1]
		var s schemas.SignedApproval
		if err := json.Unmarshal(files[name], &s); err != nil {
			r.result.Warnings = append(r.result.Warnings, fmt.Sprintf("approval %s dropped: %v", name, err))
			continue
		}
		a, err := approvers.Verify(s, policy.Target{Install: id, AnyChannel: true}, r.now)
		if errors.Is(err, policy.ErrApprovalExpired) {
			continue
		}
		if err == nil && schemas.ApprovalPath(a) != name {
			err = fmt.Errorf("its content belongs in %s", schemas.ApprovalPath(a))
		}
		if err != nil {
			r.result.Warnings = append(r.result.Warnings, fmt.Sprintf("approval %s dropped: %v", name, err))
			continue
		}
		if len(by[id]) == maxApprovalFiles {
			r.result.Warnings = append(r.result.Warnings, fmt.Sprintf("approval %s dropped: %s already has %d approvals", name, id, maxApprovalFiles))
			continue
		}
		by[id] = append(by[id], s)
	}
	known := r.sourceInstalls()
	r.approvals = map[string][]byte{}
	reload := false
	for id, as := range by {
		if !known(id) {
			r.result.Warnings = append(r.result.Warnings, fmt.Sprintf("%d approvals for %s dropped: no such install on main", len(as), id))
			continue
		}
		data, err := json.MarshalIndent(schemas.InstallApprovals{APIVersion: schemas.APIVersion, Kind: schemas.KindInstallApprovals, Approvals: as}, "", "  ")
		if err != nil {
			return err
		}
		r.approvals[id] = append(data, '\n')
		if r.changed != nil && !r.changed[id] {
			reload = true
		}
	}
	if reload {
		return r.openSource()
	}
	return nil
}

// approvalTrust reads trust/approvals from the source commit; nil when
// main has none.
func (r *renderRun) approvalTrust() (*policy.Approvers, error) {
	data, err := r.trustFile(schemas.ApproversPath, policy.MaxApproversSize, "no approval is accepted")
	if data == nil || err != nil {
		return nil, err
	}
	return policy.ParseApprovers(schemas.ApproversPath, data)
}

// PoliciesDir is the folder of Rego policies on plans on main, rendered as
// they are into every install's state (policies/<name>.rego).
const PoliciesDir = "policies"

// maxPolicies bounds the policy files rendered.
const maxPolicies = 100

// loadPolicies reads policies/*.rego from the source commit, checks them
// with Options.CheckPolicies (a policy that does not compile fails the
// render at its file and line) and keeps them for every install's state,
// signed with it: the agent evaluates them on its plans.
func (r *renderRun) loadPolicies(context.Context) error {
	c, err := gitobj.ReadCommit(r.st, r.source)
	if err != nil {
		return err
	}
	tree, err := gitobj.ReadTree(r.st, c.TreeHash)
	if err != nil {
		return err
	}
	e, err := tree.FindEntry(PoliciesDir)
	if errors.Is(err, object.ErrEntryNotFound) || errors.Is(err, object.ErrDirectoryNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	files, err := gitobj.ReadFiles(r.st, e.Hash, 64<<10)
	if err != nil {
		return fmt.Errorf("%s on main: %w", PoliciesDir, err)
	}
	policies := map[string]string{}
	for name, data := range files {
		if !strings.HasSuffix(name, ".rego") || strings.Contains(name, "/") {
			r.result.Warnings = append(r.result.Warnings, fmt.Sprintf("%s/%s: not a policy (policies/<name>.rego); not rendered", PoliciesDir, name))
			continue
		}
		policies[PoliciesDir+"/"+name] = string(data)
	}
	if len(policies) > maxPolicies {
		return schemas.Problems{{File: PoliciesDir, Message: fmt.Sprintf("%d policies, more than %d", len(policies), maxPolicies)}}
	}
	if r.opts.CheckPolicies != nil {
		if err := r.opts.CheckPolicies(policies); err != nil {
			return err
		}
	}
	r.policies = policies
	return nil
}

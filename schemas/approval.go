package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Phases of a component and an install whose change waits for approval.
const (
	// PhaseAwaitingApproval: the component's saved plan (ComponentStatus.Plan)
	// waits for a signed approval of its hash.
	PhaseAwaitingApproval = "AwaitingApproval"
	// PhaseRejected: an approver rejected the saved plan; nothing is applied
	// until the plan changes.
	PhaseRejected = "Rejected"
	// InstallAwaitingApproval: a component waits for approval and none failed.
	InstallAwaitingApproval = "AwaitingApproval"
)

// Approval modes (ApprovalSettings.Mode).
const (
	// ApprovalAuto: a change whose kinds are all in AutoApprove and none in
	// Require applies by itself; any other waits for a signed approval.
	ApprovalAuto = "auto"
	// ApprovalManual: every change but a no-op waits for a signed approval.
	ApprovalManual = "manual"
)

// Kinds of change a plan makes (ApprovalSettings lists, PlanSummary).
const (
	ChangeNoop    = "noop"
	ChangeCreate  = "create"
	ChangeUpdate  = "update"
	ChangeDelete  = "delete"
	ChangeReplace = "replace"
)

// ApprovalSettings are a component's approval rules: approval in nuon.yaml,
// overridable per install (Install.Approvals). Absent means today's
// behaviour: every plan applies at once and no plan is recorded.
type ApprovalSettings struct {
	// Mode is ApprovalAuto or ApprovalManual; default ApprovalAuto.
	Mode string `yaml:"mode,omitempty" json:"mode,omitempty"`
	// AutoApprove are the kinds of change that apply without approval in
	// mode auto; default DefaultAutoApprove.
	AutoApprove []string `yaml:"autoApprove,omitempty" json:"autoApprove,omitempty"`
	// Require are the kinds of change that always need approval; default
	// DefaultRequire. Require wins over AutoApprove.
	Require []string `yaml:"require,omitempty" json:"require,omitempty"`
}

// Defaults of ApprovalSettings.
var (
	DefaultAutoApprove = []string{ChangeNoop, ChangeCreate, ChangeUpdate}
	DefaultRequire     = []string{ChangeDelete, ChangeReplace}
)

// Effective fills s's defaults.
func (s *ApprovalSettings) Effective() ApprovalSettings {
	e := ApprovalSettings{Mode: ApprovalAuto, AutoApprove: DefaultAutoApprove, Require: DefaultRequire}
	if s == nil {
		return e
	}
	if s.Mode != "" {
		e.Mode = s.Mode
	}
	if s.AutoApprove != nil {
		e.AutoApprove = s.AutoApprove
	}
	if s.Require != nil {
		e.Require = s.Require
	}
	return e
}

// Needs says whether a plan that makes the change kinds of sum waits for
// an approval, and why. A no-op never waits.
func (s *ApprovalSettings) Needs(sum PlanSummary) (bool, string) {
	kinds := sum.Kinds()
	if len(kinds) == 0 {
		return false, ""
	}
	e := s.Effective()
	if e.Mode == ApprovalManual {
		return true, "mode manual: every change is approved"
	}
	for _, k := range kinds {
		if slices.Contains(e.Require, k) {
			return true, fmt.Sprintf("%s requires approval", k)
		}
	}
	for _, k := range kinds {
		if !slices.Contains(e.AutoApprove, k) {
			return true, fmt.Sprintf("%s is not auto-approved", k)
		}
	}
	return false, ""
}

// PlanSummary is what a plan changes, by resource address (Terraform) or
// object (Helm, manifests), each list sorted.
type PlanSummary struct {
	Create  []string `json:"create,omitempty"`
	Update  []string `json:"update,omitempty"`
	Delete  []string `json:"delete,omitempty"`
	Replace []string `json:"replace,omitempty"`
	// Truncated counts the addresses left out of the lists to bound the
	// record; the counts stay exact.
	Truncated int `json:"truncated,omitempty"`
	// Counts are the number of resources per kind, exact even when the
	// lists are cut.
	Counts map[string]int `json:"counts,omitempty"`
}

// Kinds are the change kinds the plan makes, in a fixed order; empty for
// a no-op.
func (s PlanSummary) Kinds() []string {
	var out []string
	for _, k := range []string{ChangeCreate, ChangeUpdate, ChangeDelete, ChangeReplace} {
		if s.Counts[k] > 0 {
			out = append(out, k)
		}
	}
	return out
}

// Plan record bounds.
const (
	// MaxPlanDiff bounds a plan record's readable diff; more is cut and the
	// record says so. The plan stays approvable by its hash.
	MaxPlanDiff = 64 << 10
	// MaxPlanAddresses bounds the addresses a summary lists.
	MaxPlanAddresses = 200
)

// PlanRecord is a saved plan as the agent publishes it in its signed
// status: what an approver reads and names by Hash. The saved plan itself
// never leaves the install.
type PlanRecord struct {
	Component string `json:"component"`
	// Hash is "sha256:" and the hex SHA-256 of the saved plan file: what an
	// approval names, and what the plugin checks before it applies.
	Hash string `json:"hash"`
	// Spec is the hash of the resolved component the plan was made for.
	Spec string `json:"spec,omitempty"`
	// Job is the plan job's id.
	Job string `json:"job,omitempty"`
	// Size is the saved plan's size in bytes.
	Size int64 `json:"size,omitempty"`
	// Summary is what the plan changes.
	Summary PlanSummary `json:"summary"`
	// Diff is the readable diff, redacted and cut at MaxPlanDiff.
	Diff string `json:"diff,omitempty"`
	// DiffTruncated says Diff was cut.
	DiffTruncated bool `json:"diffTruncated,omitempty"`
	// Needs says why the plan waits for approval; empty when it does not.
	Needs string `json:"needs,omitempty"`
	// Refused lists approvals the agent refused for this component, newest
	// last, at most MaxRefusals: who signed, for what, and why.
	Refused []string `json:"refused,omitempty"`
	// Rejected names the approver who rejected this plan.
	Rejected string `json:"rejected,omitempty"`
	// Denied are the messages of the plan policies' deny rules: the plan
	// is blocked, whoever approves it.
	Denied []string `json:"denied,omitempty"`
	// Warnings are the messages of their warn rules: the plan needs an
	// approval even where its kinds of change would not.
	Warnings []string `json:"warnings,omitempty"`
	// Customer says why the customer's own policy requires the customer's
	// approval of this plan (signed by a key pinned in that policy), in
	// addition to the vendor's; empty when it does not. CustomerApproved
	// names the customer's approvers once they have.
	Customer         string   `json:"customer,omitempty"`
	CustomerApproved []string `json:"customerApproved,omitempty"`
}

// MaxRefusals bounds PlanRecord.Refused.
const MaxRefusals = 10

// Plan-job modes (JobPlan.Mode).
const (
	// PlanRecordMode: plan, keep the saved plan in the component's state
	// directory and return its record; change nothing.
	PlanRecordMode = "record"
	// PlanApplyMode: apply the saved plan whose hash is JobPlan.Hash and
	// nothing else.
	PlanApplyMode = "apply"
)

// JobPlan makes an apply job plan-bound (Job.Plan).
type JobPlan struct {
	Mode string `json:"mode"`
	// Hash is the saved plan to apply (mode apply).
	Hash string `json:"hash,omitempty"`
	// Keep is the pending plan (mode record): when the new plan makes
	// exactly the same change, the pending plan is kept and its record
	// returned, so that its approval still holds.
	Keep string `json:"keep,omitempty"`
}

// planHash is "sha256:" and 64 lower-case hex digits.
var planHash = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// ValidPlanHash reports whether h is a plan hash.
func ValidPlanHash(h string) bool { return planHash.MatchString(h) }

// KindApproval is the kind of an Approval.
const KindApproval = "Approval"

// Approval decisions.
const (
	DecisionApprove = "approve"
	DecisionReject  = "reject"
)

// ApprovalsFile is where an install's approvals are in its rendered tree.
const ApprovalsFile = "approvals.json"

// ApprovalsRef is the ref approvals are filed on: its tip's tree holds
// every filed approval as ApprovalsDir/<install>/<name>.json, each a
// SignedApproval; the renderer puts an install's into its rendered state.
const ApprovalsRef = "refs/heads/nuon/approvals"

// ApprovalsDir is the folder of ApprovalsRef's tree.
const ApprovalsDir = "approvals"

// ApprovalPath is where an approval is filed on ApprovalsRef: one file per
// install, component, plan, approver and decision, so that filing the
// same decision again replaces it.
func ApprovalPath(a *Approval) string {
	plan := strings.TrimPrefix(a.Plan, "sha256:")
	if len(plan) > 16 {
		plan = plan[:16]
	}
	approver := approverName.ReplaceAllString(strings.ToLower(a.Approver), "-")
	return fmt.Sprintf("%s/%s/%s-%s-%s-%s.json", ApprovalsDir, a.Install, a.Component, plan, approver, a.Decision)
}

var approverName = regexp.MustCompile(`[^a-z0-9.-]+`)

// ApprovalNamespace is the SSH signature namespace of an approval: a
// signature made for anything else (a commit, a request) never counts as
// one.
const ApprovalNamespace = "nuon-approval@nuon.dev"

// Approval is one approver's decision on one saved plan of one component
// of one install. It is signed as a whole (SignedApproval).
type Approval struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Install    string `json:"install"`
	Component  string `json:"component"`
	// Plan is the plan's hash (PlanRecord.Hash).
	Plan string `json:"plan"`
	// Decision is DecisionApprove or DecisionReject.
	Decision string `json:"decision"`
	// Approver is the signing key's name in the approvers' list.
	Approver string    `json:"approver"`
	Created  time.Time `json:"created"`
	// Expires: after it the agent refuses the approval.
	Expires time.Time `json:"expires"`
	Reason  string    `json:"reason,omitempty"`
}

// SignedApproval is an approval file and its armored SSH signature
// (namespace ApprovalNamespace) over exactly those bytes.
type SignedApproval struct {
	File      string `json:"file"`
	Signature string `json:"signature"`
}

// KindApprovers is the kind of Approvers.
const KindApprovers = "Approvers"

// ApproversPath is the file on main that lists the approvers' keys.
const ApproversPath = "trust/approvals"

// Approvers is ApproversPath: the keys trusted to approve plans, shaped as
// a role of the trust root (TrustRole) so that it can become one.
type Approvers struct {
	APIVersion string      `yaml:"apiVersion" json:"apiVersion"`
	Kind       string      `yaml:"kind" json:"kind"`
	Threshold  int         `yaml:"threshold" json:"threshold"`
	Scope      *TrustScope `yaml:"scope,omitempty" json:"scope,omitempty"`
	Keys       []TrustKey  `yaml:"keys" json:"keys"`
}

// KindInstallApprovals is the kind of InstallApprovals.
const KindInstallApprovals = "InstallApprovals"

// InstallApprovals is ApprovalsFile: the signed approvals for one install.
type InstallApprovals struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Approvals  []SignedApproval `json:"approvals"`
}

// ErrInvalidApproval marks an approval file that is not one.
var ErrInvalidApproval = errors.New("invalid approval")

// maxApproval bounds an approval file.
const maxApproval = 8 << 10

// DecodeApproval checks an approval file against its JSON Schema, decodes
// it strictly and checks what the agent relies on. Every error wraps
// ErrInvalidApproval.
func DecodeApproval(data []byte) (*Approval, error) {
	if len(data) > maxApproval {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidApproval, len(data), maxApproval)
	}
	if err := ValidateJSON(SchemaApproval, data); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidApproval, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var a Approval
	if err := dec.Decode(&a); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidApproval, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the approval", ErrInvalidApproval)
	}
	if !a.Expires.After(a.Created) {
		return nil, fmt.Errorf("%w: expires %s is not after created %s", ErrInvalidApproval, a.Expires.Format(time.RFC3339), a.Created.Format(time.RFC3339))
	}
	return &a, nil
}

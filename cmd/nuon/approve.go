package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/cmd/internal/cli"
	"nuon.dev/nuon/internal/atomicfile"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/policy"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// maxApprovalExpiry bounds --expires: an approval is for a plan about to
// be applied, not a standing permission.
const maxApprovalExpiry = 7 * 24 * time.Hour

const approveHelp = `An approval names the exact saved plan an install's agent published in its
signed status (nuon approvals lists them): its hash is the SHA-256 of the plan
file the agent keeps inside the install, and the agent applies that file and
nothing else. A plan that changes in any way has another hash and needs its own
approval; a re-plan that comes out identical keeps the hash, and its approval.

The approval is a JSON document signed with --key (namespace
nuon-approval@nuon.dev), an approver key that trust/approvals on main lists,
apart from the render and request keys. It is committed to
refs/heads/nuon/approvals (approvals/<install>/…json); the next render puts it
into the install's desired state, and the agent checks it again: the key, its
validity window and scope, the install, the plan and the expiry. Anything else
is refused and the refusal is recorded in the install's status.

Through the tenant server (--server URL or $NUON_SERVER_URL, --key your
approver key), the server checks the approval as the agent will, files it
on refs/heads/nuon/approvals (and upstream) and renders the install at once:
the agent finds it at its next poll. The server refuses a key that is not in
trust/approvals, a request or render key, an approval for a plan that does
not wait, one filed already, or one valid for more than 168h.

The customer's own approval (--customer-policy FILE), for the changes the
customer's policy says need it (requireApproval), is signed with the key the
customer pinned in that file and written beside it as
INSTALL-COMPONENT-HASH.approval.json: the agent reads it there, never from
main, and no key the vendor trusts counts as the customer's.`

type approveOptions struct {
	tenant               cli.TenantFlags
	plan, reason, output string
	customer             string
	expires              time.Duration
	now                  func() time.Time
}

func (o *approveOptions) flags(cmd *cobra.Command) {
	o.tenant.Register(cmd, "your approver key (OpenSSH private key), listed in trust/approvals on main and in neither trust/requests nor the render keys; through --server it also signs the HTTP requests")
	f := cmd.Flags()
	f.StringVar(&o.plan, "plan", "", "the plan's hash, sha256:…, as nuon approvals shows it (required)")
	f.DurationVar(&o.expires, "expires", 24*time.Hour, "how long the approval stays valid; the agent refuses it after that (at most 168h)")
	f.StringVar(&o.reason, "reason", "", "why, for the record")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json (the filed approval)")
	f.StringVar(&o.customer, "customer-policy", "", "the customer's approval, inside the install: the customer policy FILE that pins --key under its approvers; the signed approval is written beside it, where the agent reads it (no --server, no --repo: nothing leaves the install)")
	_ = cmd.MarkFlagRequired("plan")
}

func newApproveCmd(g *cli.Globals) *cobra.Command {
	return newDecisionCmd(g, schemas.DecisionApprove, "Approve one saved plan of one component of an install, by its hash",
		`  nuon approvals --server https://nuon.example.com --key ~/.ssh/approver
  nuon approve acme database --plan sha256:3f1c… --server https://nuon.example.com --key ~/.ssh/approver
  nuon approve acme database --plan sha256:3f1c… --key ~/.ssh/approver --repo ./tenant.git --expires 2h --reason "CAB-1234"`)
}

func newRejectCmd(g *cli.Globals) *cobra.Command {
	return newDecisionCmd(g, schemas.DecisionReject, "Reject one saved plan of one component of an install, by its hash",
		`  nuon reject acme database --plan sha256:3f1c… --key ~/.ssh/approver --server https://nuon.example.com --reason "drops the replica"`)
}

func newDecisionCmd(g *cli.Globals, decision, short, example string) *cobra.Command {
	o := &approveOptions{now: time.Now}
	more := "\n\nA rejection wins over any approval of the same plan: the agent applies\nnothing until the plan changes."
	if decision == schemas.DecisionApprove {
		more = ""
	}
	cmd := &cobra.Command{
		Use:     decision + " INSTALL COMPONENT --plan HASH --key FILE (--server URL | --repo REPO)",
		Short:   short,
		Long:    approveHelp + more,
		Example: example,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cli.CheckOutput(o.output); err != nil {
				return err
			}
			file := ""
			var a *schemas.Approval
			var err error
			if o.customer != "" {
				a, file, err = customerApproval(cmd, o, args[0], args[1], decision)
			} else {
				a, err = fileApproval(cmd, g, o, args[0], args[1], decision)
			}
			if err != nil {
				return err
			}
			if o.output == "json" {
				enc := json.NewEncoder(g.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(a)
			}
			where := schemas.ApprovalPath(a)
			if file != "" {
				where = file
			}
			fmt.Fprintf(g.Stdout, "%s: %s %s plan %s (%s), valid until %s\n", a.Approver, pastDecision(decision), a.Install+"/"+a.Component, a.Plan,
				where, a.Expires.Format(time.RFC3339))
			return nil
		},
	}
	o.flags(cmd)
	return cmd
}

func pastDecision(d string) string {
	if d == schemas.DecisionReject {
		return "rejected"
	}
	return "approved"
}

// customerApproval signs the customer's approval with --key, which the
// customer policy o.customer must pin, and writes it beside that file,
// where the agent reads the customer's approvals.
func customerApproval(cmd *cobra.Command, o *approveOptions, install, component, decision string) (*schemas.Approval, string, error) {
	if cmd.Flags().Changed("server") || cmd.Flags().Changed("repo") {
		return nil, "", errors.New("--customer-policy signs inside the install: give neither --server nor --repo (the customer's approval never goes to main)")
	}
	if !schemas.ValidPlanHash(o.plan) {
		return nil, "", fmt.Errorf("--plan %q is not a plan hash (sha256: and 64 hex digits, as the install's status shows)", o.plan)
	}
	if o.expires <= 0 || o.expires > maxApprovalExpiry {
		return nil, "", fmt.Errorf("--expires %s: give a duration above 0 and at most %s", o.expires, maxApprovalExpiry)
	}
	if o.tenant.KeyFile() == "" {
		return nil, "", fmt.Errorf("give --key: the customer's approval key, pinned in %s", o.customer)
	}
	pol, err := policy.Load(o.customer)
	if err != nil {
		return nil, "", err
	}
	key, err := signature.LoadSigner(o.tenant.KeyFile())
	if err != nil {
		return nil, "", err
	}
	name := ""
	for _, ap := range pol.Approvers {
		if string(ap.Key.Marshal()) == string(key.PublicKey().Marshal()) {
			name = ap.Name
		}
	}
	if name == "" {
		return nil, "", fmt.Errorf("%s pins no approver with the key of %s (%s): add it under approvers", o.customer, o.tenant.KeyFile(), ssh.FingerprintSHA256(key.PublicKey()))
	}
	now := o.now().UTC().Truncate(time.Second)
	a := &schemas.Approval{
		APIVersion: schemas.APIVersion, Kind: schemas.KindApproval, Install: install, Component: component,
		Plan: o.plan, Decision: decision, Approver: name, Created: now, Expires: now.Add(o.expires), Reason: o.reason,
	}
	data, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return nil, "", err
	}
	if _, err := schemas.DecodeApproval(data); err != nil {
		return nil, "", err
	}
	signed, err := policy.SignApproval(append(data, '\n'), key.SSH())
	if err != nil {
		return nil, "", err
	}
	out, err := json.MarshalIndent(signed, "", "  ")
	if err != nil {
		return nil, "", err
	}
	hash := strings.TrimPrefix(o.plan, "sha256:")[:12]
	file := filepath.Join(filepath.Dir(o.customer), fmt.Sprintf("%s-%s-%s-%s.approval.json", install, component, hash, decision))
	if err := atomicfile.Write(file, append(out, '\n'), 0o644); err != nil {
		return nil, "", err
	}
	return a, file, nil
}

// fileApproval checks that the plan waits in the install's status, signs
// the approval and files it on schemas.ApprovalsRef: through the tenant
// server, which checks it again and renders the install at once, or
// committed to the repository.
func fileApproval(cmd *cobra.Command, g *cli.Globals, o *approveOptions, install, component, decision string) (*schemas.Approval, error) {
	ctx := cmd.Context()
	if !schemas.ValidPlanHash(o.plan) {
		return nil, fmt.Errorf("--plan %q is not a plan hash (sha256: and 64 hex digits, as nuon approvals shows)", o.plan)
	}
	if o.expires <= 0 || o.expires > maxApprovalExpiry {
		return nil, fmt.Errorf("--expires %s: give a duration above 0 and at most %s", o.expires, maxApprovalExpiry)
	}
	if o.tenant.KeyFile() == "" {
		return nil, fmt.Errorf("give --key (or $%s): your approver key, listed in %s on main", cli.EnvOperatorKey, schemas.ApproversPath)
	}
	key, err := signature.LoadSigner(o.tenant.KeyFile())
	if err != nil {
		return nil, err
	}
	repo, signer, err := o.tenant.Open(cmd, g)
	if err != nil {
		return nil, err
	}
	if err := repo.Fetch(ctx, "refs/heads/"); err != nil {
		return nil, err
	}
	approver, err := approverName(repo, key.PublicKey())
	if err != nil {
		return nil, err
	}
	pending, err := pendingPlans(repo, install)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(pending, func(p server.PendingPlan) bool { return p.Component == component && p.Plan.Hash == o.plan }) {
		var waiting []string
		for _, p := range pending {
			if p.Component == component {
				waiting = append(waiting, p.Plan.Hash)
			}
		}
		if len(waiting) == 0 {
			return nil, fmt.Errorf("no plan of %s/%s waits for approval in its status (refs/heads/nuon/status/%s): nothing to %s", install, component, install, decision)
		}
		return nil, fmt.Errorf("plan %s is not the one %s/%s waits with (%s): an approval binds one plan; read the waiting one with nuon approvals", o.plan, install, component, strings.Join(waiting, ", "))
	}
	now := o.now().UTC().Truncate(time.Second)
	a := &schemas.Approval{
		APIVersion: schemas.APIVersion, Kind: schemas.KindApproval, Install: install, Component: component,
		Plan: o.plan, Decision: decision, Approver: approver, Created: now, Expires: now.Add(o.expires), Reason: o.reason,
	}
	data, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return nil, err
	}
	if _, err := schemas.DecodeApproval(data); err != nil {
		return nil, err
	}
	signed, err := policy.SignApproval(append(data, '\n'), key.SSH())
	if err != nil {
		return nil, err
	}
	if signer != nil {
		body, err := json.Marshal(signed)
		if err != nil {
			return nil, err
		}
		code, out, err := cli.PostSigned(ctx, o.tenant.Server(), server.ApprovalsPath, signer, body)
		if err != nil {
			return nil, fmt.Errorf("file the approval at %s: %w", o.tenant.Server(), err)
		}
		if code != http.StatusOK {
			return nil, fmt.Errorf("%s refused the approval (%d %s): %s", o.tenant.Server(), code, http.StatusText(code), strings.TrimSpace(string(out)))
		}
		return a, nil
	}
	file, err := json.MarshalIndent(signed, "", "  ")
	if err != nil {
		return nil, err
	}
	path := schemas.ApprovalPath(a)
	for attempt := 0; ; attempt++ {
		head, err := repo.Ref(plumbing.ReferenceName(schemas.ApprovalsRef))
		if err != nil {
			return nil, err
		}
		b := gitobj.NewBatch()
		h, err := server.ApprovalCommit(repo.Storer(), b, head, path, append(file, '\n'), a, key, now)
		if err != nil {
			return nil, err
		}
		if err := b.Flush(repo.Storer()); err != nil {
			return nil, err
		}
		err = repo.Apply(ctx, []gitrepo.Update{{Name: plumbing.ReferenceName(schemas.ApprovalsRef), Old: head, New: h}})
		if errors.Is(err, gitrepo.ErrStale) && attempt < 5 {
			if err := repo.Fetch(ctx, schemas.ApprovalsRef); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("file approval: %w", err)
		}
		return a, nil
	}
}

// approverName is key's name in trust/approvals on main.
func approverName(repo *gitrepo.Repo, key ssh.PublicKey) (string, error) {
	main, err := repo.Resolve(schemas.MainRef)
	if err != nil {
		return "", err
	}
	_, files, err := gitobj.ReadCommitFiles(repo.Storer(), main, policy.MaxApproversSize)
	if err != nil {
		return "", err
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
	data, ok := files[schemas.ApproversPath]
	if !ok {
		return "", fmt.Errorf("no %s on main: no key is trusted for approvals; commit one listing \"- name: NAME\\n  key: %s\" (example: fixtures/tenant/trust/approvals)", schemas.ApproversPath, line)
	}
	as, err := policy.ParseApprovers(schemas.ApproversPath, data)
	if err != nil {
		return "", err
	}
	name, ok := as.Name(key)
	if !ok {
		return "", fmt.Errorf("your key %s is not in %s on main: the renderer would drop the approval; add it there (and to the agents' approvers) as \"- name: NAME\\n  key: %s\"", ssh.FingerprintSHA256(key), schemas.ApproversPath, line)
	}
	return name, nil
}

// pendingPlans reads the plans waiting (or rejected) in the status of
// install, or of every install when install is empty.
func pendingPlans(repo *gitrepo.Repo, install string) ([]server.PendingPlan, error) {
	refs, err := repo.Refs(schemas.StatusRefPrefix)
	if err != nil {
		return nil, err
	}
	var out []server.PendingPlan
	for _, name := range slices.Sorted(maps.Keys(refs)) {
		id := strings.TrimPrefix(name.String(), schemas.StatusRefPrefix)
		if install != "" && id != install {
			continue
		}
		plans, err := server.WaitingPlans(repo.Storer(), refs[name])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, p := range plans {
			p.Install = id // the ref's, whatever the file says
			out = append(out, p)
		}
	}
	return out, nil
}

func newApprovalsCmd(g *cli.Globals) *cobra.Command {
	var tenant cli.TenantFlags
	var install, output string
	var diff bool
	cmd := &cobra.Command{
		Use:   "approvals (--server URL | --repo REPO) [--install ID]",
		Short: "List the saved plans that wait for approval, with their diffs",
		Long: `Approvals reads every install's signed status (refs/heads/nuon/status/<id>)
and lists the components whose saved plan waits for approval (AwaitingApproval)
or was rejected: the plan's hash, what it creates, updates, deletes and
replaces, why it needs approval, approvals the agent refused and why, and with
--diff the readable diff (redacted by the agent, cut at 64 KiB). Approve one
with nuon approve INSTALL COMPONENT --plan HASH.

` + approveHelp,
		Example: `  nuon approvals --diff                      # through $NUON_SERVER_URL with $NUON_OPERATOR_KEY
  nuon approvals --server https://nuon.example.com --key ~/.ssh/approver --install acme
  nuon approvals --repo ./tenant.git --install acme -o json | jq -r '.[].plan.hash'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cli.CheckOutput(output); err != nil {
				return err
			}
			repo, _, err := tenant.Open(cmd, g)
			if err != nil {
				return err
			}
			if err := repo.Fetch(cmd.Context(), "refs/heads/"); err != nil {
				return err
			}
			rows, err := pendingPlans(repo, install)
			if err != nil {
				return err
			}
			if output == "json" {
				if rows == nil {
					rows = []server.PendingPlan{}
				}
				enc := json.NewEncoder(g.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			return printPlans(g.Stdout, rows, diff)
		},
	}
	tenant.Register(cmd, "your key through --server: an operator key (trust/requests) or an approver key (trust/approvals) on main")
	f := cmd.Flags()
	f.StringVar(&install, "install", "", "only this install's plans")
	f.BoolVar(&diff, "diff", false, "print each plan's readable diff")
	f.StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func printPlans(w io.Writer, rows []server.PendingPlan, diff bool) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no plan waits for approval")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTALL\tCOMPONENT\tPHASE\tPLAN\tCHANGES\tWHY")
	for _, r := range rows {
		var changes []string
		for _, k := range r.Plan.Summary.Kinds() {
			changes = append(changes, fmt.Sprintf("%d %s", r.Plan.Summary.Counts[k], k))
		}
		why := r.Plan.Needs
		switch {
		case len(r.Plan.Denied) > 0:
			why = "denied by policy: " + strings.Join(r.Plan.Denied, "; ")
		case r.Plan.Rejected != "":
			why = "rejected by " + r.Plan.Rejected
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Install, r.Component, r.Phase, r.Plan.Hash, strings.Join(changes, ", "), why)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		s := r.Plan.Summary
		fmt.Fprintf(w, "\n%s/%s %s\n", r.Install, r.Component, r.Plan.Hash)
		for _, l := range []struct {
			kind  string
			addrs []string
		}{{"create", s.Create}, {"update", s.Update}, {"delete", s.Delete}, {"replace", s.Replace}} {
			for _, a := range l.addrs {
				fmt.Fprintf(w, "  %-8s %s\n", l.kind, a)
			}
		}
		if s.Truncated > 0 {
			fmt.Fprintf(w, "  … and %d more\n", s.Truncated)
		}
		for _, ref := range r.Plan.Refused {
			fmt.Fprintf(w, "  refused: %s\n", ref)
		}
		if diff && r.Plan.Diff != "" {
			fmt.Fprintf(w, "\n%s\n", r.Plan.Diff)
			if r.Plan.DiffTruncated {
				fmt.Fprintln(w, "  (diff cut at 64 KiB; the plan is still approvable by its hash)")
			}
		}
	}
	return nil
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/cmd/internal/cli"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/policy"
	"nuon.dev/nuon/schemas"
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
is refused and the refusal is recorded in the install's status.`

type approveOptions struct {
	repo, key, cacheDir, plan, reason, output string
	expires                                   time.Duration
	now                                       func() time.Time
}

func (o *approveOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.repo, "repo", "", "tenant repository: a path or a URL (required)")
	f.StringVar(&o.key, "key", "", "your approver key (OpenSSH private key), listed in trust/approvals on main (required)")
	f.StringVar(&o.plan, "plan", "", "the plan's hash, sha256:…, as nuon approvals shows it (required)")
	f.DurationVar(&o.expires, "expires", 24*time.Hour, "how long the approval stays valid; the agent refuses it after that (at most 168h)")
	f.StringVar(&o.reason, "reason", "", "why, for the record")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json (the filed approval)")
	f.StringVar(&o.cacheDir, "cache-dir", "", "where to keep mirrors of remote repositories")
	_ = cmd.MarkFlagRequired("repo")
	_ = cmd.MarkFlagRequired("key")
	_ = cmd.MarkFlagRequired("plan")
}

func newApproveCmd(g *cli.Globals) *cobra.Command {
	return newDecisionCmd(g, schemas.DecisionApprove, "Approve one saved plan of one component of an install, by its hash",
		`  nuon approvals --repo ./tenant.git
  nuon approve acme database --plan sha256:3f1c… --key ~/.ssh/approver --repo ./tenant.git
  nuon approve acme database --plan sha256:3f1c… --key ~/.ssh/approver --expires 2h --reason "CAB-1234"`)
}

func newRejectCmd(g *cli.Globals) *cobra.Command {
	return newDecisionCmd(g, schemas.DecisionReject, "Reject one saved plan of one component of an install, by its hash",
		`  nuon reject acme database --plan sha256:3f1c… --key ~/.ssh/approver --repo ./tenant.git --reason "drops the replica"`)
}

func newDecisionCmd(g *cli.Globals, decision, short, example string) *cobra.Command {
	o := &approveOptions{now: time.Now}
	more := "\n\nA rejection wins over any approval of the same plan: the agent applies\nnothing until the plan changes."
	if decision == schemas.DecisionApprove {
		more = ""
	}
	cmd := &cobra.Command{
		Use:     decision + " INSTALL COMPONENT --plan HASH --key FILE --repo REPO",
		Short:   short,
		Long:    approveHelp + more,
		Example: example,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cli.CheckOutput(o.output); err != nil {
				return err
			}
			a, err := fileApproval(cmd.Context(), g, o, args[0], args[1], decision)
			if err != nil {
				return err
			}
			if o.output == "json" {
				enc := json.NewEncoder(g.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(a)
			}
			fmt.Fprintf(g.Stdout, "%s: %s %s plan %s (%s), valid until %s\n", a.Approver, pastDecision(decision), a.Install+"/"+a.Component, a.Plan,
				schemas.ApprovalPath(a), a.Expires.Format(time.RFC3339))
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

// fileApproval checks that the plan waits in the install's status, signs
// the approval and commits it on schemas.ApprovalsRef.
func fileApproval(ctx context.Context, g *cli.Globals, o *approveOptions, install, component, decision string) (*schemas.Approval, error) {
	if !schemas.ValidPlanHash(o.plan) {
		return nil, fmt.Errorf("--plan %q is not a plan hash (sha256: and 64 hex digits, as nuon approvals shows)", o.plan)
	}
	if o.expires <= 0 || o.expires > maxApprovalExpiry {
		return nil, fmt.Errorf("--expires %s: give a duration above 0 and at most %s", o.expires, maxApprovalExpiry)
	}
	key, err := signature.LoadSigner(o.key)
	if err != nil {
		return nil, err
	}
	repo, err := g.OpenRepo(o.repo, o.cacheDir)
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
	if !slices.ContainsFunc(pending, func(p pendingPlan) bool { return p.Component == component && p.Plan.Hash == o.plan }) {
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
		h, err := commitApproval(repo, b, head, path, append(file, '\n'), a, key, now)
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

// commitApproval adds the file at path to the approvals tree of head,
// dropping approvals that expired, and commits it signed by key.
func commitApproval(repo *gitrepo.Repo, b *gitobj.Batch, head plumbing.Hash, path string, file []byte, a *schemas.Approval, key *signature.Signer, now time.Time) (plumbing.Hash, error) {
	files := map[string][]byte{}
	if !head.IsZero() {
		var err error
		if _, files, err = gitobj.ReadCommitFiles(repo.Storer(), head, 64<<10); err != nil {
			return plumbing.ZeroHash, err
		}
	}
	for name, data := range files {
		var s schemas.SignedApproval
		if json.Unmarshal(data, &s) != nil {
			continue
		}
		if old, err := schemas.DecodeApproval([]byte(s.File)); err == nil && !now.Before(old.Expires) {
			delete(files, name)
		}
	}
	files[path] = file
	byDir := map[string][]gitobj.Entry{}
	for name, data := range files {
		dir, base, _ := cutLast(name)
		byDir[dir] = append(byDir[dir], gitobj.Entry{Name: base, Mode: filemode.Regular, Hash: b.Add(plumbing.BlobObject, data)})
	}
	var installs []gitobj.Entry
	for _, dir := range slices.Sorted(maps.Keys(byDir)) {
		_, id, _ := cutLast(dir)
		installs = append(installs, gitobj.Entry{Name: id, Mode: filemode.Dir, Hash: b.Tree(byDir[dir])})
	}
	root := b.Tree([]gitobj.Entry{{Name: schemas.ApprovalsDir, Mode: filemode.Dir, Hash: b.Tree(installs)}})
	var parents []plumbing.Hash
	if !head.IsZero() {
		parents = append(parents, head)
	}
	msg := fmt.Sprintf("nuon: %s %s/%s plan %s\n\n%s by %s, valid until %s.\n", a.Decision, a.Install, a.Component, a.Plan,
		strings.ToUpper(pastDecision(a.Decision)[:1])+pastDecision(a.Decision)[1:], a.Approver, a.Expires.Format(time.RFC3339))
	if a.Reason != "" {
		msg += "\n" + a.Reason + "\n"
	}
	who := object.Signature{Name: a.Approver, Email: "approver@nuon.invalid", When: now}
	return b.Commit(gitobj.Commit{Tree: root, Parents: parents, Author: who, Message: msg}, key)
}

func cutLast(p string) (dir, base string, ok bool) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p, false
	}
	return p[:i], p[i+1:], true
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

// pendingPlan is one plan that waits in an install's status.
type pendingPlan struct {
	Install   string              `json:"install"`
	Component string              `json:"component"`
	Phase     string              `json:"phase"`
	Status    string              `json:"status"`
	Plan      *schemas.PlanRecord `json:"plan"`
}

// pendingPlans reads the plans waiting (or rejected) in the status of
// install, or of every install when install is empty.
func pendingPlans(repo *gitrepo.Repo, install string) ([]pendingPlan, error) {
	refs, err := repo.Refs(schemas.StatusRefPrefix)
	if err != nil {
		return nil, err
	}
	var out []pendingPlan
	for _, name := range slices.Sorted(maps.Keys(refs)) {
		id := strings.TrimPrefix(name.String(), schemas.StatusRefPrefix)
		if install != "" && id != install {
			continue
		}
		c, files, err := gitobj.ReadCommitFiles(repo.Storer(), refs[name], 4<<20)
		if err != nil {
			return nil, err
		}
		var st schemas.Status
		if err := json.Unmarshal(files[schemas.StatusFile], &st); err != nil {
			return nil, fmt.Errorf("%s %s: %w", name, schemas.StatusFile, err)
		}
		for _, comp := range slices.Sorted(maps.Keys(st.Components)) {
			cs := st.Components[comp]
			if cs.Plan == nil || cs.Phase != schemas.PhaseAwaitingApproval && cs.Phase != schemas.PhaseRejected {
				continue
			}
			out = append(out, pendingPlan{Install: id, Component: comp, Phase: cs.Phase, Status: c.Hash.String(), Plan: cs.Plan})
		}
	}
	return out, nil
}

func newApprovalsCmd(g *cli.Globals) *cobra.Command {
	var repoLoc, install, output, cacheDir string
	var diff bool
	cmd := &cobra.Command{
		Use:   "approvals --repo REPO [--install ID]",
		Short: "List the saved plans that wait for approval, with their diffs",
		Long: `Approvals reads every install's signed status (refs/heads/nuon/status/<id>)
and lists the components whose saved plan waits for approval (AwaitingApproval)
or was rejected: the plan's hash, what it creates, updates, deletes and
replaces, why it needs approval, approvals the agent refused and why, and with
--diff the readable diff (redacted by the agent, cut at 64 KiB). Approve one
with nuon approve INSTALL COMPONENT --plan HASH.

` + approveHelp,
		Example: `  nuon approvals --repo ./tenant.git --diff
  nuon approvals --repo ./tenant.git --install acme -o json | jq -r '.[].plan.hash'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cli.CheckOutput(output); err != nil {
				return err
			}
			repo, err := g.OpenRepo(repoLoc, cacheDir)
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
					rows = []pendingPlan{}
				}
				enc := json.NewEncoder(g.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			return printPlans(g.Stdout, rows, diff)
		},
	}
	f := cmd.Flags()
	f.StringVar(&repoLoc, "repo", "", "tenant repository: a path or a URL (required)")
	f.StringVar(&install, "install", "", "only this install's plans")
	f.BoolVar(&diff, "diff", false, "print each plan's readable diff")
	f.StringVarP(&output, "output", "o", "text", "output format: text or json")
	f.StringVar(&cacheDir, "cache-dir", "", "where to keep mirrors of remote repositories")
	_ = cmd.MarkFlagRequired("repo")
	return cmd
}

func printPlans(w io.Writer, rows []pendingPlan, diff bool) error {
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
		if r.Plan.Rejected != "" {
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

package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/debugcmd"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
)

// requestOptions are the flags nuon logs and nuon debug share.
type requestOptions struct {
	tenantFlags
	output, component string
	noWait            bool
	deadline, poll    time.Duration
	// now reads the clock; time.Now in the commands.
	now func() time.Time
}

func (o *requestOptions) flags(cmd *cobra.Command) {
	o.tenantFlags.flags(cmd, "your operator key (OpenSSH ed25519 private key), listed in trust/requests on main; signs the request, and with --server every HTTP request (required)")
	f := cmd.Flags()
	f.BoolVar(&o.noWait, "no-wait", false, "print the request id and return; 'nuon requests' shows its state later")
	f.DurationVar(&o.deadline, "deadline", 15*time.Minute, "how long the request stays valid; the agent refuses it after that (at most 24h)")
	f.DurationVar(&o.poll, "poll", time.Second, "how often to look for the answer in the install's status ref")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text (the answer) or json (the request's state and answer)")
}

const requestsHelp = `With --server (or $NUON_SERVER_URL) the command goes through the tenant server: the
server checks the request as the renderer would (and the key's scope in the
trust root, when main has one), files it, renders the install at once and
answers; every HTTP request is signed with --key, no token. With --repo it
pushes to the repository itself and the request waits for the next render.

The request is a commit on refs/heads/nuon/requests signed with --key, an
operator key that trust/requests on main lists (an allowed_signers file,
reviewed like any change to main, separate from the render key); the requester
is that key's principal. The next render puts it into the install's desired
state; the install's agent checks the signature again, the deadline and the
install's own operations settings, runs it once as a bounded, read-only job,
redacts the answer and writes it to its status ref (answers/<id>.txt). Git
history keeps who asked what and what the install answered.

Without --no-wait the command polls the install's status ref every --poll and
prints the answer; a refused request prints the reason and exits 1.`

// NewLogsCmd is nuon logs.
func NewLogsCmd(g *Globals) *cobra.Command {
	o := &requestOptions{now: time.Now}
	var since time.Duration
	var tail int
	cmd := &cobra.Command{
		Use:   "logs INSTALL COMPONENT (--server URL | --repo REPO) --key KEY [--since D] [--tail N]",
		Short: "Ask an install for a component's logs, as a signed request",
		Long: `Logs files a request for the end of COMPONENT's last job log in INSTALL and
prints the answer.

` + requestsHelp,
		Example: `  nuon logs acme api --server https://nuon.example.com --key ~/.ssh/nuon_operator --tail 200
  nuon logs acme api --repo https://git.example.com/vendor/tenant.git --key ~/.ssh/nuon_operator --tail 200
  nuon logs acme api --repo ./tenant.git --key op.key --since 30m --no-wait`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := CheckOutput(o.output); err != nil {
				return err
			}
			r := &schemas.Request{Type: schemas.RequestLogs, Install: args[0], Component: args[1], Logs: &schemas.LogsRequest{Tail: tail}}
			if since > 0 {
				r.Logs.Since = since.String()
			}
			return fileRequest(cmd, g, o, r)
		},
	}
	o.flags(cmd)
	cmd.Flags().DurationVar(&since, "since", 0, "only lines newer than this")
	cmd.Flags().IntVar(&tail, "tail", 100, "at most this many lines (0: all, within the answer's size bound)")
	return cmd
}

// NewDebugCmd is nuon debug.
func NewDebugCmd(g *Globals) *cobra.Command {
	o := &requestOptions{now: time.Now}
	cmd := &cobra.Command{
		Use:   "debug INSTALL --component NAME (--server URL | --repo REPO) --key KEY -- COMMAND...",
		Short: "Run one read-only debug command in an install, as a signed request",
		Long: `Debug files a request to run COMMAND with the plugin of --component in INSTALL
and prints the answer. COMMAND is a list of words checked against the plugin's
fixed allow-list, never run by a shell:

  Kubernetes (manifests, helm)  get KIND [NAME] [-n NS] | describe KIND NAME [-n NS]
                                events [-n NS] | logs POD [-c C] [--tail N] [--since D]
  Helm                          status RELEASE | history RELEASE
  Terraform                     state list | state show ADDRESS

Anything else is refused at once, before anything is filed, with the
commands the component's plugin allows (its type read from the install's
rendered state; before the first render, a command no plugin allows). The
agent checks again and refuses with the reason what reaches it otherwise.

` + requestsHelp,
		Example: `  nuon debug acme --component api --server https://nuon.example.com --key op.key -- get pods -n shop
  nuon debug acme --component api --repo ./tenant.git --key op.key -- get pods -n shop
  nuon debug acme --component network --repo ./tenant.git --key op.key -- state list`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := CheckOutput(o.output); err != nil {
				return err
			}
			if cmd.ArgsLenAtDash() != 1 {
				return errors.New("debug: give the install, then -- and the command")
			}
			// Refused here rather than by the agent a poll later.
			if err := checkDebugCommand("", args[1:]); err != nil {
				return err
			}
			r := &schemas.Request{Type: schemas.RequestDebug, Install: args[0], Component: o.component, Command: args[1:]}
			return fileRequest(cmd, g, o, r)
		},
	}
	o.flags(cmd)
	cmd.Flags().StringVar(&o.component, "component", "", "the component whose plugin runs the command (required)")
	_ = cmd.MarkFlagRequired("component")
	return cmd
}

// fileRequest completes r, commits it on requests.Ref (through the
// tenant server with --server), and waits for the answer unless --no-wait.
func fileRequest(cmd *cobra.Command, g *Globals, o *requestOptions, r *schemas.Request) error {
	ctx := cmd.Context()
	if o.key == "" {
		return fmt.Errorf("give --key (or $%s): your operator key, listed in %s on main", EnvOperatorKey, requests.TrustFile)
	}
	key, err := signature.LoadSigner(o.key)
	if err != nil {
		return fmt.Errorf("--key: %w", err)
	}
	repo, signer, err := o.open(cmd, g)
	if err != nil {
		return err
	}
	if err := repo.Fetch(ctx, "refs/heads/"); err != nil {
		return err
	}
	if r.Type == schemas.RequestDebug {
		if err := checkDebugComponent(repo, r); err != nil {
			return err
		}
	}
	if r.Requester, err = principal(repo, key.PublicKey()); err != nil {
		return err
	}
	var suffix [3]byte
	_, _ = rand.Read(suffix[:])
	now := o.now().UTC().Truncate(time.Second)
	r.APIVersion, r.Kind = schemas.APIVersion, schemas.KindRequest
	r.ID = "r-" + now.Format("20060102-150405") + "-" + hex.EncodeToString(suffix[:])
	r.Created, r.Deadline = now, now.Add(o.deadline)
	if err := r.Validate(); err != nil {
		return fmt.Errorf("request: %w", err)
	}
	for attempt := 0; ; attempt++ {
		head, err := repo.Ref(plumbing.ReferenceName(requests.Ref))
		if err != nil {
			return err
		}
		b := gitobj.NewBatch()
		h, err := requests.File(b, r, head, key)
		if err != nil {
			return err
		}
		if err := b.Flush(repo.Storer()); err != nil {
			return err
		}
		if signer != nil {
			start := time.Now()
			a, err := submit(ctx, o.server, signer, repo, h)
			if errors.Is(err, errMoved) && attempt < 5 {
				if err := repo.Fetch(ctx, requests.Ref); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("file request %s: %w", r.ID, err)
			}
			if a.Desired != "" {
				fmt.Fprintf(g.Stderr, "request %s filed and rendered into %s's desired state %s in %s\n", r.ID, r.Install, shortID(a.Desired), time.Since(start).Round(time.Millisecond))
			}
			break
		}
		err = repo.Apply(ctx, []gitrepo.Update{{Name: plumbing.ReferenceName(requests.Ref), Old: head, New: h}})
		if errors.Is(err, gitrepo.ErrStale) && attempt < 5 {
			// Another operator filed one first: file on top of theirs.
			if err := repo.Fetch(ctx, requests.Ref); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("file request %s: %w", r.ID, err)
		}
		break
	}
	if o.noWait {
		fmt.Fprintln(g.Stdout, r.ID)
		return nil
	}
	fmt.Fprintf(g.Stderr, "request %s filed; waiting for %s to answer (until %s)\n", r.ID, r.Install, r.Deadline.Format(time.RFC3339))
	return waitAnswer(ctx, g, o, repo, r)
}

// checkDebugCommand checks words against plugin's allow-list, or with no
// plugin against every plugin's: the agent would refuse anything else.
// An operation no plugin allows is refused with what is allowed; a known
// one with a bad argument with the reason.
func checkDebugCommand(plugin string, words []string) error {
	plugins := []string{plugin}
	if plugin == "" {
		plugins = slices.Sorted(maps.Keys(debugcmd.Allowed))
	}
	for _, p := range plugins {
		_, err := debugcmd.Parse(p, words)
		if err == nil {
			return nil
		}
		var r *debugcmd.Refusal
		if errors.As(err, &r) && !strings.Contains(r.Reason, "is not an allowed") {
			return fmt.Errorf("debug: %w; nothing was filed", err)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "debug: %q is not an allowed debug command", strings.Join(words, " "))
	if plugin != "" {
		fmt.Fprintf(&b, " for a %s component", plugin)
	}
	b.WriteString("; nothing was filed. Allowed (words after --, no shell):")
	for _, p := range plugins {
		fmt.Fprintf(&b, "\n  %-10s %s", p, debugUsage[p])
	}
	return errors.New(b.String())
}

// debugUsage is each plugin's allow-list as a person types it; nuon debug
// --help shows the same (package debugcmd is the authority).
var debugUsage = map[string]string{
	schemas.TypeManifests: "get KIND [NAME] [-n NS] | describe KIND NAME [-n NS] | events [-n NS] | logs POD [-c C] [--tail N] [--since D]",
	schemas.TypeHelm:      "the manifests commands | status RELEASE | history RELEASE",
	schemas.TypeTerraform: "state list | state show ADDRESS",
}

// checkDebugComponent checks r's command against the allow-list of its
// component's plugin, the component's type read from the install's
// rendered state. Before the install's first render it checks nothing
// more than checkDebugCommand did.
func checkDebugComponent(repo *gitrepo.Repo, r *schemas.Request) error {
	h, err := repo.Ref(plumbing.ReferenceName(schemas.InstallRef(r.Install)))
	if err != nil || h.IsZero() {
		return nil
	}
	_, files, err := gitobj.ReadCommitFiles(repo.Storer(), h, 1<<20)
	if err != nil {
		return fmt.Errorf("%s: %w", schemas.InstallRef(r.Install), err)
	}
	b, ok := files[schemas.ComponentStateFile(r.Component)]
	if !ok {
		var names []string
		for p := range files {
			if n, ok := strings.CutPrefix(p, schemas.ComponentsDir+"/"); ok {
				names = append(names, strings.TrimSuffix(n, ".json"))
			}
		}
		slices.Sort(names)
		return fmt.Errorf("debug: install %s has no component %q in its rendered state (--component: %s); nothing was filed", r.Install, r.Component, strings.Join(names, ", "))
	}
	var c schemas.ComponentState
	if err := json.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("%s: %s: %w", schemas.InstallRef(r.Install), schemas.ComponentStateFile(r.Component), err)
	}
	if _, ok := debugcmd.Allowed[c.Type]; !ok {
		return nil // a plugin this CLI does not know: the agent judges
	}
	return checkDebugCommand(c.Type, r.Command)
}

// principal is the name trust/requests on main gives key: the requester.
func principal(repo *gitrepo.Repo, key ssh.PublicKey) (string, error) {
	main, err := repo.Resolve(schemas.MainRef)
	if err != nil {
		return "", err
	}
	_, files, err := gitobj.ReadCommitFiles(repo.Storer(), main, 1<<20)
	if err != nil {
		return "", err
	}
	data, ok := files[requests.TrustFile]
	if !ok {
		return "", fmt.Errorf("no %s on main: no operator key is trusted for requests; commit one, an allowed_signers file with a line \"NAME %s\" per operator (example: fixtures/tenant/trust/requests)", requests.TrustFile, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))))
	}
	trust, err := signature.ParseAllowedSigners(data)
	if err != nil {
		return "", fmt.Errorf("%s on main: %w", requests.TrustFile, err)
	}
	for _, s := range trust.Signers {
		if string(s.Key.Marshal()) == string(key.Marshal()) && len(s.Principals) > 0 {
			return s.Principals[0], nil
		}
	}
	return "", fmt.Errorf("your key %s is not in %s on main: the renderer would drop the request; add the line \"NAME %s\" to it on main (and to the agents' --request-trust)", ssh.FingerprintSHA256(key), requests.TrustFile, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))))
}

// answered is what nuon logs and nuon debug print with -o json.
type answered struct {
	ID string `json:"id"`
	schemas.RequestState
	Output string `json:"output,omitempty"`
}

// waitAnswer polls the install's status ref until it records r.
func waitAnswer(ctx context.Context, g *Globals, o *requestOptions, repo *gitrepo.Repo, r *schemas.Request) error {
	ref := schemas.StatusRef(r.Install)
	for {
		if err := repo.Fetch(ctx, ref); err != nil {
			fmt.Fprintf(g.Stderr, "fetch %s: %v (retrying)\n", ref, err)
		} else if h, err := repo.Ref(plumbing.ReferenceName(ref)); err == nil && !h.IsZero() {
			_, files, err := gitobj.ReadCommitFiles(repo.Storer(), h, 0)
			if err != nil {
				return err
			}
			var st schemas.Status
			if err := json.Unmarshal(files[schemas.StatusFile], &st); err != nil {
				return fmt.Errorf("%s: %w", ref, err)
			}
			if rs, ok := st.Requests[r.ID]; ok {
				out := answered{ID: r.ID, RequestState: rs, Output: string(files[rs.Answer])}
				return printAnswer(g.Stdout, o.output, out)
			}
		}
		if !o.now().Before(r.Deadline) {
			return fmt.Errorf("request %s: no answer from %s before its deadline %s", r.ID, r.Install, r.Deadline.Format(time.RFC3339))
		}
		t := time.NewTimer(o.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func printAnswer(w io.Writer, output string, a answered) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(a); err != nil {
			return err
		}
	} else if a.State == schemas.RequestAnswered {
		fmt.Fprint(w, a.Output)
		if a.Truncated {
			fmt.Fprintf(w, "[answer cut at its size bound: %d bytes in all]\n", a.Bytes)
		}
	}
	if a.State != schemas.RequestAnswered {
		return fmt.Errorf("request %s refused: %s", a.ID, a.Reason)
	}
	return nil
}

// NewRequestsCmd is nuon requests.
func NewRequestsCmd(g *Globals) *cobra.Command {
	var tf tenantFlags
	var install, output string
	cmd := &cobra.Command{
		Use:   "requests (--server URL --key KEY | --repo REPO) [--install ID]",
		Short: "List operators' requests (logs, debug) and where each stands",
		Long: `Requests lists the requests filed on refs/heads/nuon/requests, newest first,
with their state: pending (not answered yet), answered, refused (by the agent,
or dropped by the renderer because trust/requests on main does not list the
key that signed it) or expired (its deadline passed unanswered). Answers are
in each install's status ref: git show refs/heads/nuon/status/<id>:answers/<request>.txt

With --server (or $NUON_SERVER_URL) it reads through the tenant server, every HTTP
request signed with --key, an operator key that trust/requests on main lists.`,
		Example: `  nuon requests --server https://nuon.example.com --key ~/.ssh/nuon_operator --install acme
  nuon requests --repo ./tenant.git
  nuon requests --repo https://git.example.com/vendor/tenant.git --install acme -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := CheckOutput(output); err != nil {
				return err
			}
			repo, _, err := tf.open(cmd, g)
			if err != nil {
				return err
			}
			if err := repo.Fetch(cmd.Context(), "refs/heads/"); err != nil {
				return err
			}
			rows, err := listRequests(repo, install, time.Now())
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(g.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			tw := tabwriter.NewWriter(g.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tINSTALL\tTYPE\tTARGET\tREQUESTER\tSTATE\tREASON")
			for _, l := range rows {
				target := l.Component
				if len(l.Command) > 0 {
					target += ": " + strings.Join(l.Command, " ")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.ID, l.Install, l.Type, target, l.Requester, l.State, l.Reason)
			}
			return tw.Flush()
		},
	}
	tf.flags(cmd, "with --server: your operator key, listed in trust/requests on main")
	f := cmd.Flags()
	f.StringVar(&install, "install", "", "only this install's requests")
	f.StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func listRequests(repo *gitrepo.Repo, install string, now time.Time) ([]requests.Listed, error) {
	head, err := repo.Ref(plumbing.ReferenceName(requests.Ref))
	if err != nil || head.IsZero() {
		return []requests.Listed{}, err
	}
	var trust *signature.AllowedSigners
	if main, err := repo.Resolve(schemas.MainRef); err == nil {
		if _, files, err := gitobj.ReadCommitFiles(repo.Storer(), main, 1<<20); err == nil && files[requests.TrustFile] != nil {
			trust, _ = signature.ParseAllowedSigners(files[requests.TrustFile])
		}
	}
	filed, err := requests.Read(repo.Storer(), head, trust)
	if err != nil {
		return nil, err
	}
	statuses := map[string]*schemas.Status{}
	status := func(id string) *schemas.Status {
		if st, ok := statuses[id]; ok {
			return st
		}
		statuses[id] = nil
		h, err := repo.Ref(plumbing.ReferenceName(schemas.StatusRef(id)))
		if err != nil || h.IsZero() {
			return nil
		}
		_, files, err := gitobj.ReadCommitFiles(repo.Storer(), h, 0)
		if err != nil {
			return nil
		}
		var st schemas.Status
		if json.Unmarshal(files[schemas.StatusFile], &st) == nil {
			statuses[id] = &st
		}
		return statuses[id]
	}
	rows := []requests.Listed{}
	for _, l := range requests.List(filed, status, now) {
		if install == "" || l.Install == install {
			rows = append(rows, l)
		}
	}
	return rows, nil
}

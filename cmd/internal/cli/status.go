package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"nuon.dev/nuon/fleet"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/spf13/cobra"

	"nuon.dev/nuon/schemas"
)

type statusOptions struct {
	tenantFlags
	install, output, source string
}

func NewStatusCmd(g *Globals) *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status (--server URL --key KEY | --repo REPO) [--install ID]",
		Short: "Show what every install's agent reported",
		Long: `Status reads every refs/heads/nuon/status/<id> (or one, with --install) and
shows each install's desired and applied commits, generation, phase and failing
components. Each status commit's signature is checked against the agentKey of
installs/<id>.yaml on main: VERIFIED says whether the install's own agent wrote it.
Status history ('git log refs/heads/nuon/status/<id>') is the install's audit log.

STATE is the install's phase (Ready, Degraded, Refused, AwaitingApproval), Held
or "Waiting for window (opens at …)" while the install holds a change back
because of its customer's own policy (deferred, not failing: the reason follows
in the last column), Stale while its desired state is past its signed expiry,
or Unreachable when it has not been heard from for twice the heartbeat interval
its agent announced: the agent is gone, and the rest of the row is only what it
last said. The last column lists what needs a look: failing components,
unhealthy ones ("health Progressing"), drift found by scheduled drift checks
("drift 2", "drift 1 corrected"), and kinds of operations the install's own
settings turned off.

With --server (or $NUON_SERVER_URL) it reads through the tenant server, every HTTP
request signed with --key, an operator key that trust/requests on main lists;
with --repo, the repository itself.

Through a tenant server, agents write no heartbeat commits: every poll is a
request signed by the install's key, and the server records the last one. With
--server the table judges Unreachable from that last signed contact too ("no
signed contact since …"), read from the server's GET /operator/liveness. On a
plain git host, an agent's heartbeat is the signed tip of
refs/heads/nuon/liveness/<id>, read and verified with the status; with --repo
on a repository agents reach only through a server, read it through --server
instead, or idle installs show Unreachable.`,
		Example: `  nuon status --server https://nuon.example.com --key ~/.ssh/nuon_operator
  nuon status --repo ./tenant.git
  nuon status --repo https://git.example.com/vendor/tenant.git --install acme --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := CheckOutput(o.output); err != nil {
				return err
			}
			return runStatus(cmd, g, o)
		},
	}
	o.tenantFlags.flags(cmd, "with --server: your operator key, listed in trust/requests on main")
	f := cmd.Flags()
	f.StringVar(&o.install, "install", "", "show only this install")
	f.StringVar(&o.source, "source", "refs/heads/main", "where installs/<id>.yaml (with each agent's key) is read")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	return cmd
}

func runStatus(cmd *cobra.Command, g *Globals, o *statusOptions) error {
	ctx := cmd.Context()
	repo, signer, err := o.open(cmd, g)
	if err != nil {
		return err
	}
	if err := repo.Fetch(ctx, "refs/heads/"); err != nil {
		return err
	}
	keys := map[string]string{}
	if h, err := repo.Resolve(o.source); err == nil {
		// An unreadable main leaves the keys unknown and the rows
		// unverified, which the table says.
		keys, _ = fleet.AgentKeys(repo.Storer(), h)
	}
	rows, err := fleet.Read(repo, keys, o.install)
	if err != nil {
		return err
	}
	if signer != nil {
		if rows, err = withContacts(ctx, o.server, o.install, signer.SetAuth, rows); err != nil {
			return err
		}
	}
	if o.install != "" && len(rows) == 0 {
		return fmt.Errorf("no status for install %s: %s does not exist", o.install, plumbing.ReferenceName(schemas.StatusRef(o.install)))
	}
	if o.output == "json" {
		enc := json.NewEncoder(g.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	printStatus(g.Stdout, rows)
	return nil
}

func printStatus(w io.Writer, rows []fleet.Install) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTALL\tGEN\tDESIRED\tAPPLIED\tSTATE\tSYNCED\tVERIFIED\tARTIFACTS\tFAILING")
	for _, r := range rows {
		var failing []string
		if r.Unreachable {
			failing = append(failing, r.Reason())
		}
		for _, c := range r.Components {
			var notes []string
			if c.Phase != schemas.PhaseApplied {
				notes = append(notes, c.Phase)
			}
			if c.Health != nil && c.Health.Status != schemas.HealthReady {
				notes = append(notes, "health "+c.Health.Status)
			}
			if n := len(c.Drift); n > 0 {
				d := fmt.Sprintf("drift %d", n)
				if c.Corrected {
					d += " corrected"
				}
				notes = append(notes, d)
			}
			if len(notes) > 0 {
				failing = append(failing, c.Name+"("+strings.Join(notes, ", ")+")")
			}
		}
		if len(r.Vetoed) > 0 {
			failing = append(failing, "turned off by the customer: "+strings.Join(r.Vetoed, ","))
		}
		if r.Stale && r.Expires != nil {
			failing = append([]string{"desired state expired " + r.Expires.Format(time.RFC3339)}, failing...)
		}
		if r.Forged != nil {
			failing = append(failing, "replaced forged status "+shortID(r.Forged.Commit))
		}
		if r.Refusal != nil {
			failing = append([]string{"refused " + shortID(r.Refusal.Commit) + ": " + r.Refusal.Reason}, failing...)
		}
		if d := r.Deferred; d != nil {
			failing = append([]string{"deferred " + shortID(d.Commit) + ": " + d.Message}, failing...)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Install, r.Generation, shortID(r.Desired), shortID(r.Applied),
			stateColumn(r), yesNo(r.InSync), yesNo(r.Verified), artifactsColumn(r.Artifacts), strings.Join(failing, " "))
	}
	tw.Flush()
}

// stateColumn is the STATE of a row: a window the install waits for says
// when it opens.
func stateColumn(r fleet.Install) string {
	if r.State == fleet.StateWaiting && r.Deferred != nil {
		if r.Deferred.Until != nil {
			return "Waiting for window (opens at " + r.Deferred.Until.Format(time.RFC3339) + ")"
		}
		return "Waiting for window"
	}
	return r.State
}

func shortID(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func artifactsColumn(s string) string {
	switch s {
	case schemas.ArtifactsVerified:
		return "verified"
	case schemas.ArtifactsUnverified:
		return "UNVERIFIED"
	case "":
		return "-"
	}
	return s
}

// contactReport is the tenant server's GET /operator/liveness.
type contactReport struct {
	Now      time.Time `json:"now"`
	Contacts []struct {
		Install string    `json:"install"`
		At      time.Time `json:"at"`
		Kind    string    `json:"kind"`
	} `json:"contacts"`
}

// maxContactReport bounds what is read of the server's answer.
const maxContactReport = 256 << 20

// livenessPath is where the server answers an operator's read of every
// install's last signed contact.
const livenessPath = "/operator/liveness"

// withContacts adds to rows each install's last signed contact as the
// tenant server at server recorded it (one install's, with install), the
// request signed by auth, and judges each row again at the server's time
// (a clock here that is off does not make installs Unreachable).
func withContacts(ctx context.Context, server, install string, auth func(*http.Request), rows []fleet.Install) ([]fleet.Install, error) {
	u, err := url.Parse(strings.TrimSuffix(server, "/") + livenessPath)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil {
		return nil, fmt.Errorf("--server %q: want http(s)://host[:port] without credentials", server)
	}
	if install != "" {
		u.RawQuery = url.Values{"install": {install}}.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	auth(req)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("read liveness from %s: %w", u.Redacted(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("read liveness from %s: %s: %s", u.Redacted(), resp.Status, strings.TrimSpace(string(b)))
	}
	var rep contactReport
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxContactReport)).Decode(&rep); err != nil {
		return nil, fmt.Errorf("read liveness from %s: %w", u.Redacted(), err)
	}
	seen := make(map[string]int, len(rep.Contacts))
	for i, c := range rep.Contacts {
		seen[c.Install] = i
	}
	for i, r := range rows {
		if j, ok := seen[r.Install]; ok {
			c := rep.Contacts[j]
			if r.Contact == nil || c.At.After(*r.Contact) {
				at := c.At.UTC()
				r.Contact, r.ContactKind = &at, c.Kind
			}
		}
		rows[i] = r.At(rep.Now)
	}
	return rows, nil
}

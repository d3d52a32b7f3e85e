package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/spf13/cobra"

	"nuon.dev/nuon/cmd/internal/cli"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

func newRolloutCmd(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Show the staged rollouts of the channels' pins",
		Long: `A channel that declares rollout: in channels/<name>.yaml takes a change of its
pins in waves. The tenant server's rollout controller opens each wave when the
installs of the one before it reported, in status signed by their own keys,
the new version applied and healthy for the wave's bake time; it halts (or
rolls back) a wave whose failures exceed its budget. Each decision is a commit
signed by the server's render key on refs/heads/nuon/rollouts/<channel>, with
its reason and evidence: 'git log refs/heads/nuon/rollouts/<channel>' is the
rollout's history. An operator pauses, resumes or aborts a rollout with a
signed request (nuon rollout pause|resume|abort).`,
	}
	cmd.AddCommand(newRolloutStatusCmd(g),
		newRolloutControlCmd(g, schemas.RolloutPause, "Pause a channel's rollout: no further wave opens",
			"Pause the running rollout of CHANNEL: the controller opens and judges no wave\nuntil it is resumed. Installs already given the new version keep it."),
		newRolloutControlCmd(g, schemas.RolloutResume, "Resume a paused rollout where it stood",
			"Resume the paused rollout of CHANNEL: its open wave is judged again and the\nnext opens when it proves healthy, as before the pause."),
		newRolloutControlCmd(g, schemas.RolloutAbort, "Abort a channel's rollout for good",
			"Abort the rollout of CHANNEL (running, paused, halted or rolled back): no wave\nopens again and every install keeps what it has. A new pin on main starts a\nnew rollout from wave 1."))
	return cmd
}

type rolloutStatusOptions struct {
	cli.TenantFlags
	trust, output, source string
	history               int
}

func newRolloutStatusCmd(g *cli.Globals) *cobra.Command {
	o := &rolloutStatusOptions{}
	cmd := &cobra.Command{
		Use:   "status [CHANNEL] (--server URL --key KEY | --repo REPO) --trust FILE",
		Short: "Show each channel's rollout: its waves, phase and last decisions",
		Long: `Status reads refs/heads/nuon/rollouts/<channel> of every channel that declares a
rollout on main (or of CHANNEL), checks that the tenant server's render key,
listed in --trust (git's allowed_signers format), signed each commit it shows,
and prints the rollout: the pins it brings (FROM → TO), its phase (running,
halted, rolled-back, finished), each wave with its installs and when it opened
and passed, and the last decisions with their reasons. For a halt it lists the
failing installs, the status commit each failure was read from and the
failing components' errors.

A rollout ref that a key not in --trust signed is an error: it is not the
controller's, and neither the server nor the renderer acts on it.

With --server (or $NUON_SERVER_URL) it reads through the tenant server, every HTTP
request signed with --key, an operator key that trust/requests on main lists;
with --repo, the repository itself.`,
		Example: `  nuon rollout status --server https://nuon.example.com --key ~/.ssh/nuon_operator --trust render_signers
  nuon rollout status --repo ./tenant.git --trust render_signers
  nuon rollout status stable --repo https://git.example.com/vendor/tenant.git \
      --trust render_signers --output json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cli.CheckOutput(o.output); err != nil {
				return err
			}
			channel := ""
			if len(args) == 1 {
				channel = args[0]
			}
			return runRolloutStatus(cmd, g, o, channel)
		},
	}
	o.TenantFlags.Register(cmd, "with --server: your operator key, listed in trust/requests on main")
	f := cmd.Flags()
	f.StringVar(&o.trust, "trust", "", "allowed_signers file of the tenant server's render keys (required)")
	f.StringVar(&o.source, "source", schemas.MainRef, "where channels/ is read")
	f.IntVar(&o.history, "history", 5, "decisions to show per channel, newest first")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	_ = cmd.MarkFlagRequired("trust")
	return cmd
}

// rolloutStatus is one channel's rollout, as status prints it.
type rolloutStatus struct {
	Channel string `json:"channel"`
	// Commit is the rollout ref's tip; empty when the controller has not
	// decided anything for the channel yet.
	Commit string                `json:"commit,omitempty"`
	State  *schemas.RolloutState `json:"state,omitempty"`
	// History are the last decisions, newest first.
	History []rolloutDecision `json:"history,omitempty"`
}

type rolloutDecision struct {
	Commit string `json:"commit"`
	schemas.RolloutDecision
}

func runRolloutStatus(cmd *cobra.Command, g *cli.Globals, o *rolloutStatusOptions, channel string) error {
	ctx := cmd.Context()
	trust, err := signature.LoadAllowedSigners(o.trust)
	if err != nil {
		return err
	}
	repo, _, err := o.Open(cmd, g)
	if err != nil {
		return err
	}
	if err := repo.Fetch(ctx, "refs/heads/"); err != nil {
		return err
	}
	main, err := repo.Resolve(o.source)
	if err != nil {
		return err
	}
	st := repo.Storer()
	fsys, err := renderer.SourceFS(st, main)
	if err != nil {
		return err
	}
	src, err := schemas.Open(fsys)
	if err != nil {
		var ps schemas.Problems
		if !errors.As(err, &ps) || src == nil {
			return err
		}
	}
	var channels []string
	for name, c := range src.Channels {
		if c.Rollout != nil && (channel == "" || channel == name) {
			channels = append(channels, name)
		}
	}
	slices.Sort(channels)
	if channel != "" && len(channels) == 0 {
		if _, ok := src.Channels[channel]; !ok {
			return fmt.Errorf("unknown channel %s: %s has no %s/%s.yaml", channel, o.source, schemas.ChannelsDir, channel)
		}
		return fmt.Errorf("channel %s declares no rollout in %s/%s.yaml: its installs take a change at once", channel, schemas.ChannelsDir, channel)
	}
	var out []rolloutStatus
	for _, ch := range channels {
		rs := rolloutStatus{Channel: ch}
		tip, err := repo.Ref(plumbing.ReferenceName(schemas.RolloutRef(ch)))
		if err != nil {
			return err
		}
		if !tip.IsZero() {
			rs.Commit = tip.String()
			if rs.State, err = rollout.Read(st, ch, tip, trust); err != nil {
				return err
			}
			if rs.History, err = rolloutHistory(st, ch, tip, trust, o.history); err != nil {
				return err
			}
		}
		out = append(out, rs)
	}
	if o.output == "json" {
		enc := json.NewEncoder(g.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	printRollouts(g.Stdout, out)
	return nil
}

// rolloutHistory reads the last n decisions of a rollout ref, each commit
// verified.
func rolloutHistory(st storer.EncodedObjectStorer, ch string, tip plumbing.Hash, trust *signature.AllowedSigners, n int) ([]rolloutDecision, error) {
	var out []rolloutDecision
	for h := tip; !h.IsZero() && len(out) < n; {
		s, err := rollout.Read(st, ch, h, trust)
		if err != nil {
			return nil, err
		}
		out = append(out, rolloutDecision{Commit: h.String(), RolloutDecision: s.Decision})
		c, err := gitobj.ReadCommit(st, h)
		if err != nil {
			return nil, err
		}
		h = plumbing.ZeroHash
		if len(c.ParentHashes) > 0 {
			h = c.ParentHashes[0]
		}
	}
	return out, nil
}

func printRollouts(w io.Writer, rs []rolloutStatus) {
	for i, r := range rs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if r.State == nil {
			fmt.Fprintf(w, "channel %s: no rollout yet (the controller records the pins at its first look)\n", r.Channel)
			continue
		}
		s := r.State
		fmt.Fprintf(w, "channel %s: rollout %d %s, %s → %s (%s)\n", r.Channel, s.Rollout, strings.ToUpper(s.Phase), pinsText(s.From), pinsText(s.To), shortHash(r.Commit))
		if d := s.Decision; d.Request != nil && (s.Phase == schemas.RolloutPaused || s.Phase == schemas.RolloutAborted) {
			fmt.Fprintf(w, "%s by %s (key %s, request %s) at %s\n", s.Phase, d.Request.Principal, d.Request.Key, shortHash(d.Request.Commit), d.At.UTC().Format(time.RFC3339))
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "WAVE\tNAME\tINSTALLS\tOPENED\tPASSED")
		for j, wv := range s.Waves {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\n", j+1, wv.Name, wv.Size, timeText(wv.Opened), timeText(wv.Passed))
		}
		tw.Flush()
		if len(s.Rollback) > 0 {
			ids := make([]string, 0, len(s.Rollback))
			for id := range s.Rollback {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			fmt.Fprintf(w, "rolled back: %s\n", strings.Join(ids, ", "))
		}
		fmt.Fprintln(w, "DECISIONS (newest first)")
		for _, d := range r.History {
			wave := ""
			if d.Wave > 0 {
				wave = fmt.Sprintf(" wave %d", d.Wave)
			}
			fmt.Fprintf(w, "  %s  %s  %s%s by %s: %s\n", shortHash(d.Commit), d.At.UTC().Format(time.RFC3339), d.Kind, wave, d.By, d.Reason)
			if d.Kind == schemas.DecisionHalted || d.Kind == schemas.DecisionRolledBack {
				for _, e := range d.Evidence {
					fmt.Fprintf(w, "      %s %s (status %s): %s\n", e.Install, e.Outcome, shortHash(e.Status), e.Reason)
				}
			}
		}
	}
}

func pinsText(p map[string]string) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		keys[i] = k + "@" + p[k]
	}
	return strings.Join(keys, " ")
}

func timeText(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

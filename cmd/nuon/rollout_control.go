package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/cmd/internal/cli"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
)

type rolloutControlOptions struct {
	server, key, reason, output, repo string
}

// newRolloutControlCmd is nuon rollout pause|resume|abort.
func newRolloutControlCmd(g *cli.Globals, action, short, long string) *cobra.Command {
	var o rolloutControlOptions
	cmd := &cobra.Command{
		Use:   action + " CHANNEL",
		Short: short,
		Long: long + `

The request is a commit signed by your operator key (--key, listed in
trust/requests on main), sent to the tenant server (--server), which checks
the signature, the channel and that the request was not carried out before,
then writes it as a decision on refs/heads/nuon/rollouts/<channel>, signed
by its render key, that names you, your key and the request commit and
keeps the request itself. nuon rollout status shows who paused or aborted.

There is no --repo mode: the decision must be taken by the controller that
holds the rollout, under its lock, and signed by the server's render key,
which renders and agents trust and an operator's machine does not hold.`,
		Example: fmt.Sprintf(`  nuon rollout %s stable --reason "error rate up in eu-west" \
      --server https://nuon.example.com --key ops.key

  # with $NUON_SERVER_URL and $NUON_OPERATOR_KEY set, as scripts do
  nuon rollout %s stable -o json`, action, action),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRolloutControl(cmd, g, &o, action, args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.server, "server", os.Getenv(cli.EnvServer), "tenant server (nuon server) URL (default $"+cli.EnvServer+")")
	f.StringVar(&o.key, "key", os.Getenv(cli.EnvOperatorKey), "your operator key, listed in trust/requests on main (default $"+cli.EnvOperatorKey+")")
	f.StringVar(&o.reason, "reason", "", "why, recorded in the decision")
	f.StringVarP(&o.output, "output", "o", "text", "text or json")
	// --repo, which nuon rollout status takes, is refused with the reason.
	f.StringVar(&o.repo, "repo", "", "")
	_ = f.MarkHidden("repo")
	return cmd
}

func runRolloutControl(cmd *cobra.Command, g *cli.Globals, o *rolloutControlOptions, action, channel string) error {
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("--output %q: want text or json", o.output)
	}
	if cmd.Flags().Changed("repo") {
		return fmt.Errorf("--repo: nuon rollout %s goes through the tenant server, whose rollout controller carries it out and signs the decision with the server's render key; give --server URL (or $%s) and --key", action, cli.EnvServer)
	}
	if o.server == "" {
		return fmt.Errorf("give --server URL (or $%s): the tenant server runs the rollout controller", cli.EnvServer)
	}
	if o.key == "" {
		return fmt.Errorf("give --key (or $%s): your operator key, listed in %s on main", cli.EnvOperatorKey, requests.TrustFile)
	}
	key, err := signature.LoadSigner(o.key)
	if err != nil {
		return fmt.Errorf("--key: %w", err)
	}
	signer := &request.Signer{Install: requests.KeyID(key.PublicKey()), Key: key}
	ctx := cmd.Context()
	repo, err := gitrepo.Open(strings.TrimSuffix(o.server, "/")+requests.ServerPath, gitrepo.WithRequestAuth(signer.SetAuth))
	if err != nil {
		return err
	}
	if err := repo.Fetch(ctx, schemas.MainRef); err != nil {
		return err
	}
	who, err := operatorPrincipal(repo, key.PublicKey())
	if err != nil {
		return err
	}
	var suffix [3]byte
	_, _ = rand.Read(suffix[:])
	now := time.Now().UTC().Truncate(time.Second)
	r := &schemas.RolloutRequest{APIVersion: schemas.APIVersion, Kind: schemas.KindRolloutRequest,
		ID: "r-" + now.Format("20060102-150405") + "-" + hex.EncodeToString(suffix[:]), Channel: channel,
		Action: action, Reason: o.reason, Requester: who, Created: now, Deadline: now.Add(10 * time.Minute)}
	b := gitobj.NewBatch()
	h, err := requests.FileRollout(b, r, key)
	if err != nil {
		return err
	}
	if err := b.Flush(repo.Storer()); err != nil {
		return err
	}
	sub, err := requests.Submission(repo.Storer(), h)
	if err != nil {
		return err
	}
	body, err := json.Marshal(sub)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(o.server, "/")+requests.RolloutPath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 2 * time.Minute, Transport: signer.Transport(nil)}).Do(req)
	if err != nil {
		return fmt.Errorf("send the request to %s: %w", o.server, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s refused to %s the rollout of %s (%s): %s", o.server, action, channel, resp.Status, strings.TrimSpace(string(out)))
	}
	var a struct {
		Channel, Action, Phase, Commit, Request, By string
		Rollout                                     int
	}
	if err := json.Unmarshal(out, &a); err != nil {
		return fmt.Errorf("%s: answer: %w", o.server, err)
	}
	if o.output == "json" {
		enc := json.NewEncoder(g.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"channel": a.Channel, "action": a.Action, "rollout": a.Rollout, "phase": a.Phase,
			"commit": a.Commit, "request": a.Request, "by": a.By})
	}
	fmt.Fprintf(g.Stdout, "rollout %d of %s is %s: decision %s by %s (request %s)\n", a.Rollout, a.Channel, a.Phase, shortHash(a.Commit), a.By, shortHash(a.Request))
	return nil
}

// operatorPrincipal is the name trust/requests on main gives key.
func operatorPrincipal(repo *gitrepo.Repo, key ssh.PublicKey) (string, error) {
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
		return "", fmt.Errorf("no %s on main: no operator key is trusted for requests", requests.TrustFile)
	}
	trust, err := signature.ParseAllowedSigners(data)
	if err != nil {
		return "", fmt.Errorf("%s on main: %w", requests.TrustFile, err)
	}
	for _, s := range trust.Signers {
		if bytes.Equal(s.Key.Marshal(), key.Marshal()) && len(s.Principals) > 0 {
			return s.Principals[0], nil
		}
	}
	return "", fmt.Errorf("your key %s is not in %s on main", ssh.FingerprintSHA256(key), requests.TrustFile)
}

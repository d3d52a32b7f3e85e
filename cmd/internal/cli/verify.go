package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/go-git/go-git/v5/plumbing"
	"nuon.dev/nuon/schemas"

	"github.com/spf13/cobra"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/signature"
)

type verifyOptions struct {
	repo, install, trust, output, cacheDir string
}

func NewVerifyCmd(g *Globals) *cobra.Command {
	o := &verifyOptions{}
	cmd := &cobra.Command{
		Use:   "verify --repo REPO --install ID --trust FILE",
		Short: "Check an install's desired state as its agent would, before anything is applied",
		Long: `Verify reads refs/heads/nuon/installs/<ID> and runs the agent's checks on it:
the commit must be signed by a key in FILE (git's allowed_signers format, the
file 'git verify-commit' reads through gpg.ssh.allowedSignersFile), it must name
install ID in its trailers and in install.json, and its files must be
well-formed. It exits 0 when the agent would accept the state and 1, with the
reason, when the agent would refuse it.`,
		Example: `  nuon verify --repo ./tenant.git --install acme --trust allowed_signers
  nuon verify --repo https://git.example.com/vendor/tenant.git --install acme \
      --trust allowed_signers --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := CheckOutput(o.output); err != nil {
				return err
			}
			return runVerify(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.repo, "repo", "", "tenant repository: a path or a URL (required)")
	f.StringVar(&o.install, "install", "", "install id (required)")
	f.StringVar(&o.trust, "trust", "", "allowed_signers file of trusted render keys (required)")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.StringVar(&o.cacheDir, "cache-dir", "", "where to keep mirrors of remote repositories")
	for _, n := range []string{"repo", "install", "trust"} {
		_ = cmd.MarkFlagRequired(n)
	}
	return cmd
}

type verifyReport struct {
	Install    string `json:"install"`
	Commit     string `json:"commit,omitempty"`
	Verified   bool   `json:"verified"`
	Generation int64  `json:"generation,omitempty"`
	Source     string `json:"source,omitempty"`
	Signer     string `json:"signer,omitempty"`
	Key        string `json:"key,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

func runVerify(ctx context.Context, g *Globals, o *verifyOptions) error {
	trust, err := signature.LoadAllowedSigners(o.trust)
	if err != nil {
		return err
	}
	repo, err := OpenRepo(o.repo, o.cacheDir)
	if err != nil {
		return err
	}
	if err := repo.Fetch(ctx, "refs/heads/nuon/installs/"+o.install); err != nil {
		return err
	}
	rep := verifyReport{Install: o.install}
	head, err := repo.Ref(plumbing.ReferenceName(schemas.InstallRef(o.install)))
	if err != nil {
		return err
	}
	if head.IsZero() {
		rep.Reason = fmt.Sprintf("no desired state: %s does not exist", plumbing.ReferenceName(schemas.InstallRef(o.install)))
	} else {
		rep.Commit = head.String()
		d, err := agent.Verify(repo.Storer(), head, o.install, trust, agent.Applied{})
		var ref *agent.Refusal
		switch {
		case errors.As(err, &ref):
			rep.Reason = ref.Reason
		case err != nil:
			return err
		default:
			rep.Verified, rep.Generation, rep.Source = true, d.Generation, d.Source
			rep.Signer, rep.Key = d.Signer.Principal, d.Signer.Fingerprint
		}
	}
	if o.output == "json" {
		enc := json.NewEncoder(g.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else if rep.Verified {
		fmt.Fprintf(g.Stdout, "%s: %s generation %d, signed by %s (%s), rendered from %.12s\n",
			rep.Install, rep.Commit[:12], rep.Generation, rep.Signer, rep.Key, rep.Source)
	} else {
		fmt.Fprintf(g.Stderr, "%s: refused: %s\n", rep.Install, rep.Reason)
	}
	if !rep.Verified {
		return ExitError{Code: 1}
	}
	return nil
}

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/fleet"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/schemas"
)

type verifyOptions struct {
	repo, install, trust, output, cacheDir, source, agentKey string
	trustRoot                                                string
	now                                                      func() time.Time
}

func NewVerifyCmd(g *Globals) *cobra.Command {
	o := &verifyOptions{now: time.Now}
	cmd := &cobra.Command{
		Use:   "verify --repo REPO --install ID --trust-root FILE",
		Short: "Check an install's desired state as its agent would, before anything is applied",
		Long: `Verify reads refs/heads/nuon/installs/<ID> and runs exactly the checks the
agent runs before it applies anything (the same function):

  - with --trust-root (version 1 of the trust root, as the agent was given
    it): the trust root in force is the newest version the chain reaches
    from it through the versions on --source and those the commit carries
    (trust/root/<n>.json), not expired; the commit is signed by one of its
    render keys, inside the key's window and not revoked, judged at the
    commit's time but never before the commit the install applied last;
  - with --trust (deprecated): the commit is signed by a key in FILE (git's
    allowed_signers format, the file 'git verify-commit' reads through
    gpg.ssh.allowedSignersFile);
  - it names install ID in its trailers and in install.json, and its files
    are well-formed;
  - its generation is newer than what the install's agent applied, read from
    refs/heads/nuon/status/<ID>, trusting only status commits signed by the
    install's own key (agentKey in installs/<ID>.yaml on --source, or
    --agent-key): a status commit the install did not sign is reported as
    forged and the baseline comes from the agent's own history behind it;
  - it is not past its Nuon-Expires time (stale state is not applied).

It exits 0 when the agent would apply the state and 1, with the reason, when
it would refuse it or find it stale.`,
		Example: `  nuon verify --repo ./tenant.git --install acme --trust-root trust/root/1.json
  nuon verify --repo ./tenant.git --install acme --trust allowed_signers
  nuon verify --repo https://git.example.com/vendor/tenant.git --install acme \
      --trust allowed_signers --output json
  # the install's key from a file rather than from main
  nuon verify --repo ./tenant.git --install acme --trust allowed_signers --agent-key acme.pub`,
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
	f.StringVar(&o.trust, "trust", "", "allowed_signers file of trusted render keys (deprecated: give --trust-root; one of them is required)")
	f.StringVar(&o.trustRoot, "trust-root", os.Getenv(EnvTrustRoot), TrustRootHelp)
	f.StringVar(&o.source, "source", schemas.MainRef, "where installs/<id>.yaml (with the agent's key) is read")
	f.StringVar(&o.agentKey, "agent-key", "", "the install's public key (authorized_keys line) instead of agentKey on --source")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.StringVar(&o.cacheDir, "cache-dir", "", "where to keep mirrors of remote repositories")
	for _, n := range []string{"repo", "install"} {
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
	// Stale and Expires: the commit is past its signed expiry.
	Stale   bool       `json:"stale,omitempty"`
	Expires *time.Time `json:"expires,omitempty"`
	// Applied is the rollback baseline: the generation the install's own
	// verified status reports, and that status commit.
	Applied       int64  `json:"appliedGeneration"`
	AppliedStatus string `json:"appliedStatus,omitempty"`
	// Forged names a status commit the install's key did not sign.
	Forged *schemas.Forged `json:"forgedStatus,omitempty"`
	// Root is the version of the trust root in force for the commit
	// (with --trust-root).
	Root int64 `json:"trustRoot,omitempty"`
}

func runVerify(ctx context.Context, g *Globals, o *verifyOptions) error {
	trust, root, err := loadRenderTrust(o.trust, o.trustRoot)
	if err != nil {
		return err
	}
	repo, err := g.OpenRepo(o.repo, o.cacheDir)
	if err != nil {
		return err
	}
	desiredRef := plumbing.ReferenceName(schemas.InstallRef(o.install))
	statusRef := plumbing.ReferenceName(schemas.StatusRef(o.install))
	prefixes := []string{desiredRef.String(), statusRef.String()}
	if o.agentKey == "" && strings.HasPrefix(o.source, "refs/") {
		prefixes = append(prefixes, o.source)
	}
	if err := repo.Fetch(ctx, prefixes...); err != nil {
		return err
	}
	rep := verifyReport{Install: o.install}
	head, err := repo.Ref(desiredRef)
	if err != nil {
		return err
	}
	// The rollback baseline: the install's own verified status.
	var applied agent.Applied
	if status, err := repo.Ref(statusRef); err == nil && !status.IsZero() {
		key, err := o.installKey(repo)
		if err != nil {
			return fmt.Errorf("verify %s: the rollback check needs the install's key: %w", o.install, err)
		}
		v, err := agent.VerifyStatus(repo.Storer(), status, o.install, key)
		if err != nil {
			return err
		}
		applied = v.Applied()
		rep.Applied, rep.Forged = v.Generation, v.Forged
		if !v.Commit.IsZero() {
			rep.AppliedStatus = v.Commit.String()
		}
	}
	if head.IsZero() {
		rep.Reason = fmt.Sprintf("no desired state: %s does not exist", desiredRef)
	} else {
		rep.Commit = head.String()
		checks := agent.Checks{Install: o.install, Trust: trust, Applied: applied, Now: o.now()}
		if root != nil {
			held, err := o.heldRoot(ctx, repo, root)
			if err != nil {
				return err
			}
			checks.Root = agent.NewRootChecks(repo.Storer(), held, applied)
		}
		d, err := agent.Check(repo.Storer(), head, checks)
		var ref *agent.Refusal
		switch {
		case errors.As(err, &ref):
			rep.Reason = ref.Reason
		case errors.Is(err, agent.ErrStale):
			rep.Stale, rep.Reason = true, err.Error()
			rep.Generation, rep.Expires = d.Generation, &d.Expires
		case err != nil:
			return err
		default:
			rep.Verified, rep.Generation, rep.Source = true, d.Generation, d.Source
			rep.Signer, rep.Key = d.Signer.Principal, d.Signer.Fingerprint
			if d.Root != nil {
				rep.Root = d.Root.Version
			}
			if !d.Expires.IsZero() {
				rep.Expires = &d.Expires
			}
		}
	}
	if o.output == "json" {
		enc := json.NewEncoder(g.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		if rep.Forged != nil {
			fmt.Fprintf(g.Stderr, "%s: status commit %.12s is forged (%s); rollback baseline from the install's own status: generation %d\n",
				rep.Install, rep.Forged.Commit, rep.Forged.Reason, rep.Applied)
		}
		if rep.Verified {
			fmt.Fprintf(g.Stdout, "%s: %s generation %d, signed by %s (%s), rendered from %.12s\n",
				rep.Install, rep.Commit[:12], rep.Generation, rep.Signer, rep.Key, rep.Source)
		} else if rep.Stale {
			fmt.Fprintf(g.Stderr, "%s: stale: %s\n", rep.Install, rep.Reason)
		} else {
			fmt.Fprintf(g.Stderr, "%s: refused: %s\n", rep.Install, rep.Reason)
		}
	}
	if !rep.Verified {
		return ExitError{Code: 1}
	}
	return nil
}

// installKey is the install's public key: --agent-key, or agentKey in
// installs/<id>.yaml on --source.
func (o *verifyOptions) installKey(repo *gitrepo.Repo) (ssh.PublicKey, error) {
	var line string
	if o.agentKey != "" {
		data, err := os.ReadFile(o.agentKey)
		if err != nil {
			return nil, err
		}
		line = string(data)
	} else {
		src, err := repo.Resolve(o.source)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", o.source, err)
		}
		keys, err := fleet.AgentKeys(repo.Storer(), src)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", o.source, err)
		}
		if line = keys[o.install]; line == "" {
			return nil, fmt.Errorf("no agentKey in %s on %s (give --agent-key)", schemas.InstallsDir+"/"+o.install+".yaml", o.source)
		}
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return nil, fmt.Errorf("agent key: %w", err)
	}
	return pub, nil
}

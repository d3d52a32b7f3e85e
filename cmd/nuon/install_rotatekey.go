package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/cmd/internal/cli"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
)

// rotateKeyReport is what nuon install rotate-key -o json prints.
type rotateKeyReport struct {
	Install    string `json:"install"`
	Status     string `json:"status"`     // the new status tip: the hand-over and the new key's first status
	AgentKey   string `json:"agentKey"`   // the new key, for installs/ID.yaml
	RetiredKey string `json:"retiredKey"` // the key that stopped
}

func newInstallRotateKeyCmd(g *cli.Globals) *cobra.Command {
	var dir, repo, output string
	var serverAuth bool
	cmd := &cobra.Command{
		Use:   "rotate-key ID --repo REPO --dir DIR",
		Short: "Rotate install ID's agent key: the old key signs the hand-over to a new one",
		Long: `Rotate the install's own key (DIR/agent.key) without touching main first:

  1. a new ed25519 key is made as DIR/agent.key.next (kept when it exists
     already, so a run that failed can be run again);
  2. on the install's status ref, a hand-over record signed by the old key
     (trailers Nuon-Key-Handover: the new key, Nuon-Key-Retired: the old)
     and the new key's first status (same status, same generation) are
     pushed in one push. The tenant server accepts it because the key in
     force signed it, and from then on takes only the new key: the old
     key's requests get 401 and its status commits are refused;
  3. DIR/agent.key becomes DIR/agent.key.retired and agent.key.next
     becomes agent.key (with their .pub).

Stop the agent first (kill -TERM -- -$(cat DIR/agent.pid)) and start it
again after (nuon install create ID --repo REPO --dir DIR --phase agent):
an agent still running with the old key is refused by the server.

Then record the rotation on main: set agentKey in installs/ID.yaml to the
new key (printed) in a reviewed change. The server keeps the new key while
main names the old or the new one; main naming a third key is an
operator's re-keying, and wins over the hand-over.

A hand-over is refused when the old key is not the install's key in force,
when the new key was the install's before, or when another install uses
it.`,
		Example: `  kill -TERM -- -$(cat ~/.nuon/acme/agent.pid)
  nuon install rotate-key acme --repo https://nuon.example.com/tenant.git --server-auth --dir ~/.nuon/acme
  nuon install create acme --repo https://nuon.example.com/tenant.git --dir ~/.nuon/acme --phase agent`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cli.CheckOutput(output); err != nil {
				return err
			}
			if dir == "" || repo == "" {
				return errors.New("--dir and --repo are required: the install's directory (as nuon install create made it) and its tenant repository")
			}
			install := args[0]
			keyFile := filepath.Join(dir, "agent.key")
			old, err := signature.LoadSigner(keyFile)
			if err != nil {
				return fmt.Errorf("the install's key: %w", err)
			}
			next, err := nextAgentKey(keyFile+".next", install)
			if err != nil {
				return err
			}
			auth, err := g.GitAuth()
			if err != nil {
				return err
			}
			opts := []agent.RemoteOption{agent.WithGitAuth(auth)}
			if serverAuth {
				opts = append(opts, agent.WithRequestSigner(&request.Signer{Install: install, Key: old}))
			}
			work := filepath.Join(dir, "rotate")
			if err := os.MkdirAll(work, 0o700); err != nil {
				return err
			}
			tip, err := agent.RotateKey(cmd.Context(), agent.Rotation{Install: install, Workdir: work, Remote: agent.NewRemote(repo, opts...), Old: old, New: next})
			if err != nil {
				return fmt.Errorf("%w (nothing in %s changed; DIR/agent.key.next is kept for the next run)", err, dir)
			}
			for _, ext := range []string{"", ".pub"} {
				if err := os.Rename(keyFile+ext, keyFile+".retired"+ext); err != nil {
					return fmt.Errorf("the hand-over is pushed, but: %w; move %s.next%s to %s%s by hand", err, keyFile, ext, keyFile, ext)
				}
				if err := os.Rename(keyFile+".next"+ext, keyFile+ext); err != nil {
					return fmt.Errorf("the hand-over is pushed, but: %w; move %s.next%s to %s%s by hand", err, keyFile, ext, keyFile, ext)
				}
			}
			r := rotateKeyReport{Install: install, Status: tip.String(), AgentKey: next.AuthorizedKey(), RetiredKey: old.AuthorizedKey()}
			if output == "json" {
				return json.NewEncoder(g.Stdout).Encode(r)
			}
			fmt.Fprintf(g.Stdout, "%s: agent key handed over to %s in status %s\n", install, ssh.FingerprintSHA256(next.PublicKey()), tip)
			fmt.Fprintf(g.Stdout, "retired: %s (%s.retired)\n", ssh.FingerprintSHA256(old.PublicKey()), keyFile)
			fmt.Fprintf(g.Stdout, "next: start the agent again, and set in installs/%s.yaml on main:\n  agentKey: %s\n", install, r.AgentKey)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "the install's directory (nuon install create --dir): agent.key is there (required)")
	f.StringVar(&repo, "repo", "", "the tenant repository the agent pushes its status to (required)")
	f.BoolVar(&serverAuth, "server-auth", false, "sign each request with the install's (old) key, as nuon agent --server-auth does")
	f.StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

// nextAgentKey reads file, or makes it (and file.pub) when absent.
func nextAgentKey(file, install string) (*signature.Signer, error) {
	if _, err := os.Stat(file); err == nil {
		return signature.LoadSigner(file)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, "agent-"+install)
	if err != nil {
		return nil, err
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(file+".pub", []byte(strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))+" agent-"+install+"\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, err
	}
	return signature.LoadSigner(file)
}

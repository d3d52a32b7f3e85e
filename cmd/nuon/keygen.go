package main

import (
	"nuon.dev/nuon/cmd/internal/cli"

	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
)

func newKeygenCmd(g *cli.Globals) *cobra.Command {
	var comment string
	var force bool
	cmd := &cobra.Command{
		Use:   "keygen FILE",
		Short: "Make an ed25519 signing key (FILE and FILE.pub, as ssh-keygen does)",
		Long: `Make an OpenSSH ed25519 key pair for signing: FILE holds the private key
(mode 0600) and FILE.pub the public key. The renderer signs desired state with
such a key; each install's agent signs its status with its own.`,
		Example: `  nuon keygen render.key
  nuon keygen --comment agent-acme keys/acme`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file := args[0]
			if !force {
				if _, err := os.Stat(file); err == nil {
					return fmt.Errorf("%s exists; use --force to replace it", file)
				}
			}
			pub, priv, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				return err
			}
			block, err := ssh.MarshalPrivateKey(priv, comment)
			if err != nil {
				return err
			}
			if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
				return err
			}
			sp, err := ssh.NewPublicKey(pub)
			if err != nil {
				return err
			}
			line := string(ssh.MarshalAuthorizedKey(sp))
			if comment != "" {
				line = line[:len(line)-1] + " " + comment + "\n"
			}
			if err := os.WriteFile(file+".pub", []byte(line), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(g.Stdout, "%s\n%s", file, line)
			return nil
		},
	}
	cmd.Flags().StringVar(&comment, "comment", "", "comment stored with the key")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing key")
	return cmd
}

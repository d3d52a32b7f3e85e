package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"nuon.dev/nuon/cmd/internal/cli"
	"nuon.dev/nuon/internal/atomicfile"
	"nuon.dev/nuon/stack"
)

// newInstallCmd is the parent of the install lifecycle commands.
func newInstallCmd(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Set up, create and delete installs in customers' cloud accounts",
		Long: `Install lifecycle: the customer applies the stack once (nuon install stack),
which gives the tenant roles to assume with a per-install ExternalId; the
tenant then creates the install from them.`,
	}
	cmd.AddCommand(newInstallStackCmd(g), newInstallCreateCmd(g), newInstallDeleteCmd(g), newInstallRotateKeyCmd(g))
	return cmd
}

type stackOptions struct {
	tenantAccount, externalID, format, out string
	session                                int
}

func newInstallStackCmd(g *cli.Globals) *cobra.Command {
	o := &stackOptions{}
	cmd := &cobra.Command{
		Use:   "stack ID --tenant-account ACCOUNT",
		Short: "Write the stack a customer applies to let the tenant create install ID",
		Long: `Write what the customer applies once, with their own credentials, before
install ID can be created in their AWS account: a CloudFormation template
(default) or the same as a Terraform module. It creates one IAM role per
phase (nuon-ID-provision, -maintenance, -deprovision, and -break-glass only
when the customer enables it), each trusting only the tenant's account and
only with the install's ExternalId, and the S3 bucket for the install's
Terraform state (versioned, encrypted, private, TLS-only; locked with
use_lockfile). Deleting the stack revokes every role.

Without --external-id a random one (160 bits) is made and printed on
stderr: keep it with the install; it is not a secret, but it must not be
guessable. The template goes to stdout, or to FILE with -o.`,
		Example: `  # CloudFormation for the customer's console or aws cloudformation deploy
  nuon install stack acme --tenant-account 123456789012 -o acme-stack.json

  # the same as Terraform, with an ExternalId you already recorded
  nuon install stack acme --tenant-account 123456789012 \
      --external-id nuon-6q3c... --format terraform -o stack/main.tf`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runInstallStack(g, args[0], o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.tenantAccount, "tenant-account", "", "the tenant's 12-digit AWS account, the only one the roles trust (required)")
	f.StringVar(&o.externalID, "external-id", "", "the install's ExternalId (default: a new random one, printed on stderr)")
	f.StringVar(&o.format, "format", "cloudformation", "cloudformation (JSON template) or terraform (main.tf)")
	f.StringVarP(&o.out, "out", "o", "", "write to FILE instead of stdout")
	f.IntVar(&o.session, "session-seconds", stack.DefaultSessionSeconds, "how long assumed-role credentials last (900-43200)")
	_ = cmd.MarkFlagRequired("tenant-account")
	return cmd
}

func runInstallStack(g *cli.Globals, id string, o *stackOptions) error {
	var write func(stack.Options) ([]byte, error)
	switch o.format {
	case "cloudformation":
		write = stack.CloudFormation
	case "terraform":
		write = stack.Terraform
	default:
		return fmt.Errorf("--format must be cloudformation or terraform, not %q", o.format)
	}
	generated := false
	if o.externalID == "" {
		x, err := stack.NewExternalID()
		if err != nil {
			return err
		}
		o.externalID, generated = x, true
	}
	b, err := write(stack.Options{InstallID: id, TenantAccount: o.tenantAccount, ExternalID: o.externalID, SessionSeconds: o.session})
	if err != nil {
		return fmt.Errorf("install stack %s: %w", id, err)
	}
	if generated {
		fmt.Fprintf(g.Stderr, "external id for install %s: %s\n", id, o.externalID)
	}
	if o.out == "" {
		_, err = g.Stdout.Write(b)
		return err
	}
	if err := atomicfile.Write(o.out, b, 0o644); err != nil {
		return fmt.Errorf("install stack %s: %w", id, err)
	}
	fmt.Fprintf(g.Stderr, "wrote %s (%s) for install %s\n", o.out, o.format, id)
	return nil
}

// Command nuon is the one CLI of nuon: the tenant renders installs' desired
// state, vendor CI builds and releases artifacts, and each install's agent
// applies its state and reports back. See `nuon --help`. cmd/nuon-agent is
// the agent alone, for the install's long-running process.
package main

import (
	"io"
	"os"

	"github.com/spf13/cobra"

	"nuon.dev/nuon/cmd/internal/cli"
)

func main() { cli.Main(newRoot(os.Stdout, os.Stderr)) }

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "nuon",
		Short: "Ship one application into thousands of customer cloud accounts with git",
		Long: `nuon keeps every customer install of a vendor's application in one git
repository. People promote versions with pull requests on main; vendor CI
records releases; the tenant renders each install's desired state into signed
commits on refs/heads/nuon/installs/<id>; each install's agent pulls only its
own ref, verifies the signature, applies the difference with plugin jobs and
writes signed status to refs/heads/nuon/status/<id>.`,
	}
	return cli.NewRoot(root, stdout, stderr, func(g *cli.Globals) []*cobra.Command {
		return []*cobra.Command{
			newRenderCmd(g),
			cli.NewVerifyCmd(g),
			cli.NewAgentCmd(g),
			newJobCmd(g),
			newPluginCmd(g),
			cli.NewStatusCmd(g),
			cli.NewLogsCmd(g),
			cli.NewDebugCmd(g),
			cli.NewRequestsCmd(g),
			newApproveCmd(g), newRejectCmd(g), newApprovalsCmd(g),
			cli.NewTrustCmd(g),
			newKeygenCmd(g),
			withRemoteBuild(newBuildCmd(g), g),
			newBuildAgentCmd(g),
			newReleaseCmd(g),
			newServerCmd(g),
			newInstallCmd(g),
			newRolloutCmd(g),
		}
	})
}

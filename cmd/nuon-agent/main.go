// Command nuon-agent is the install agent alone: `nuon-agent agent` polls,
// verifies, plans and reports exactly as `nuon agent` does, and runs each
// job with the nuon binary (`nuon job run`). It links none of the plugins,
// the builder or their libraries, so the process that runs all the time in
// the install stays small; verify and status come along for debugging.
package main

import (
	"os"

	"github.com/spf13/cobra"

	"nuon.dev/nuon/cmd/internal/cli"
)

func main() {
	root := &cobra.Command{
		Use:   "nuon-agent",
		Short: "The nuon install agent (jobs run with the nuon binary)",
	}
	cli.Main(cli.NewRoot(root, os.Stdout, os.Stderr, func(g *cli.Globals) []*cobra.Command {
		return []*cobra.Command{cli.NewAgentCmd(g), cli.NewVerifyCmd(g), cli.NewStatusCmd(g)}
	}))
}

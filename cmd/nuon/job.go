package main

import (
	"github.com/spf13/cobra"

	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/reconciler/terraform"
	"nuon.dev/nuon/schemas"
)

// plugins are the component types this binary's jobs can apply.
func plugins() map[string]reconciler.Plugin {
	return map[string]reconciler.Plugin{
		schemas.TypeTerraform: &terraform.Plugin{},
	}
}

func jobPlugins() []string {
	var out []string
	for name := range plugins() {
		out = append(out, name)
	}
	return out
}

func newJobCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "job",
		Short: "Run plugin jobs (the agent spawns these; you rarely need to)",
	}
	var artifacts string
	run := &cobra.Command{
		Use:   "run MANIFEST",
		Short: "Run one job manifest in this process",
		Long: `Run executes one job manifest (JSON, schemas/job.schema.json): the plugin of
the component's type creates, updates or deletes it, and the result (outputs;
sensitive outputs by name only) is written to the manifest's resultFile. The
agent runs every job this way, each in its own process group, so a job can be
cancelled as a whole and cannot starve the agent. Run it by hand to replay a
job from an agent's workdir (jobs/<id>/manifest.json).`,
		Example: `  nuon job run /var/lib/nuon/jobs/network-g3-update-1a2b3c/manifest.json`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return jobs.Main(cmd.Context(), args[0], plugins(), jobs.DirArtifacts{Root: artifacts}, g.stdout)
		},
	}
	run.Flags().StringVar(&artifacts, "artifacts", "artifacts", "directory of component artifacts by repository name")
	cmd.AddCommand(run)
	return cmd
}

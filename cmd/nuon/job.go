package main

import (
	"nuon.dev/nuon/cmd/internal/cli"

	"github.com/spf13/cobra"

	"nuon.dev/nuon/jobrun"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/reconciler/helm"
	"nuon.dev/nuon/reconciler/manifests"
	"nuon.dev/nuon/reconciler/terraform"
	"nuon.dev/nuon/schemas"
)

// plugins are the component types this binary's jobs can apply; the
// Kubernetes ones connect with kubeconfig (empty: KUBECONFIG, ~/.kube/config
// or the pod's service account).
func plugins(kubeconfig string) map[string]reconciler.Plugin {
	return map[string]reconciler.Plugin{
		schemas.TypeTerraform: &terraform.Plugin{},
		schemas.TypeHelm:      &helm.Plugin{Kubeconfig: kubeconfig},
		schemas.TypeManifests: &manifests.Plugin{Kubeconfig: kubeconfig},
	}
}

func newJobCmd(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "job",
		Short: "Run plugin jobs (the agent spawns these; you rarely need to)",
	}
	var artifacts, kubeconfig string
	var pod bool
	var reg cli.RegistryOptions
	run := &cobra.Command{
		Use:   "run MANIFEST",
		Short: "Run one job manifest in this process",
		Long: `Run executes one job manifest (JSON, schemas/job.schema.json): the plugin of
the component's type creates, updates or deletes it, and the result (outputs;
sensitive outputs by name only) is written to the manifest's resultFile. The
agent runs every job this way, each in its own process group, so a job can be
cancelled as a whole and cannot starve the agent. Run it by hand to replay a
job from an agent's workdir (jobs/<id>/manifest.json).

Artifacts come from the install registry, by the digests the manifest pins.
For development and air-gapped tests, not production, --artifacts DIR reads
them from an OCI image layout instead (the directory 'crane pull
--format=oci' or 'skopeo copy ... oci:DIR' writes); every manifest and layer
read from it must hash to its digest, as from a registry, or the job fails
before the plugin runs.`,
		Example: `  nuon job run /var/lib/nuon/jobs/network-g3-update-1a2b3c/manifest.json

  # replay a job against artifacts copied to local disk
  crane pull --format=oci registry.example.com/acme/network@sha256:… ./artifacts
  nuon job run --artifacts ./artifacts ./work/jobs/network-g3-update-1a2b3c/manifest.json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := reg.ArtifactSource(artifacts)
			if err != nil {
				return err
			}
			if pod {
				return jobrun.PodMain(cmd.Context(), args[0], plugins(kubeconfig), src, g.Stdout)
			}
			return jobrun.Main(cmd.Context(), args[0], plugins(kubeconfig), src, g.Stdout)
		},
	}
	run.Flags().StringVar(&artifacts, "artifacts", "", cli.ArtifactsHelp)
	reg.Flags(run.Flags())
	run.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for the helm and manifests plugins (default: KUBECONFIG, ~/.kube/config, in-cluster)")
	run.Flags().BoolVar(&pod, "pod", false, "running in a Kubernetes Job's pod: also print the result as the last line and as the termination message")
	cmd.AddCommand(run)
	return cmd
}

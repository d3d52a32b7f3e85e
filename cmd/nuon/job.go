package main

import (
	"nuon.dev/nuon/cmd/internal/cli"

	"github.com/spf13/cobra"

	"nuon.dev/nuon/internal/toolcache"
	"nuon.dev/nuon/jobrun"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/reconciler/helm"
	"nuon.dev/nuon/reconciler/manifests"
	"nuon.dev/nuon/reconciler/terraform"
	"nuon.dev/nuon/schemas"
)

// plugins are the component types this binary's jobs can apply; the
// Kubernetes ones connect with kubeconfig (empty: KUBECONFIG, ~/.kube/config
// or the pod's service account), terraform installs providers as the CLI
// configuration tfConfig says (empty: TF_CLI_CONFIG_FILE or terraform's
// default).
func plugins(kubeconfig, tfConfig string) map[string]reconciler.Plugin {
	return map[string]reconciler.Plugin{
		schemas.TypeTerraform: &terraform.Plugin{CLIConfig: tfConfig},
		schemas.TypeHelm:      &helm.Plugin{Kubeconfig: kubeconfig},
		schemas.TypeManifests: &manifests.Plugin{Kubeconfig: kubeconfig},
	}
}

func newJobCmd(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "job",
		Short: "Run plugin jobs (the agent spawns these; you rarely need to)",
	}
	var artifacts, kubeconfig, tfConfig string
	var pod bool
	var reg cli.RegistryOptions
	var procs processPlugins
	run := &cobra.Command{
		Use:   "run MANIFEST",
		Short: "Run one job manifest in this process",
		Long: `Run executes one job manifest (JSON, schemas/job.schema.json) and writes the
result to the manifest's resultFile (schemas/job-result.schema.json).

The operation says what the plugin of the component's type does:
  create, update   apply the component; the result has its outputs (sensitive
                   ones by name only) and its health
  delete           remove it
  drift            compare the install with the desired state, change nothing;
                   the result lists what differs per resource
  health           report how the component stands, change nothing
  debug            run the read-only command in the manifest's debug.command,
                   from a fixed allow-list (internal/debugcmd), and answer with
                   its output, bounded by debug.maxBytes

The install's secrets (NUON_SECRET_* variables) are redacted from everything the
job prints, its tools included, and from its result (debug answers too). The
agent runs every job this way, each in its own process group, so a job can
be cancelled as a whole and cannot starve the agent. Run it by hand to replay a
job from an agent's workdir (jobs/<id>/manifest.json).

Artifacts come from the install registry, by the digests the manifest pins.
For development and air-gapped tests, not production, --artifacts DIR reads
them from an OCI image layout instead (the directory 'crane pull
--format=oci' or 'skopeo copy ... oci:DIR' writes); every manifest and layer
read from it must hash to its digest, as from a registry, or the job fails
before the plugin runs.`,
		Example: `  nuon job run /var/lib/nuon/jobs/network-g3-update-1a2b3c/manifest.json

  # A drift check of the same component: the same manifest, operation "drift".
  jq '.operation = "drift" | .resultFile = "/tmp/drift.json"' manifest.json > drift.json
  nuon job run drift.json && jq .drift /tmp/drift.json

  # A debug command: pod logs in the component's namespace.
  jq '.operation = "debug" | .debug = {command: ["logs", "api-7d9f", "--tail", "100"]}' manifest.json > debug.json
  nuon job run debug.json

  # replay a job against artifacts copied to local disk
  crane pull --format=oci registry.example.com/acme/network@sha256:… ./artifacts
  nuon job run --artifacts ./artifacts ./work/jobs/network-g3-update-1a2b3c/manifest.json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := toolcache.CheckTerraformConfig(tfConfig, "--tf-cli-config"); err != nil {
				return err
			}
			src, err := reg.ArtifactSource(artifacts)
			if err != nil {
				return err
			}
			ps := plugins(kubeconfig, tfConfig)
			cleanup, err := procs.run(cmd.Context(), ps, kubeconfig, tfConfig, &reg, args[0])
			if err != nil {
				return err
			}
			defer cleanup()
			if pod {
				return jobrun.PodMain(cmd.Context(), args[0], ps, src, g.Stdout, jobrun.WithStdio())
			}
			return jobrun.Main(cmd.Context(), args[0], ps, src, g.Stdout, jobrun.WithStdio())
		},
	}
	run.Flags().StringVar(&artifacts, "artifacts", "", cli.ArtifactsHelp)
	reg.Flags(run.Flags())
	run.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for the helm and manifests plugins (default: KUBECONFIG, ~/.kube/config, in-cluster)")
	run.Flags().StringVar(&tfConfig, "tf-cli-config", cli.TerraformConfigDefault(), cli.TerraformConfigHelp)
	procs.register(run.Flags())
	run.Flags().BoolVar(&pod, "pod", false, "running in a Kubernetes Job's pod: also print the result as the last line and as the termination message")
	cmd.AddCommand(run)
	return cmd
}

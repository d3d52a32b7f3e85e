package main

import (
	"nuon.dev/nuon/cmd/internal/cli"

	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"nuon.dev/nuon/builder"
)

type buildOptions struct {
	app, src, key, tag, output string
	builderKey, builderID      string
	source                     builder.Source
	dirs                       map[string]string
	registry                   cli.RegistryOptions
}

func newBuildCmd(g *cli.Globals) *cobra.Command {
	o := &buildOptions{}
	cmd := &cobra.Command{
		Use:   "build [COMPONENT...] --key cosign.key",
		Short: "Package components as OCI artifacts, push them to the vendor registry and sign them",
		Long: `Build packages each component of nuon.yaml (those named, or all) as an OCI
artifact, pushes it by digest to the component's repository, signs it with the
vendor's cosign key and prints the digests, for 'nuon release'.

A terraform module and a set of manifests become OCI artifacts of nuon's own
media types, a helm chart becomes a Helm OCI chart (stock 'helm pull' reads it;
it is also tagged with its version), and an image component's image is copied
unchanged, by digest. Builds are reproducible: the same directory gives the
same digest on any machine.

Each component's source is found under --src by type: modules/<component>,
charts/<component>, manifests/<component>, images/<component> (an OCI image
layout); --dir COMPONENT=PATH overrides that, and for an image component PATH
may be an image reference instead.

When nuon.yaml declares a sandbox, it is built too, as the component
'sandbox': each folder of sandboxes/ under --src (or of --dir sandbox=PATH)
becomes a terraform module artifact named after the folder (local, aws-eks).
'nuon release sandbox' records them as one sandbox version.

The signature is stored as 'cosign sign --key' stores it (the
sha256-<digest>.sig tag), offline: no transparency log, no certificate. 'cosign
verify --key cosign.pub --insecure-ignore-tlog' accepts it, and so does every
install's agent. The key's password is read from COSIGN_PASSWORD. A rebuild of
unchanged sources pushes nothing and keeps the signature.

With --builder-key, each artifact also gets a SLSA v1 provenance statement
(builder id, source repository, ref and commit, build parameters, the
artifact's digest) as an in-toto statement in a DSSE envelope signed with that
key (a key of the trust root's builders role), stored as 'cosign attest'
stores it (the sha256-<digest>.att tag): 'cosign verify-attestation --key
builder.pub --type slsaprovenance1 --insecure-ignore-tlog' accepts it.

Registry credentials come from the docker config file, as for docker and
crane, from --registry-username (password in NUON_REGISTRY_PASSWORD), or for
Amazon ECR from the AWS configuration.`,
		Example: `  # vendor CI: build everything, then record the release
  nuon build --app nuon.yaml --src . --key cosign.key -o json > build.json
  nuon release --repo git@github.com:acme/tenant.git --version 2.5.0 --from build.json api

  # one component from a directory of its own, tagged
  nuon build api --app nuon.yaml --dir api=./deploy/chart --key cosign.key --tag 2.5.0

  # the sandbox: every module of nuon's sandboxes/, released as version 0.2.0
  nuon build sandbox --app nuon.yaml --dir sandbox=./sandboxes --key cosign.key -o json > sandbox.json
  nuon release sandbox --repo git@github.com:acme/tenant.git --version 0.2.0 --from sandbox.json

  # an image component: copy an image built elsewhere, by digest
  nuon build api-image --app nuon.yaml --key cosign.key \
      --dir api-image=ghcr.io/acme/api@sha256:0123…`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cli.CheckOutput(o.output); err != nil {
				return err
			}
			return runBuild(cmd.Context(), g, o, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.app, "app", "nuon.yaml", "the app file (nuon.yaml on main) naming the components and their repositories")
	f.StringVar(&o.src, "src", "", "root of the component sources, laid out by type (modules/, charts/, manifests/, images/)")
	f.StringToStringVar(&o.dirs, "dir", nil, "COMPONENT=PATH: a component's source, instead of the layout under --src")
	f.StringVar(&o.key, "key", "", "the vendor's cosign private key (cosign.key; password in COSIGN_PASSWORD) (required)")
	f.StringVar(&o.tag, "tag", "", "also tag every artifact with TAG")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.StringVar(&o.builderKey, "builder-key", "", "cosign private key of this builder (a key of the trust root's builders role; password in COSIGN_PASSWORD): write signed SLSA v1 provenance for each artifact")
	f.StringVar(&o.builderID, "builder-id", "", "the builder's id in the provenance (with --builder-key; required then)")
	f.StringVar(&o.source.Repository, "source-repo", "", "the source repository's URI, e.g. git+https://git.example.com/acme/shop (with --builder-key; required then)")
	f.StringVar(&o.source.Ref, "source-ref", "", "the ref built, e.g. refs/tags/v2.5.0 (with --builder-key; required then)")
	f.StringVar(&o.source.Commit, "source-commit", "", "the commit the ref named (with --builder-key; required then)")
	o.registry.Flags(f)
	_ = cmd.MarkFlagRequired("key")
	return cmd
}

// buildReport is the --output json document; nuon release --from reads it.
type buildReport struct {
	Artifacts []builder.Artifact `json:"artifacts"`
}

func runBuild(ctx context.Context, g *cli.Globals, o *buildOptions, names []string) error {
	app, err := builder.LoadApp(o.app)
	if err != nil {
		return err
	}
	targets, err := builder.Targets(app, o.src, o.dirs, names)
	if err != nil {
		return err
	}
	key, err := builder.LoadKey(o.key, []byte(os.Getenv("COSIGN_PASSWORD")))
	if err != nil {
		return err
	}
	client, _, err := o.registry.Client()
	if err != nil {
		return err
	}
	bo := builder.Options{Client: client, Signer: key, Tag: o.tag, Logger: g.Logger()}
	if o.builderKey != "" {
		if o.builderID == "" || o.source.Repository == "" || o.source.Ref == "" || o.source.Commit == "" {
			return fmt.Errorf("--builder-key: provenance needs --builder-id, --source-repo, --source-ref and --source-commit")
		}
		if bo.BuilderKey, err = builder.LoadKey(o.builderKey, []byte(os.Getenv("COSIGN_PASSWORD"))); err != nil {
			return fmt.Errorf("--builder-key: %w", err)
		}
		bo.Provenance = &builder.Provenance{BuilderID: o.builderID, Source: o.source}
	}
	arts, err := builder.Build(ctx, targets, bo)
	if err != nil {
		return err
	}
	return printBuild(g.Stdout, o.output, arts)
}

func printBuild(w io.Writer, output string, arts []builder.Artifact) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(buildReport{Artifacts: arts})
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, a := range arts {
		sig := "signed"
		if !a.Signed {
			sig = "signature kept"
		}
		tags := ""
		if len(a.Tags) > 0 {
			tags = " (" + strings.Join(a.Tags, ", ") + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s%s\t%s\n", a.Component, a.Name, a.Ref(), tags, sig)
	}
	return tw.Flush()
}

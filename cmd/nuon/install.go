package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/spf13/cobra"

	"nuon.dev/nuon/cmd/internal/cli"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/toolcache"
	"nuon.dev/nuon/lifecycle"
	"nuon.dev/nuon/schemas"
)

type installOptions struct {
	lifecycle.Options
	author, output string
}

// progress prints each phase's event as text or, with -o json, as one JSON
// object a line.
func (o *installOptions) progress(g *cli.Globals) (func(lifecycle.Event), error) {
	switch o.output {
	case "text":
		return func(e lifecycle.Event) {
			fmt.Fprintf(g.Stdout, "%-13s %-9s %5.1fs  %s\n", e.Phase, e.Result, e.Seconds, e.Detail)
		}, nil
	case "json":
		enc := json.NewEncoder(g.Stdout)
		return func(e lifecycle.Event) { _ = enc.Encode(e) }, nil
	}
	return nil, fmt.Errorf("--output must be text or json, not %q", o.output)
}

// prepare fills in what create and delete take from the command line
// and its globals: the install's id, the commits' author, progress, the
// logger, how to open the tenant repository, and on AWS the tenant's
// credentials.
func (o *installOptions) prepare(ctx context.Context, g *cli.Globals, id string) error {
	o.ID = id
	var err error
	if o.AuthorName, o.AuthorEmail, err = installAuthor(o.author); err != nil {
		return err
	}
	if o.Progress, err = o.progress(g); err != nil {
		return err
	}
	o.Logger = g.Logger()
	o.OpenRepo = func(location string) (*gitrepo.Repo, error) { return g.OpenRepo(location, "") }
	return o.tenantAWS(ctx)
}

func (o *installOptions) common(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.Repo, "repo", "", "tenant repository: a path or a URL (required)")
	f.StringVar(&o.Dir, "dir", "", "the install's directory: its keys, the sandbox's state, the agent's pid file and log; never committed (required)")
	f.StringVar(&o.Cloud, "cloud", lifecycle.CloudLocal, "where the install runs: local (the local sandbox) or aws")
	f.StringVar(&o.TFCLIConfig, "tf-cli-config", cli.TerraformConfigDefault(), "terraform CLI configuration for the sandbox's terraform and the agent's terraform jobs, e.g. the offline provider mirror's: $"+toolcache.EnvTFCLIConfig+", else (without $TF_CLI_CONFIG_FILE) "+toolcache.TerraformConfig()+" when 'make tf-providers' wrote it")
	f.StringVar(&o.Terraform, "terraform", "terraform", "the terraform binary")
	f.StringVarP(&o.output, "output", "o", "text", "progress as text, or json: one object per phase")
	_ = cmd.MarkFlagRequired("repo")
	_ = cmd.MarkFlagRequired("dir")
}

func newInstallCreateCmd(g *cli.Globals) *cobra.Command {
	o := &installOptions{}
	cmd := &cobra.Command{
		Use:   "create ID --repo REPO --dir DIR [--channel CHANNEL --render-key FILE.pub]",
		Short: "Create install ID: keys, sandbox, installs/ID.yaml, agent",
		Long: `Create install ID, phase by phase, printing each phase as it ends:

  keys          the install's ed25519 key pair (DIR/agent.key, .pub) and the
                agent's trust file (DIR/trust) from the render public key
  sandbox       the sandbox applied with terraform (--cloud local: a local
                kube-apiserver and a registry with TLS and basic auth; state
                and outputs in DIR/sandbox)
  install-file  installs/ID.yaml as a commit on the branch nuon/install/ID
                for review, or on main with --commit; its agentKey is the
                install's key. When nuon.yaml declares a sandbox, the file
                names it with this install's module inputs (and on aws the
                maintenance role) and no registry: the agent manages the
                sandbox from then on, at the channel's version, and its
                registry output stands for the install's registry. Without
                one, the registry is copied from the sandbox's output.
  agent         nuon-agent started as a process (pid in DIR/agent.pid, log
                in DIR/agent.log, --sandbox-dir DIR/sandbox), since no
                kubelet runs on the local sandbox; or, with --agent-mode kubernetes, manifests/
                applied to the sandbox's cluster by server-side apply with
                the install key as a Secret, the trust file, the registry
                and its password (a Secret)
  endpoint      (aws only) the sandbox applied again with the cluster's
                public endpoint closed

Each phase first looks at what exists: after a failure or a kill, run the
same command again and it continues, with nothing made twice. Nothing in
DIR is committed; the private key never leaves it. The agent converges the
install once its desired state is rendered (nuon render, or the tenant
server after the branch is merged).

--phase NAME runs only the phases named (repeatable), reading what the
others made from DIR: --phase agent bootstraps the agent again, and needs
neither --channel nor --render-key.

What create needs from this machine comes as flags, each with an
environment variable, defaulting to where 'make' caches the tools:
--kube-assets ($NUON_KUBE_ASSETS; make kube-binaries), --tf-cli-config
($NUON_TF_CLI_CONFIG; make tf-providers), handed on to the agent for its
terraform jobs, and --secrets-file ($NUON_SECRETS_FILE), handed on to the
agent, which resolves ${secrets.NAME} from it.

Stopping, restarting and re-pointing a local agent (--agent-mode process):
the agent runs in its own session, its pid in DIR/agent.pid and its log in
DIR/agent.log.

  stop       kill -TERM -- -$(cat DIR/agent.pid)
             the agent and its jobs stop cleanly (a running job finishes
             writing its state); the install keeps what it applied
  restart    nuon install create ID --repo REPO --dir DIR --phase agent
             starts the agent again with what DIR holds and this command
             line's --agent-flag values (give them again); an agent that
             runs already is left alone ("unchanged")
  re-point   stop it, then run --phase agent with the new --repo (and new
             --agent-flag values, e.g. --agent-flag=--server-auth for a
             tenant server): the agent keeps its workdir, key and journal
  status     nuon status --repo REPO --install ID

In a cluster (--agent-mode kubernetes), --phase agent applies the
Deployment again; kubectl -n nuon-system scale deployment/nuon-agent
--replicas=0 stops it.

--cloud aws: the sandbox phase assumes the install's provision role
(nuon-ID-provision in --account, with --external-id, a deadline on every
AWS call) and applies sandboxes/aws-eks with its credentials, in the
environment only, its state in the stack's --state-bucket. The cluster's
API endpoint is private; --bootstrap-cidr (this host's egress CIDRs) opens
its public endpoint to those addresses only, until the endpoint phase
closes it. Without it, run create from inside the VPC. The agent phase, as
the provision role, gives that role a temporary EKS access entry
(AmazonEKSClusterAdminPolicy), applies manifests/ with EKS tokens, and
deletes the entry again, also when the apply fails; a run killed in
between leaves it, and the next run reuses and deletes it. Nothing
outside the install can reach the cluster afterwards. If the agent phase
fails, the endpoint stays open to --bootstrap-cidr (with no access entry)
until create runs again; --phase endpoint closes it alone.`,
		Example: `  # a local install for development, committed on main, rendered at once
  nuon install create acme --cloud local --repo tenant.git --dir ~/.nuon/acme \
      --channel stable --render-key keys/render.pub --commit \
      --input cidr=10.10.0.0/16 --input domain=acme.localhost \
      --agent-flag=--vendor-key=keys/cosign.pub
  nuon render --repo tenant.git --key keys/render

  # the same for a script: one JSON object per phase
  nuon install create acme ... -o json

  # in a customer's AWS account, from a host whose egress address is 203.0.113.7
  nuon install stack acme --tenant-account 111111111111 -o acme-stack.json  # the customer applies it
  nuon install create acme --cloud aws --repo tenant.git --dir ~/.nuon/acme \
      --channel stable --render-key keys/render.pub \
      --account 222222222222 --external-id nuon-… --state-bucket nuon-acme-state-… \
      --region eu-west-1 --availability-zones eu-west-1a,eu-west-1b \
      --domain acme.example.com --bootstrap-cidr 203.0.113.7/32

  # stop acme's agent, then start it again against a tenant server
  kill -TERM -- -$(cat ~/.nuon/acme/agent.pid)
  nuon install create acme --repo https://nuon.example.com/tenant.git --dir ~/.nuon/acme \
      --phase agent --agent-flag=--server-auth --agent-flag=--vendor-key=keys/cosign.pub

  # outside make: the tools from the cache, the secrets from a file
  nuon install create acme --repo tenant.git --dir ~/.nuon/acme --channel stable \
      --render-key keys/render.pub --commit \
      --kube-assets ~/.cache/nuon/kube/v1.37.1 \
      --tf-cli-config ~/.cache/nuon/terraform-providers/local-2.9.0-random-3.9.0/terraformrc \
      --secrets-file ~/.nuon/acme.secrets`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.prepare(cmd.Context(), g, args[0]); err != nil {
				return err
			}
			return lifecycle.Create(cmd.Context(), o.Options)
		},
	}
	o.common(cmd)
	f := cmd.Flags()
	f.StringVar(&o.Channel, "channel", "", "the install's channel (required by the install-file phase)")
	f.StringToStringVar(&o.Inputs, "input", nil, "an install input, NAME=VALUE (repeatable)")
	f.StringVar(&o.TrustRoot, "trust-root", os.Getenv(cli.EnvTrustRoot), "the trust root's version 1 (trust/root/1.json on main), handed to the agent once; it follows the chain from there (default $"+cli.EnvTrustRoot+")")
	f.StringVar(&o.RenderKey, "render-key", "", "the render public key the agent trusts, without a trust root (deprecated; the keys phase needs it or --trust-root)")
	f.BoolVar(&o.Commit, "commit", false, "commit installs/ID.yaml on main instead of the branch nuon/install/ID")
	f.StringVar(&o.author, "author", "", "commit author, \"Name <email>\" (default: GIT_AUTHOR_NAME and GIT_AUTHOR_EMAIL)")
	f.StringVar(&o.KubeAssets, "kube-assets", toolcache.Default(toolcache.EnvKubeAssets, toolcache.KubeAssets()), "folder with etcd, kube-apiserver and kube-controller-manager for the local sandbox: $"+toolcache.EnvKubeAssets+", else "+toolcache.KubeAssets()+" when 'make kube-binaries' built them there")
	f.StringVar(&o.SecretsFile, "secrets-file", os.Getenv(cli.EnvSecretsFile), "the agent's --secrets-file: "+cli.SecretsFileHelp)
	f.StringVar(&o.Agent, "agent-binary", "", "nuon-agent (default: beside this binary, else on PATH)")
	f.StringVar(&o.AgentMode, "agent-mode", lifecycle.AgentProcess, "process: nuon-agent beside the sandbox (no kubelet runs it there); kubernetes: manifests/ applied to the sandbox's cluster by server-side apply, with the install key as a Secret, the trust file, the registry and its credentials")
	f.StringVar(&o.GitTokenFile, "agent-git-token-file", "", "file holding the token the agent reads the tenant repository with over HTTPS (a git host other than nuon server); it goes to the cluster in the Secret nuon-git, never in argv")
	f.StringArrayVar(&o.AgentFlags, "agent-flag", nil, "a flag added to the agent's command line, e.g. --agent-flag=--interval=5s (repeatable)")
	o.awsFlags(cmd)
	f.StringVar(&o.AWS.EKSEndpoint, "eks-endpoint", "", "aws: EKS endpoint (default: the SDK's)")
	f.StringSliceVar(&o.AWS.BootstrapCIDRs, "bootstrap-cidr", nil, "aws: this host's egress CIDR the cluster's public endpoint opens to during the agent bootstrap (repeatable; default none: private only, run from inside the VPC)")
	f.StringArrayVar(&o.Only, "phase", nil, "run only this phase (repeatable): keys, sandbox, install-file, agent, endpoint")
	return cmd
}

// awsFlags are the flags of --cloud aws that create and delete share: the
// customer's stack and the sandbox's inputs.
func (o *installOptions) awsFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.AWS.Account, "account", "", "aws: the customer's account, where the stack made the install's roles")
	f.StringVar(&o.AWS.ExternalID, "external-id", "", "aws: the install's ExternalId (from nuon install stack)")
	f.StringVar(&o.AWS.Region, "region", "", "aws: the sandbox's region")
	f.StringSliceVar(&o.AWS.AvailabilityZones, "availability-zones", nil, "aws: 2 or 3 zones, comma-separated")
	f.StringVar(&o.AWS.Domain, "domain", "", "aws: the install's public domain")
	f.StringVar(&o.AWS.StateBucket, "state-bucket", "", "aws: the stack's state bucket (the sandbox's state goes there)")
	f.StringVar(&o.AWS.STSEndpoint, "sts-endpoint", "", "aws: STS endpoint (default: the SDK's, e.g. a VPC endpoint); EKS tokens are presigned for it")
	f.DurationVar(&o.AWS.Timeout, "aws-timeout", 30*time.Second, "aws: deadline of each AWS API call, retries included")
}

// tenantAWS loads the tenant's own AWS configuration, from the SDK's
// default chain, for --cloud aws: it only assumes the install's roles.
func (o *installOptions) tenantAWS(ctx context.Context) error {
	if o.Cloud != lifecycle.CloudAWS {
		return nil
	}
	var err error
	if o.AWS.Tenant, err = config.LoadDefaultConfig(ctx, config.WithRegion(o.AWS.Region)); err != nil {
		return fmt.Errorf("aws configuration: %w", err)
	}
	return nil
}

// installAuthor parses --author as release does.
func installAuthor(author string) (string, string, error) {
	if author == "" && os.Getenv("GIT_AUTHOR_NAME") == "" {
		return "nuon install", "install@nuon.invalid", nil
	}
	return releaseAuthor(author)
}

func newInstallDeleteCmd(g *cli.Globals) *cobra.Command {
	o := &installOptions{}
	var renderKey string
	cmd := &cobra.Command{
		Use:   "delete ID --repo REPO --dir DIR",
		Short: "Delete install ID: its components, agent and sandbox; keep its history",
		Long: `Delete install ID, phase by phase, printing each phase as it ends:

  mark-deleted  installs/ID.yaml gets deleted: true on main: the install
                renders with no component (with --render KEY this command
                renders; otherwise the tenant server does on push)
  components    waits (--timeout) until the agent's signed status, on that
                desired state, lists no component: it deleted every one in
                reverse dependency order
  agent         stops the agent process
  sandbox       destroys the sandbox (terraform destroy); DIR keeps only
                the sandbox's state
  archive       removes installs/ID.yaml from main and moves the install's
                refs (nuon/installs/ID, nuon/status/ID) under
                refs/nuon/archive/ID/, in one atomic push on a remote
                repository: its history stays as the audit log

--cloud aws: the agent runs in the cluster and goes with it; instead of
the agent and sandbox phases, with only the install's deprovision role
(nuon-ID-deprovision in --account, with --external-id, a deadline on
every AWS call, --aws-timeout):

  deprovision-role  assumes the deprovision role, which may only describe
                    and delete
  load-balancers    waits (--load-balancer-wait) until no load balancer
                    that Kubernetes controllers made is left (ELBv2 and
                    classic ELB: tagged for the cluster or in the sandbox's
                    VPC), else fails naming each; it never deletes them:
                    delete the Service or Ingress that made them
  registry          deletes the ECR repositories the agent made under
                    nuon/ID/, images and all
  sandbox           terraform destroy of sandboxes/aws-eks, state in
                    --state-bucket (same --region, --availability-zones
                    and --domain as create)

Re-run it after a failure or a kill: each phase checks first.`,
		Example: `  nuon install delete acme --repo tenant.git --dir ~/.nuon/acme --render keys/render
  git -C tenant.git log refs/nuon/archive/acme/status

  # on AWS, with the tenant's credentials from the SDK's default chain
  nuon install delete acme --cloud aws --repo https://git.example.com/tenant.git \
      --dir ~/.nuon/acme --account 222222222222 --external-id nuon-… \
      --region eu-west-1 --availability-zones eu-west-1a,eu-west-1b \
      --domain acme.example.com --state-bucket nuon-acme-state-… -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.prepare(cmd.Context(), g, args[0]); err != nil {
				return err
			}
			var render func(context.Context) error
			if renderKey != "" {
				quiet := *g
				quiet.Stdout = io.Discard
				render = func(ctx context.Context) error {
					return runRender(ctx, &quiet, &renderOptions{repo: o.Repo, key: renderKey, source: "refs/heads/main",
						output: "text", retries: 3, maxFileSize: schemas.DefaultMaxFileSize, now: time.Now})
				}
			}
			return lifecycle.Delete(cmd.Context(), o.Options, render)
		},
	}
	o.common(cmd)
	f := cmd.Flags()
	f.StringVar(&renderKey, "render", "", "render with this private key after marking the install deleted (when no tenant server renders on push)")
	f.DurationVar(&o.DeleteTimeout, "timeout", 10*time.Minute, "how long to wait for the agent to delete every component")
	f.StringVar(&o.author, "author", "", "commit author, \"Name <email>\" (default: GIT_AUTHOR_NAME and GIT_AUTHOR_EMAIL)")
	o.awsFlags(cmd)
	f.StringVar(&o.AWS.ELBEndpoint, "elb-endpoint", "", "aws: Elastic Load Balancing endpoint, both APIs (default: the SDK's)")
	f.StringVar(&o.AWS.ECREndpoint, "ecr-endpoint", "", "aws: ECR endpoint (default: the SDK's)")
	f.DurationVar(&o.AWS.LoadBalancerWait, "load-balancer-wait", 10*time.Minute, "aws: how long to wait for controller-made load balancers to go")
	return cmd
}

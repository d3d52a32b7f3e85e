package lifecycle

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/toolcache"
	"nuon.dev/nuon/stack"
)

// Agent modes.
const (
	AgentProcess    = "process"
	AgentKubernetes = "kubernetes"
)

// Clouds.
const (
	CloudLocal = "local"
	CloudAWS   = "aws"
)

// Files and folders in the install's directory.
const (
	KeyFile   = "agent.key" // and agent.key.pub
	TrustFile = "trust"
	// TrustRootFile is the version of the trust root the install was
	// given at creation: the agent's --trust-root.
	TrustRootFile = "trust-root.json"
	SandboxDir    = "sandbox"        // its state (terraform.tfstate) and outputs; the agent's --sandbox-dir
	ModuleDir     = "sandbox/module" // the local sandbox's module and its .terraform, as the agent's terraform jobs lay it out
	OutputsFile   = "sandbox/outputs.json"
	RuntimeDir    = "sandbox/run" // the local sandbox's processes
	AgentDir      = "agent"       // the agent's workdir
	AgentPIDFile  = "agent.pid"
	AgentLogFile  = "agent.log"
)

// Event is the end of one phase.
type Event struct {
	Install string `json:"install"`
	Phase   string `json:"phase"`
	// Result is "done" when the phase changed something, "unchanged" when
	// everything it makes was there already.
	Result  string  `json:"result"`
	Detail  string  `json:"detail,omitempty"`
	Seconds float64 `json:"seconds"`
}

// Results of a phase.
const (
	Done      = "done"
	Unchanged = "unchanged"
)

// Options are what Create and Delete need. Zero values take the
// documented defaults.
type Options struct {
	// ID is the install's id (3-32 of [a-z0-9-]); required.
	ID string
	// Repo is the tenant repository: a path or a URL; required.
	Repo string
	// Dir is the install's directory, where its keys, the sandbox's state
	// and the agent's pid file and log live; required. Nothing in it is
	// committed.
	Dir string
	// Cloud is CloudLocal (default) or CloudAWS.
	Cloud string
	// Channel is the install's channel; required by Create's
	// install-file phase.
	Channel string
	// Inputs are the install's inputs (installs/<id>.yaml inputs).
	Inputs map[string]string
	// RenderKey is the render public key file the agent trusts; required
	// by Create's keys phase.
	RenderKey string
	// TrustRoot is the trust root's version 1 file (trust/root/1.json on
	// main): the keys phase copies it into the install's directory
	// (TrustRootFile), checked to be signed by a threshold of its own
	// root keys, and the agent follows the chain from it; RenderKey is
	// then not needed. Default: none, the agent trusts RenderKey alone
	// (deprecated).
	TrustRoot string
	// Commit writes installs/<id>.yaml on main instead of the branch
	// nuon/install/<id>.
	Commit bool
	// AuthorName and AuthorEmail sign the install file's commit; default
	// "nuon install" <install@nuon.invalid>.
	AuthorName, AuthorEmail string
	// Terraform is the terraform binary; default "terraform" on PATH.
	Terraform string
	// TFCLIConfig is terraform's CLI configuration (the offline provider
	// mirror); default: terraform's own.
	TFCLIConfig string
	// KubeAssets holds etcd, kube-apiserver and kube-controller-manager
	// for the local sandbox; required for CloudLocal's sandbox phase and
	// its agent process (which hands it to its sandbox jobs).
	KubeAssets string
	// Agent is the nuon-agent binary; default nuon-agent beside this
	// executable, else on PATH.
	Agent string
	// GitTokenFile, when set, holds the token the agent reads the tenant
	// repository with over HTTPS (a git host that is not nuon server,
	// which authenticates the install by its key). The bootstrap in a
	// cluster puts it in the Secret nuon-git (NUON_GIT_TOKEN); never in
	// argv or a ConfigMap. Default: none.
	GitTokenFile string
	// SecretsFile, when set, is the file of the install's secrets
	// (NAME=VALUE lines) the agent process reads with --secrets-file;
	// its jobs resolve ${secrets.NAME} from it. Default: none (the
	// agent's environment, NUON_SECRET_NAME).
	SecretsFile string
	// AgentFlags are added to the agent's command line (for example
	// --vendor-key FILE, --interval 5s).
	AgentFlags []string
	// AgentMode is how the agent runs: AgentProcess (default), a process
	// beside the sandbox (the local sandbox has no kubelet), or
	// AgentKubernetes, manifests/ applied to the sandbox's cluster by
	// server-side apply with the install's key, trust file and registry.
	AgentMode string
	// Only, when set, runs just the phases it names, in their usual order
	// (for example "agent", to bootstrap the agent again); a phase reads
	// what earlier ones made from the install's directory. Default: every
	// phase.
	Only []string
	// Progress receives an Event as each phase ends; default none.
	Progress func(Event)
	// OpenRepo opens the tenant repository (with the operator's git
	// credentials); default gitrepo.Open without any.
	OpenRepo func(location string) (*gitrepo.Repo, error)
	// Logger; default none.
	Logger *slog.Logger
	// DeleteTimeout bounds how long Delete waits for the agent to report
	// every component deleted; default 10 minutes.
	DeleteTimeout time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// AWS is what CloudAWS needs.
	AWS AWSOptions
}

// AWSOptions are the customer's account as its stack (nuon install stack)
// set it up, and the tenant's own AWS configuration.
type AWSOptions struct {
	// Account is the customer's 12-digit account; the provision and
	// deprovision roles are nuon-<id>-provision and -deprovision in it.
	Account string
	// ExternalID is the install's ExternalId from the stack.
	ExternalID string
	// Region, AvailabilityZones and Domain are the sandbox's inputs.
	Region            string
	AvailabilityZones []string
	Domain            string
	// StateBucket is the stack's state bucket; the sandbox's state is
	// s3://StateBucket/sandbox/terraform.tfstate, locked with use_lockfile.
	StateBucket string
	// Tenant is the tenant's SDK configuration (its own credentials),
	// which assumes the roles.
	Tenant aws.Config
	// STSEndpoint overrides STS's endpoint (a VPC endpoint, or a test's
	// stand-in); default the SDK's resolution. EKS tokens are presigned
	// for it too.
	STSEndpoint string
	// EKSEndpoint overrides EKS's endpoint; default the SDK's resolution.
	EKSEndpoint string
	// ELBEndpoint and ECREndpoint override Elastic Load Balancing's (both
	// of its APIs) and ECR's endpoints, which Delete calls with the
	// deprovision role; default the SDK's resolution (which reads
	// AWS_ENDPOINT_URL_ELASTIC_LOAD_BALANCING(_V2) and AWS_ENDPOINT_URL_ECR
	// when Tenant came from config.LoadDefaultConfig).
	ELBEndpoint, ECREndpoint string
	// Timeout bounds each AWS API call (STS, EKS, ELB, ECR), retries
	// included; default stack.DefaultTimeout.
	Timeout time.Duration
	// LoadBalancerWait is how long Delete waits for the load balancers
	// that Kubernetes controllers made in the sandbox to go before it
	// fails naming them; default 10 minutes.
	LoadBalancerWait time.Duration
	// BootstrapCIDRs are the tenant's egress CIDRs: the sandbox opens the
	// cluster's public endpoint to them only from the sandbox phase until
	// the agent is bootstrapped (endpoint phase). Default none: the
	// endpoint stays private and create must run from inside the VPC
	// (a peered VPC, a VPN).
	BootstrapCIDRs []string
	// AccessWait bounds how long the agent bootstrap waits for its access
	// entry to take effect; default DefaultAccessWait.
	AccessWait time.Duration
	// KubeTimeout bounds each request to the cluster; default
	// DefaultKubeTimeout.
	KubeTimeout time.Duration
}

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,30}[a-z0-9]$`)

func (o *Options) defaults(create bool) error {
	if !idPattern.MatchString(o.ID) {
		return fmt.Errorf("install id %q: must be 3-32 of [a-z0-9-], starting and ending with a letter or digit", o.ID)
	}
	if o.Repo == "" || o.Dir == "" {
		return fmt.Errorf("install %s: repository and directory are required", o.ID)
	}
	var err error
	if o.Dir, err = filepath.Abs(o.Dir); err != nil {
		return err
	}
	// The agent process runs in another folder: hand it absolute paths.
	for _, p := range []*string{&o.TFCLIConfig, &o.SecretsFile} {
		if *p != "" {
			if *p, err = filepath.Abs(*p); err != nil {
				return err
			}
		}
	}
	if _, err := os.Stat(o.Repo); err == nil {
		if o.Repo, err = filepath.Abs(o.Repo); err != nil {
			return err
		}
	}
	if o.Cloud == "" {
		o.Cloud = CloudLocal
	}
	switch o.Cloud {
	case CloudLocal:
		// The sandbox runs the kube binaries; the agent hands their
		// folder to its sandbox jobs.
		if create && o.KubeAssets == "" && (o.runs("sandbox") || o.runs("agent") && o.AgentMode != AgentKubernetes) {
			return fmt.Errorf("install %s: the local sandbox needs the kube assets: %w", o.ID, toolcache.CheckKubeAssets("", "--kube-assets"))
		}
	case CloudAWS:
		a := o.AWS
		if a.Account == "" || a.ExternalID == "" || a.Region == "" || a.StateBucket == "" {
			return fmt.Errorf("install %s: --cloud aws needs the account, ExternalId, region and state bucket of its stack", o.ID)
		}
		if len(a.AvailabilityZones) < 2 || a.Domain == "" {
			// Delete too: terraform destroy evaluates the sandbox with its
			// inputs.
			return fmt.Errorf("install %s: --cloud aws needs 2 or 3 availability zones and a domain (the sandbox's inputs)", o.ID)
		}
		if o.AWS.Timeout <= 0 {
			o.AWS.Timeout = stack.DefaultTimeout
		}
		if o.AWS.LoadBalancerWait <= 0 {
			o.AWS.LoadBalancerWait = 10 * time.Minute
		}
	default:
		return fmt.Errorf("install %s: unknown cloud %q (local or aws)", o.ID, o.Cloud)
	}
	// Only the phases that use them need the channel and the render key:
	// --phase agent restarts an agent without either.
	if create && o.Channel == "" && o.runs("install-file") {
		return fmt.Errorf("install %s: the install file needs its channel: set --channel", o.ID)
	}
	if create && o.RenderKey == "" && o.TrustRoot == "" && o.runs("keys") {
		return fmt.Errorf("install %s: the agent needs the trust root (--trust-root trust/root/1.json) or the render public key (--render-key, deprecated)", o.ID)
	}
	if err := toolcache.CheckTerraformConfig(o.TFCLIConfig, "--tf-cli-config"); err != nil {
		return fmt.Errorf("install %s: %w", o.ID, err)
	}
	if o.AuthorName == "" {
		o.AuthorName = "nuon install"
	}
	if o.AuthorEmail == "" {
		o.AuthorEmail = "install@nuon.invalid"
	}
	if o.Terraform == "" {
		o.Terraform = "terraform"
	}
	if o.Progress == nil {
		o.Progress = func(Event) {}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.DeleteTimeout <= 0 {
		o.DeleteTimeout = 10 * time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OpenRepo == nil {
		o.OpenRepo = func(location string) (*gitrepo.Repo, error) { return gitrepo.Open(location) }
	}
	return nil
}

// runs tells whether the phase called name runs: every phase does unless
// Only names some.
func (o *Options) runs(name string) bool { return len(o.Only) == 0 || slices.Contains(o.Only, name) }

func (o *Options) path(rel string) string { return filepath.Join(o.Dir, filepath.FromSlash(rel)) }

// phase is one step: it returns its result ("done" or "unchanged") and a
// detail for the event.
type phase struct {
	name string
	run  func(ctx context.Context, o *Options, st *state) (result, detail string, err error)
}

// state carries what phases learn for the later ones.
type state struct {
	publicKey string
	outputs   *Outputs
	// creds are the deprovision role's, which Delete on AWS assumes once.
	creds *stack.Credentials
}

func runPhases(ctx context.Context, o *Options, phases []phase) error {
	st := &state{}
	for _, name := range o.Only {
		if !slices.ContainsFunc(phases, func(p phase) bool { return p.name == name }) {
			var names []string
			for _, p := range phases {
				names = append(names, p.name)
			}
			return fmt.Errorf("install %s: no phase %q (phases: %s)", o.ID, name, strings.Join(names, ", "))
		}
	}
	for _, p := range phases {
		if len(o.Only) > 0 && !slices.Contains(o.Only, p.name) {
			continue
		}
		start := time.Now()
		o.Logger.InfoContext(ctx, "phase started", "install", o.ID, "phase", p.name)
		res, detail, err := p.run(ctx, o, st)
		if err != nil {
			return fmt.Errorf("install %s: %s: %w", o.ID, p.name, err)
		}
		o.Progress(Event{Install: o.ID, Phase: p.name, Result: res, Detail: detail, Seconds: time.Since(start).Seconds()})
	}
	return nil
}

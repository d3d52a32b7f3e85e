package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/spf13/cobra"

	"nuon.dev/nuon/agent"

	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/agent/metrics"
	"nuon.dev/nuon/internal/gitauth"
	"nuon.dev/nuon/internal/gitproto"
	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/internal/toolcache"
	"nuon.dev/nuon/policy"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/stack"
	"nuon.dev/nuon/trust"
)

type agentOptions struct {
	repo, install, trust, key, workdir, artifacts, output string
	requestTrust, tfCLIConfig, secretsFile                string
	trustRoot, approvalTrust                              string
	once, serverAuth                                      bool
	interval, maxBackoff, heartbeat, healthInterval       time.Duration
	concurrency, driftConcurrency                         int
	jobCommand                                            string
	metricsAddr                                           string
	sandboxDir, stsEndpoint                               string
	sandboxInputs                                         []string
	kube                                                  kubeJobOptions
	sync                                                  syncOptions
	customer                                              customerOptions
}

func NewAgentCmd(g *Globals) *cobra.Command {
	o := &agentOptions{}
	cmd := &cobra.Command{
		Use:   "agent --repo REPO --install ID --trust FILE --key KEYFILE --workdir DIR",
		Short: "Run an install's agent: pull its desired state, apply it, report status",
		Long: `The agent serves one install. Every --interval it polls the install's desired
ref (refs/heads/nuon/installs/<ID>) with one small request; when it moved, it
fetches that ref only, verifies the commit against the allowed_signers in
--trust (signature, install id, no rollback), plans the difference with what it
applied, runs each component's job as its own process ('nuon job run'),
dependencies first and independent components in parallel, and writes a signed
status commit (--key) to refs/heads/nuon/status/<ID>.

Between renders the agent checks each applied component for drift on the
component's own schedule (drift: {mode, schedule} in nuon.yaml), at most
--drift-concurrency at once: a read-only drift job whose findings, per
resource, go into the status; mode correct re-applies the applied spec. A
check that finds nothing new writes no commit. The agent announces --heartbeat
in its status, so 'nuon status' can tell a quiet install from one whose agent
is gone (Unreachable: not heard from for twice that); a heartbeat is never a
status commit. Through a tenant server (--server-auth) every signed poll is
the heartbeat and the server records it: an idle install writes nothing. On a
plain git host, when nothing changed for --heartbeat, one parentless signed
commit replaces the tip of refs/heads/nuon/liveness/<ID>, which keeps only that
commit. An install's own operations: settings can turn drift checks
off; the status then says so.

Operators' requests ('nuon logs', 'nuon debug') arrive with the desired state.
Each runs once: the agent checks the requester's signature against
--request-trust (as well as the renderer did), the install, the deadline, the
install's operations settings and the plugin's read-only allow-list, then
answers in the status tree (answers/<id>.txt), redacted, or refuses with the
reason.

A refused commit is recorded in the status and nothing is applied. While the
repository is unreachable the agent backs off and the install keeps running
what it last applied. Every job is journalled in --workdir before it starts: a
restarted agent waits for a job that outlived it, records its outcome and does
not run a finished job again. SIGTERM stops the running jobs cleanly, writes
the status and exits.

Artifacts fail closed. With --vendor-key (the vendor's cosign.pub), before a
component's job the agent copies its artifacts by digest from the vendor
registry into the install's registry, each with its signature, after verifying
that the vendor key signed it; an unsigned or wrongly signed artifact is
refused and no job starts. Without --vendor-key every component that has
artifacts fails with "no vendor artifact key" and nothing of it is synced or
applied, unless --insecure-skip-artifact-verification (development only) lets
jobs deploy unverified artifacts; every status the agent then writes says
artifacts: Unverified, and 'nuon status' shows it.

Jobs read their artifacts from the install registry only, or with --artifacts
from an OCI image layout on local disk (development and air-gapped tests; the
digests are checked as from a registry). Amazon ECR registries get their
credentials from GetAuthorizationToken and their repositories created as
needed; other registries use --registry-username or the docker config file.

The sandbox (when nuon.yaml declares one) is the install's first component:
every other component waits for it and may read its outputs
(${install.sandbox.outputs.registry.url}). Its state stays where 'nuon install
create' applied it (--sandbox-dir locally, the S3 object the install's
sandbox.state names on AWS), so the agent's first pass adopts it. Inputs that
belong to this machine rather than to git come as --sandbox-input
dir=/srv/acme/sandbox/run --sandbox-input kube_assets=/cache/kube. An
install whose file names a role (sandbox.role, the stack's maintenance role)
gets its sandbox upgrades applied with that role's credentials, assumed from
the agent's own AWS identity (the SDK's default chain: EKS Pod Identity) with
the install's ExternalId. The agent never destroys the sandbox.

With --server-auth the agent talks to a tenant server ('nuon server') rather
than a git host: every HTTP request it sends to --repo is signed with --key
as install --install (an SSH signature in the nuon-request namespace over
method, path, time and install id), which the server checks against the
install's agentKey on main. No token or password is needed.

What the agent needs from the machine it runs on comes as flags, each with an
environment variable, so that it runs the same under a supervisor, in a
container or by hand:

  --tf-cli-config ($NUON_TF_CLI_CONFIG)  terraform's CLI configuration, handed
                  to every terraform job (the offline provider mirror); default
                  the one 'make tf-providers' caches, when it exists
  --secrets-file ($NUON_SECRETS_FILE)    the install's secrets, NAME=VALUE a
                  line; jobs resolve ${secrets.NAME} from them (variables
                  NUON_SECRET_NAME in the agent's environment work too)
  --request-trust ($NUON_REQUEST_TRUST)  the operator keys trusted for logs and
                  debug requests; without it every request is refused
  --approval-trust ($NUON_APPROVAL_TRUST) the approvers' keys (trust/approvals
                  on main); without it a plan that needs approval waits

` + gitauth.Help,
		Example: `  nuon agent --repo https://git.example.com/vendor/tenant.git --install acme \
      --trust /etc/nuon/allowed_signers --key /etc/nuon/agent.key --workdir /var/lib/nuon

  # offline terraform providers and the install's secrets from files
  nuon agent --repo ./tenant.git --install acme --trust allowed_signers --key acme.key \
      --workdir ./work --tf-cli-config ~/.cache/nuon/terraform-providers/local-2.9.0-random-3.9.0/terraformrc \
      --secrets-file /etc/nuon/acme.secrets --request-trust /etc/nuon/request_signers

  # one pass, for scripts and tests
  nuon agent --repo ./tenant.git --install acme --trust allowed_signers \
      --key acme.key --workdir ./work --once --output json

  # through the tenant server, requests signed with the install's own key
  nuon agent --repo https://nuon.example.com/tenant.git --server-auth --install acme \
      --trust /etc/nuon/allowed_signers --key /etc/nuon/agent.key --workdir /var/lib/nuon

  # verify and copy artifacts into the install's ECR before each job
  nuon agent --repo https://git.example.com/vendor/tenant.git --install acme \
      --trust /etc/nuon/allowed_signers --key /etc/nuon/agent.key --workdir /var/lib/nuon \
      --vendor-key /etc/nuon/cosign.pub

  # over SSH: a deploy key, and the server's host key in known_hosts
  nuon agent --repo git@git.example.com:vendor/tenant.git --install acme \
      --ssh-key /etc/nuon/git_key --known-hosts /etc/nuon/known_hosts \
      --trust /etc/nuon/allowed_signers --key /etc/nuon/agent.key --workdir /var/lib/nuon

  # over HTTPS with a token read from a file (or from $NUON_GIT_TOKEN)
  nuon agent --repo https://git.example.com/vendor/tenant.git --install acme \
      --git-token-file /run/secrets/git-token \
      --trust /etc/nuon/allowed_signers --key /etc/nuon/agent.key --workdir /var/lib/nuon

  # development: artifacts from a local OCI image layout, unverified
  crane pull --format=oci registry.example.com/acme/network@sha256:… ./artifacts
  nuon agent --repo ./tenant.git --install acme --trust allowed_signers --key acme.key \
      --workdir ./work --once --artifacts ./artifacts --insecure-skip-artifact-verification`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := CheckOutput(o.output); err != nil {
				return err
			}
			return runAgent(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.repo, "repo", "", "tenant repository: a path or a URL (required)")
	f.StringVar(&o.install, "install", "", "install id this agent serves (required)")
	f.StringVar(&o.trust, "trust", "", "allowed_signers file of trusted render keys (deprecated: give --trust-root instead; one of them is required)")
	f.StringVar(&o.trustRoot, "trust-root", os.Getenv(EnvTrustRoot), TrustRootHelp)
	f.StringVar(&o.approvalTrust, "approval-trust", os.Getenv(EnvApprovalTrust), "the approvers' keys (a file shaped like trust/approvals on main) trusted to approve saved plans of components with approval settings; without it such plans wait for ever, the status saying why (default $"+EnvApprovalTrust+")")
	f.StringVar(&o.requestTrust, "request-trust", os.Getenv(EnvRequestTrust), "allowed_signers file of operator keys trusted for requests (nuon logs, nuon debug), like trust/requests on main; without it every request is refused (default $"+EnvRequestTrust+")")
	f.StringVar(&o.tfCLIConfig, "tf-cli-config", TerraformConfigDefault(), TerraformConfigHelp)
	f.StringVar(&o.secretsFile, "secrets-file", os.Getenv(EnvSecretsFile), SecretsFileHelp)
	f.StringVar(&o.key, "key", "", "this install's OpenSSH ed25519 private key, signs status (required)")
	f.StringVar(&o.workdir, "workdir", "", "directory for the agent's repository, journal and component state (required)")
	f.StringVar(&o.artifacts, "artifacts", "", ArtifactsHelp)
	f.BoolVar(&o.once, "once", false, "reconcile once and exit")
	f.BoolVar(&o.serverAuth, "server-auth", false, "sign every request to an http(s) --repo with --key, for a tenant server (nuon server)")
	f.DurationVar(&o.interval, "interval", 30*time.Second, "time between polls (jittered by ±10%)")
	f.DurationVar(&o.maxBackoff, "max-backoff", 5*time.Minute, "longest wait after repeated failures")
	f.IntVar(&o.concurrency, "concurrency", 4, "most jobs running at once")
	f.IntVar(&o.driftConcurrency, "drift-concurrency", 2, "most drift checks running at once")
	f.DurationVar(&o.healthInterval, "health-interval", 0, "how often each applied component's health is checked again (kstatus of its Kubernetes objects, terraform.health), so Ready means checked recently; a check that cannot reach them or finds them gone turns the component Failed until it is re-applied; 0: the --heartbeat interval; negative: off")
	f.DurationVar(&o.heartbeat, "heartbeat", 10*time.Minute, "longest time without being heard from, announced in the status (through a tenant server every poll counts; on a git host a beat replaces the liveness ref's tip); 0 sends no heartbeat")
	f.StringVar(&o.jobCommand, "job-command", "", "the nuon binary that runs jobs (default: this binary when it is nuon, else nuon beside it, else nuon on PATH)")
	f.StringVarP(&o.output, "output", "o", "text", "with --once: print the result as text or json")
	f.StringVar(&o.sandboxDir, "sandbox-dir", "", "the sandbox's state directory, as nuon install create left it (terraform.tfstate, outputs.json); default WORKDIR/components/sandbox")
	f.StringArrayVar(&o.sandboxInputs, "sandbox-input", nil, "NAME=VALUE: an input of the sandbox's module that belongs to this machine (the local sandbox's dir and kube_assets), added to every sandbox job and never written to git; repeatable")
	f.StringVar(&o.stsEndpoint, "sts-endpoint", "", "STS endpoint for assuming the sandbox's maintenance role (a VPC endpoint); default the SDK's")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics, /healthz and /readyz on this address, e.g. 127.0.0.1:9464 (empty: off)")
	o.kube.flags(f)
	o.sync.flags(f)
	o.customer.flags(f)
	for _, n := range []string{"repo", "install", "key", "workdir"} {
		_ = cmd.MarkFlagRequired(n)
	}
	return cmd
}

func runAgent(ctx context.Context, g *Globals, o *agentOptions) error {
	log := g.Logger()
	// Before the redactor reads the environment: the secrets are in it.
	if err := loadSecrets(o.secretsFile); err != nil {
		return err
	}
	if err := toolcache.CheckTerraformConfig(o.tfCLIConfig, "--tf-cli-config"); err != nil {
		return err
	}
	// The agent redacts its own log; the runner's and the syncer's go
	// through the same redactor here. The agent names unusable secrets.
	red, _ := redact.FromEnviron(os.Environ())
	partsLog := slog.New(red.Handler(log.Handler()))
	renderTrust, root, err := loadRenderTrust(o.trust, o.trustRoot)
	if err != nil {
		return err
	}
	var requestTrust *signature.AllowedSigners
	if o.requestTrust != "" {
		if requestTrust, err = signature.LoadAllowedSigners(o.requestTrust); err != nil {
			return fmt.Errorf("--request-trust: %w", err)
		}
	} else if !o.once {
		log.Warn("no operator keys are trusted for requests: every logs and debug request will be refused; start the agent with --request-trust FILE (or $"+EnvRequestTrust+"), an allowed_signers file like trust/requests on main", "install", o.install)
	}
	approvers, err := loadApprovers(o.approvalTrust, renderTrust, root, requestTrust)
	if err != nil {
		return err
	}
	key, err := signature.LoadSigner(o.key)
	if err != nil {
		return fmt.Errorf("--key: %w", err)
	}
	exe, err := jobBinary(o.jobCommand)
	if err != nil {
		return err
	}
	workdir, err := filepath.Abs(o.workdir)
	if err != nil {
		return err
	}
	artifacts := o.artifacts
	if artifacts != "" {
		if artifacts, err = filepath.Abs(artifacts); err != nil {
			return err
		}
	}
	sandboxDir := o.sandboxDir
	if sandboxDir != "" {
		if sandboxDir, err = filepath.Abs(sandboxDir); err != nil {
			return err
		}
	}
	sandboxInputs, err := parseInputs(o.sandboxInputs)
	if err != nil {
		return err
	}
	customerPolicy, err := o.customer.path()
	if err != nil {
		return err
	}
	met := metrics.New()
	// The syncer judges provenance by the root the agent holds, which
	// moves as the agent follows the chain.
	var running *agent.Agent
	syncer, err := o.sync.syncer(partsLog, met.Copied, func() *trust.Root {
		if running == nil {
			return root
		}
		return running.Root()
	})
	if err != nil {
		return err
	}
	gitAuth, err := g.GitAuth()
	if err != nil {
		return err
	}
	if err := gitAuth.Check(o.repo); err != nil {
		return err
	}
	remoteOpts := []agent.RemoteOption{agent.WithGitAuth(gitAuth), agent.WithRemoteLogger(log)}
	if o.serverAuth {
		// Every request to the tenant server carries the install's
		// signature; no token or password.
		remoteOpts = append(remoteOpts, agent.WithRequestSigner(&request.Signer{Install: o.install, Key: key}))
	}
	a, err := agent.New(agent.Config{
		Install:   o.install,
		Remote:    met.Remote(agent.NewRemote(o.repo, remoteOpts...)),
		Trust:     renderTrust,
		TrustRoot: root,
		Key:       key,
		Workdir:   workdir,
		Runner: met.Runner(o.kube.runner(&jobs.Local{
			Command: o.kube.jobArgs(o.sync.jobArgs(tfArgs([]string{exe, "job", "run", "--artifacts", artifacts, "--log-format", g.LogFormat}, o.tfCLIConfig))),
			Logger:  partsLog,
			// Longer than a plugin's own grace after its deadline
			// (terraform's is a minute), so a stopping job can finish
			// writing its state.
			KillGrace: 90 * time.Second,
		}, &o.sync, workdir, partsLog)),
		// A vendor's plugin (type plugin) runs from its signed artifact,
		// fetched by the job with the vendor key (--plugin-key).
		Plugins:          append(slices.Clone(JobPlugins), schemas.TypePlugin),
		SandboxDir:       sandboxDir,
		SandboxInputs:    sandboxInputs,
		AssumeRole:       assumeRole(o.install, o.stsEndpoint),
		RequestTrust:     requestTrust,
		Approvers:        approvers,
		Sync:             syncer,
		Concurrency:      o.concurrency,
		DriftConcurrency: o.driftConcurrency,
		Heartbeat:        heartbeatOrOff(o.heartbeat),
		HealthInterval:   o.healthInterval,
		HeartbeatTo:      heartbeatTo(o.serverAuth),
		Interval:         o.interval,
		MaxBackoff:       o.maxBackoff,
		Logger:           log,
		// Without --vendor-key the agent refuses every artifact, unless
		// told otherwise.
		InsecureSkipArtifactVerification: o.sync.insecure,
		Observe:                          met.Observe,
		CustomerPolicy:                   customerPolicy,
	})
	if err != nil {
		return err
	}
	running = a
	if o.kube.err != nil {
		return o.kube.err
	}
	if !o.once {
		if o.metricsAddr != "" {
			stop, err := serveMetrics(ctx, o.metricsAddr, met.Handler(), log)
			if err != nil {
				return err
			}
			defer stop()
		}
		log.Info("agent started", "install", o.install, "repo", gitproto.Redact(o.repo), "git_auth", gitAuth, "interval", o.interval)
		return a.Run(ctx)
	}
	rep, err := a.Reconcile(ctx)
	if err != nil {
		return err
	}
	if o.output == "json" {
		enc := json.NewEncoder(g.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	st := rep.Status
	state := st.Phase
	if st.Stale {
		state += ", stale since " + st.Expires.Format(time.RFC3339)
	}
	fmt.Fprintf(g.Stdout, "%s: %s, generation %d, desired %s, %d job(s), %s\n", o.install, state, st.Generation, shortID(st.Desired), len(rep.Jobs), rep.Outcome)
	if st.Forged != nil {
		fmt.Fprintf(g.Stdout, "%s: replaced forged status commit %s: %s\n", o.install, shortID(st.Forged.Commit), st.Forged.Reason)
	}
	return nil
}

// jobBinary finds the nuon binary that runs jobs ("nuon job run"): the
// agent binary itself when it is the whole CLI, else nuon beside it or on
// PATH.
func jobBinary(flag string) (string, error) {
	if flag != "" {
		return exec.LookPath(flag)
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	if filepath.Base(self) == "nuon" {
		return self, nil
	}
	beside := filepath.Join(filepath.Dir(self), "nuon")
	if _, err := os.Stat(beside); err == nil {
		return beside, nil
	}
	if p, err := exec.LookPath("nuon"); err == nil {
		return p, nil
	}
	// Not here: fine for the Kubernetes runner, whose jobs run nuon from
	// the job image; the local runner reports it when a job starts.
	return "nuon", nil
}

// EnvApprovalTrust is the default of the agent's --approval-trust.
const EnvApprovalTrust = "NUON_APPROVAL_TRUST"

// loadApprovers reads the approvers' keys of --approval-trust and keeps
// the render and request keys out of them: an approval signed by a key
// that may render or file requests is refused, whatever file lists it.
func loadApprovers(file string, render *signature.AllowedSigners, root *trust.Root, requests *signature.AllowedSigners) (*policy.Approvers, error) {
	if file == "" {
		return nil, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--approval-trust: %w", err)
	}
	as, err := policy.ParseApprovers(file, data)
	if err != nil {
		return nil, fmt.Errorf("--approval-trust: %w", err)
	}
	if render != nil {
		for _, s := range render.Signers {
			as.Exclude("render", s.Key)
		}
	}
	as.ExcludeRoot(root)
	if requests != nil {
		for _, s := range requests.Signers {
			as.Exclude("request", s.Key)
		}
	}
	return as, nil
}

// EnvRequestTrust is the default of the agent's --request-trust.
const EnvRequestTrust = "NUON_REQUEST_TRUST"

// TerraformConfigHelp describes --tf-cli-config of the agent and of nuon job
// run.
var TerraformConfigHelp = "terraform CLI configuration for the terraform jobs, e.g. the offline provider mirror's: $" + toolcache.EnvTFCLIConfig + ", else (without $TF_CLI_CONFIG_FILE) " + toolcache.TerraformConfig() + " when 'make tf-providers' wrote it"

// TerraformConfigDefault is the default of --tf-cli-config: $NUON_TF_CLI_CONFIG;
// else, unless $TF_CLI_CONFIG_FILE says which terraform reads, the
// mirror's configuration in the cache when make tf-providers built it.
func TerraformConfigDefault() string {
	if v := os.Getenv(toolcache.EnvTFCLIConfig); v != "" || os.Getenv("TF_CLI_CONFIG_FILE") != "" {
		return v
	}
	return toolcache.Default(toolcache.EnvTFCLIConfig, toolcache.TerraformConfig())
}

// tfArgs adds --tf-cli-config to a job's command line, as an absolute path.
func tfArgs(argv []string, file string) []string {
	if file == "" {
		return argv
	}
	if abs, err := filepath.Abs(file); err == nil {
		file = abs
	}
	return append(argv, "--tf-cli-config", file)
}

// heartbeatTo is where the agent's heartbeat goes: nowhere but its
// signed polls through a tenant server, which records each; on a plain
// git host, the tip of its liveness ref.
func heartbeatTo(serverAuth bool) string {
	if serverAuth {
		return agent.HeartbeatPolls
	}
	return agent.HeartbeatRef
}

// heartbeatOrOff maps the flag's 0 (no heartbeat) to the agent's negative.
func heartbeatOrOff(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// serveMetrics serves h on addr until stop is called.
func serveMetrics(ctx context.Context, addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener", "error", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return func() { _ = hs.Close() }, nil
}

// assumeRole assumes a sandbox's role from the agent's own AWS identity:
// the SDK's default chain (EKS Pod Identity in the install's cluster).
func assumeRole(install, endpoint string) func(ctx context.Context, role schemas.SandboxRole) ([]string, error) {
	opts := []stack.AssumeOption{stack.WithSessionName("nuon-agent-" + install)}
	if endpoint != "" {
		opts = append(opts, stack.WithEndpoint(endpoint))
	}
	return agent.AssumeRoleFrom(func(ctx context.Context) (aws.Config, error) { return awsconfig.LoadDefaultConfig(ctx) }, opts...)
}

// parseInputs reads --sandbox-input NAME=VALUE flags.
func parseInputs(flags []string) (map[string]string, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(flags))
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok || !inputName.MatchString(k) {
			return nil, fmt.Errorf("--sandbox-input %q: want NAME=VALUE, NAME an identifier", f)
		}
		out[k] = v
	}
	return out, nil
}

// inputName is a terraform variable's name.
var inputName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

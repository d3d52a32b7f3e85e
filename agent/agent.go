package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage"

	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/policy"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// Config configures an agent. Install, Remote, Trust, Key, Workdir and
// Runner are required.
type Config struct {
	// Install is the id of the install this agent serves.
	Install string
	// Remote is the tenant repository.
	Remote Remote
	// TrustRoot is the version of the trust root the install was given
	// at creation (version 1, from nuon install create): the agent follows
	// the chain from it, or from the newer version it kept in its workdir
	// (RootFile), and judges desired state by the render keys of the
	// version in force. Either TrustRoot or Trust is required.
	TrustRoot *trust.Root
	// Trust holds the keys allowed to sign desired state when TrustRoot
	// is nil: an allowed_signers file, which can neither rotate nor
	// revoke a key (deprecated).
	Trust *signature.AllowedSigners
	// RequestTrust holds the operator keys trusted for requests (logs,
	// debug commands). The agent verifies every request's own signature
	// against it, not only the renderer's; nil refuses every request.
	RequestTrust *signature.AllowedSigners
	// Key signs status commits.
	Key *signature.Signer
	// Workdir keeps the agent's local repository, journal, job
	// directories and component state across restarts.
	Workdir string
	// Runner runs plugin jobs.
	Runner jobs.Runner
	// Plugins are the component types the job runner can apply; others
	// are reported as unsupported.
	Plugins []string
	// Sync copies a component's artifacts into the install's registry
	// before its job runs, verifying each one's signature. Without it
	// nothing can be verified, so every component that has artifacts
	// fails with ErrNoArtifactKey and no job starts, unless
	// InsecureSkipArtifactVerification is set.
	Sync Syncer
	// InsecureSkipArtifactVerification lets an agent without Sync deploy
	// artifacts that nobody verified: jobs take them to be in the
	// install's registry (or their local source) already, and image
	// components are unsupported. For development only; every status the
	// agent writes then says so (schemas.ArtifactsUnverified).
	InsecureSkipArtifactVerification bool
	// SandboxDir is the sandbox's state directory: where nuon install
	// create applied it (SandboxDir/terraform.tfstate) and recorded its
	// outputs (SandboxDir/outputs.json). The sandbox's jobs keep their
	// state there, so the agent's first apply adopts what create made,
	// and create's outputs.json stands for the sandbox's outputs until the
	// agent has recorded its own (to find the registry the sandbox's module
	// is copied into). Default WORKDIR/components/sandbox, like any
	// component.
	SandboxDir string
	// SandboxInputs are the sandbox module's inputs that belong to this
	// machine, not to the install's desired state: the local sandbox's
	// dir and kube_assets, which nuon install create passes to the agent
	// it starts (--sandbox-input) instead of writing them into git. They
	// are added to every sandbox job's inputs and win over the rendered
	// ones; they are not part of the spec, so changing them applies
	// nothing by itself. Default none.
	SandboxInputs map[string]string
	// AssumeRole returns the environment of a sandbox job whose install
	// names a role (schemas.SandboxRole, the stack's maintenance role):
	// the role's temporary AWS credentials, assumed from the agent's own
	// identity with stack.AssumeRole. They reach the job through
	// jobs.EnvRunner only, never its manifest. Nil fails such a job.
	AssumeRole func(ctx context.Context, role schemas.SandboxRole) ([]string, error)
	// Concurrency bounds the jobs running at once; default 4.
	Concurrency int
	// DriftConcurrency bounds the drift checks running at once in the
	// install, whatever their components' schedules; default 2.
	DriftConcurrency int
	// Heartbeat is the longest the agent goes without being heard from,
	// announced in its status (HeartbeatEvery) so the fleet can tell a
	// quiet install from a dead one (fleet.StateUnreachable). Where the
	// heartbeat goes is HeartbeatTo; it is never a status commit. Default
	// 10m; negative turns it off.
	Heartbeat time.Duration
	// HealthInterval is how often each applied component's health is
	// checked again (step_health.go), so that Ready means checked
	// recently; default Heartbeat (10m), negative turns it off.
	HealthInterval time.Duration
	// HeartbeatTo is HeartbeatRef (default: the install's liveness ref on
	// a plain git host, tip only) or HeartbeatPolls (a tenant server,
	// which records every signed poll: no commit at all).
	HeartbeatTo string
	// Interval between polls; default 30s. Each wait is jittered by ±10%.
	// Failed components are retried 4 intervals after a pass in which
	// they failed, doubling while they keep failing, up to MaxBackoff.
	Interval time.Duration
	// MaxBackoff caps the wait after failures; default 5m.
	MaxBackoff time.Duration
	// JobTimeout is the default timeout of a job whose component sets
	// none; default 30m.
	JobTimeout time.Duration
	// Environ is scanned for the install's secrets (redact.EnvPrefix),
	// which are redacted from everything the agent commits, logs and
	// reports; default os.Environ().
	Environ []string
	Logger  *slog.Logger
	// Now reads the clock; default time.Now.
	Now func() time.Time
	// Observe, when set, is called by Run after every pass with its
	// report and error (metrics, readiness); it must not block.
	Observe func(*Report, error)
	// CustomerPolicy is the path of the customer's policy file (package
	// policy; in Kubernetes a mounted ConfigMap), read again every pass:
	// outside its windows or under its hold nothing is applied and the
	// status says deferred. A file that is missing or does not parse
	// holds the install. Empty: no customer policy, changes apply as they
	// come.
	CustomerPolicy string
	// CustomerApprovals is the folder, inside the install, of the
	// customer's own signed approvals (NAME.approval.json), judged against
	// the approvers pinned in the customer's policy for the changes it
	// requires them for; empty: the customer policy file's folder (in
	// Kubernetes, keys of the same ConfigMap).
	CustomerApprovals string
	// Approvers are the keys trusted to approve saved plans (trust/approvals
	// on main, package policy), with the render and request keys excluded.
	// A component with approval settings whose plan needs approval waits
	// for Threshold of them; nil: such a plan waits for ever. When the
	// trust root the agent holds defines the approvers role, that role
	// is used instead (Agent.approvers): this is the form before the root.
	Approvers *policy.Approvers
}

// ErrNoArtifactKey fails a component whose artifacts the agent cannot
// verify because it has no vendor key (no Config.Sync): nothing of it is
// synced or applied.
var ErrNoArtifactKey = errors.New("no vendor artifact key to verify artifacts with: nothing synced or applied")

// refuseArtifacts is the Syncer of an agent without a vendor key: it
// refuses every artifact.
type refuseArtifacts struct{}

func (refuseArtifacts) Sync(_ context.Context, artifacts []schemas.Artifact) error {
	if len(artifacts) == 0 {
		return nil
	}
	names := make([]string, len(artifacts))
	for i, a := range artifacts {
		names[i] = a.Name + " " + a.Digest
	}
	return fmt.Errorf("%w (artifacts %s)", ErrNoArtifactKey, strings.Join(names, ", "))
}

// artifactPolicy is what the status says of artifact verification.
func (a *Agent) artifactPolicy() string {
	if a.cfg.Sync == nil {
		return schemas.ArtifactsUnverified
	}
	return schemas.ArtifactsVerified
}

// Syncer copies artifacts, by digest, from the vendor registry into the
// install's registry, verifying each one's signature first. It returns
// only when every artifact is present in the install's registry; an error
// leaves the component without a job.
type Syncer interface {
	Sync(ctx context.Context, artifacts []schemas.Artifact) error
}

// Agent is one install's agent.
type Agent struct {
	cfg   Config
	repo  *git.Repository
	store storage.Storer
	log   *slog.Logger
	red   *redact.Redactor

	// recovered is set once the journal left by a previous process has
	// been read (see recover).
	recovered bool
	// retry is when failed components are tried again without a new
	// desired commit, and how many passes in a row they failed.
	retry jobRetry
	// current is the newest verified desired state, for what runs between
	// renders (drift checks, the operations veto, requests).
	current *Desired
	// checked is when each component was last compared with its desired
	// state (an apply counts); see drift.
	checked map[string]time.Time
	// customer is what the agent keeps of the customer's policy between
	// passes (see customerGate).
	customer customerMemory
	// root is the version of the trust root the agent holds (see
	// Config.TrustRoot); nil when it judges by Config.Trust.
	root atomic.Pointer[trust.Root]
	// rootApprovers are the approvers of the root held (approvers).
	rootApprovers rootApprovers
	// lastBeat is when the last heartbeat was delivered (HeartbeatRef).
	lastBeat time.Time
}

// jobRetry is the schedule failing jobs retry on: 4 intervals after the
// first failing pass, doubling with each further one up to MaxBackoff, so a
// component that keeps failing does not run every poll.
type jobRetry struct {
	at       time.Time
	failures int
}

// New opens (or creates) the agent's workdir.
func New(cfg Config) (*Agent, error) {
	switch {
	case cfg.Install == "":
		return nil, errors.New("agent: no install id")
	case cfg.Remote == nil:
		return nil, errors.New("agent: no remote")
	case cfg.Trust == nil && cfg.TrustRoot == nil:
		return nil, errors.New("agent: no trust root and no trust file")
	case cfg.Key == nil:
		return nil, errors.New("agent: no signing key")
	case cfg.Workdir == "":
		return nil, errors.New("agent: no workdir")
	case cfg.Runner == nil:
		return nil, errors.New("agent: no job runner")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.DriftConcurrency <= 0 {
		cfg.DriftConcurrency = 2
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 10 * time.Minute
	}
	switch cfg.HeartbeatTo {
	case "":
		cfg.HeartbeatTo = HeartbeatRef
	case HeartbeatRef, HeartbeatPolls:
	default:
		return nil, fmt.Errorf("agent: heartbeat to %q: want %s or %s", cfg.HeartbeatTo, HeartbeatRef, HeartbeatPolls)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 30 * time.Second
	}
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = cfg.Heartbeat
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Minute
	}
	if cfg.JobTimeout <= 0 {
		cfg.JobTimeout = 30 * time.Minute
	}
	if cfg.Environ == nil {
		cfg.Environ = os.Environ()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sync == nil && !cfg.InsecureSkipArtifactVerification {
		cfg.Sync = refuseArtifacts{}
	}
	for _, d := range []string{"pending", "jobs", "components"} {
		if err := os.MkdirAll(filepath.Join(cfg.Workdir, d), 0o700); err != nil {
			return nil, fmt.Errorf("agent workdir: %w", err)
		}
	}
	repoDir := filepath.Join(cfg.Workdir, "repo.git")
	repo, err := git.PlainOpen(repoDir)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		repo, err = git.PlainInit(repoDir, true)
	}
	if err != nil {
		return nil, fmt.Errorf("agent workdir repository: %w", err)
	}
	red, err := redact.FromEnviron(cfg.Environ)
	log := slog.New(red.Handler(cfg.Logger.Handler())).With("install", cfg.Install)
	if err != nil {
		// Jobs refuse to resolve these (reconciler.ResolveSecrets).
		log.Warn("secrets that cannot be redacted safely are not used", "error", err)
	}
	a := &Agent{
		cfg:     cfg,
		repo:    repo,
		store:   repo.Storer,
		log:     log,
		red:     red,
		checked: map[string]time.Time{},
	}
	if cfg.TrustRoot != nil {
		held, err := openRoot(cfg.Workdir, cfg.TrustRoot)
		if err != nil {
			return nil, err
		}
		a.root.Store(held)
		log.Info("desired state is judged by the trust root", "version", held.Version, "expires", held.Expires.UTC().Format(time.RFC3339))
	} else {
		log.Warn("deprecated: desired state is judged by an allowed_signers file, which cannot rotate or revoke a key; give the agent the trust root's version 1 (--trust-root, trust/root/1.json on main)")
	}
	a.loadChecked()
	return a, nil
}

// Run polls and reconciles until ctx ends, branching on each pass's
// outcome: a pass that failed (the remote, the disk) backs off
// exponentially with jitter, and the install keeps running its last
// applied state meanwhile; any other outcome (idle, applied, refused,
// stale) waits one jittered interval. A refused or stale commit is not
// tried again until the ref moves, and failing jobs wait for their own
// retry schedule (see Config.Interval). Run returns nil when ctx is
// cancelled.
func (a *Agent) Run(ctx context.Context) error {
	failures := 0
	for {
		rep, err := a.Reconcile(ctx)
		if a.cfg.Observe != nil && ctx.Err() == nil {
			a.cfg.Observe(rep, err)
		}
		wait := a.cfg.Interval
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			failures++
			wait = a.backoff(failures)
			a.log.Warn("reconcile failed; keeping the last applied state", "error", err, "retry_in", wait.Round(time.Millisecond), "failures", failures)
		default:
			failures = 0
		}
		t := time.NewTimer(jitter(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// backoff is the wait after n consecutive failures: the interval doubled
// n times, capped.
func (a *Agent) backoff(n int) time.Duration {
	d := a.cfg.Interval
	for i := 0; i < n && d < a.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, a.cfg.MaxBackoff)
}

func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64()))
}

// Outcomes of a reconcile, as Report.Outcome.
const (
	// OutcomeIdle: the desired ref did not move and nothing was due.
	OutcomeIdle = "idle"
	// OutcomeApplied: the desired state was planned and its jobs ran (a
	// failing job is retried on its own schedule, see Config.Interval).
	OutcomeApplied = "applied"
	// OutcomeRefused: the desired commit was refused and recorded; it is
	// not tried again until the ref moves.
	OutcomeRefused = "refused"
	// OutcomeStale: the desired commit is past its signed expiry; the
	// applied state keeps running and nothing is applied until a fresh
	// commit arrives.
	OutcomeStale = "stale"
	// OutcomeFailed: a step could not finish (network, disk); Run backs
	// off and tries again.
	OutcomeFailed = "failed"
	// OutcomeDeferred: the customer's policy holds the change back (a
	// hold, no open maintenance window); nothing was applied and the
	// status says so (schemas.Deferred). Not a failure.
	OutcomeDeferred = "deferred"
)

// Report is the outcome of one reconcile; `nuon agent --once -o json`
// prints it.
type Report struct {
	// Outcome is one of the Outcome constants.
	Outcome string `json:"outcome"`
	// Idle is true when the desired ref did not move and nothing was due.
	Idle bool `json:"idle"`
	// Status is the status after the reconcile.
	Status schemas.Status `json:"status"`
	// StatusCommit is the local status commit; Pushed says whether the
	// remote has it.
	StatusCommit plumbing.Hash `json:"statusCommit"`
	Pushed       bool          `json:"pushed"`
	// Jobs run in this reconcile.
	Jobs []*schemas.Job `json:"jobs"`
	// Heartbeat is the liveness commit this reconcile pushed
	// (HeartbeatRef), if any; it is not a status commit.
	Heartbeat plumbing.Hash `json:"heartbeat,omitzero"`
}

package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/gitauth"
	"nuon.dev/nuon/internal/gitproto"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/schemas"
)

// Config of a Server. Dir is required; the rest have defaults.
type Config struct {
	// Dir is the tenant repository the server serves and renders into: a
	// bare repository on local disk (required).
	Dir string
	// RenderKey signs rendered commits; nil means the server does not
	// render (it serves and mirrors only).
	RenderKey *signature.Signer
	// Upstream is the tenant repository on the vendor's git host: main is
	// fetched from it, rendered and status refs are pushed to it. Empty
	// means none: main is what is pushed to Dir. An http(s) URL must not
	// carry user information: credentials come from UpstreamAuth.
	Upstream string
	// UpstreamAuth holds the credentials for Upstream (package gitauth:
	// a token, a user name and password, or an SSH key and known_hosts),
	// given to git through its environment, never its argv. Nil: none.
	UpstreamAuth *gitauth.Auth
	// PollInterval is how often main (and Upstream) is checked; default
	// 30s. A POST to /hooks/main checks at once.
	PollInterval time.Duration
	// MirrorDelay batches status refs for one push upstream; default 1s.
	MirrorDelay time.Duration
	// MaxSkew bounds a request signature's clock skew; default
	// request.DefaultMaxSkew.
	MaxSkew time.Duration
	// MaxGit bounds the fetches planned and packed (git pack-objects) at
	// once, and the git cat-file processes kept to read objects; more
	// requests wait their turn, so a fleet fetching at once queues
	// instead of thrashing the machine. Default 2 × GOMAXPROCS.
	MaxGit int
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger gets every refusal and every change; default discards.
	Logger *slog.Logger
	// ViewToken is the operators' token for the fleet view on /fleet
	// (sent as "Authorization: Bearer TOKEN" or entered once on
	// /fleet/login, which sets a session cookie). Empty: no fleet view.
	// An install's request signature never opens the view.
	ViewToken string
	// NoFleetMetrics keeps /metrics of a server without a ViewToken from
	// building the fleet index on its first scrape to report installs by
	// state and status ages (at 1,000,000 installs about 4 minutes of CPU
	// and 3.5 GB; 20 s from its saved index): it then reports only the
	// series that need no index. A server with a ViewToken builds the
	// index at start for its pages either way.
	NoFleetMetrics bool
	// ViewStaleAfter is the age past which the fleet view marks an
	// install's last status stale; default 10m.
	ViewStaleAfter time.Duration
	// Mode is ModeWriter (default) or ModeReplica: a read replica keeps
	// Dir a mirror of Writer's repository, refreshed every PollInterval
	// and after each forwarded push, answers polls and fetches from it,
	// and forwards status pushes to Writer after checking the install's
	// signature. A replica neither renders nor mirrors upstream.
	Mode string
	// Writer is the writer's base URL (replica only), e.g.
	// http://nuon-server-writer:8080.
	Writer string
	// ReplicaToken authenticates replicas to the writer's /replica/
	// endpoints (the whole repository, read-only). On a writer, empty
	// means no replicas; a replica needs it.
	ReplicaToken string

	// Limits bound what clients may hold of the server: timeouts, header
	// size, open connections, requests in flight per install (see
	// limits.go); zero fields take their defaults.
	Limits Limits
	// HookSecret is the git host's webhook secret: a POST to /hooks/main
	// must carry its HMAC (X-Hub-Signature-256) or the secret itself
	// (X-Gitlab-Token). Empty: the hook is refused, unless HookOpen.
	HookSecret string
	// HookOpen serves /hooks/main without a secret, as the server did
	// before it had one: anyone who reaches it can make the server check
	// main (bursts coalesce, HookInterval).
	HookOpen bool
	// MaintenanceInterval is how often the server maintains its
	// repository (maintenance.go: geometric repack, commit-graph,
	// pack-refs, at the lowest priority); default
	// DefaultMaintenanceInterval, negative: never.
	MaintenanceInterval time.Duration
	// HookInterval is the least time between two checks of main that
	// webhooks start: a burst of hooks makes one check at once and at
	// most one more when the interval is over. Default
	// DefaultHookInterval.
	HookInterval time.Duration
}

func (c *Config) defaults() error {
	if c.Dir == "" {
		return errors.New("server: no repository")
	}
	switch c.Mode {
	case "":
		c.Mode = ModeWriter
	case ModeWriter, ModeReplica:
	default:
		return fmt.Errorf("server: mode %q: want %s or %s", c.Mode, ModeWriter, ModeReplica)
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 30 * time.Second
	}
	if c.MirrorDelay <= 0 {
		c.MirrorDelay = time.Second
	}
	if c.MaxSkew <= 0 {
		c.MaxSkew = request.DefaultMaxSkew
	}
	if c.MaxGit <= 0 {
		c.MaxGit = 2 * runtime.GOMAXPROCS(0)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.ViewStaleAfter <= 0 {
		c.ViewStaleAfter = 10 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.HookInterval <= 0 {
		c.HookInterval = DefaultHookInterval
	}
	if c.MaintenanceInterval == 0 {
		c.MaintenanceInterval = DefaultMaintenanceInterval
	}
	c.Limits.defaults()
	return nil
}

// Server is the tenant server: an http.Handler that serves each install
// git smart HTTP scoped to that install, and (Run) the loop that follows
// main, renders and mirrors upstream.
type Server struct {
	cfg      Config
	log      *slog.Logger
	refs     *refTable
	keys     *keyTable
	verifier *request.Verifier
	objects  *objectPool // the repository's objects, read by fetches and pushes
	pushes   *pushStore  // writes checked pushes
	mux      *http.ServeMux

	gitSlots  chan struct{} // one per git process allowed at once
	pushSlots chan struct{} // one per push held in memory at once
	inflight  *inflight     // each install's requests in flight (Limits.InstallRequests)

	// upstreamEnv gives git the upstream's credentials (gitauth.Auth.Env).
	upstreamEnv []string

	pushMu sync.Map // install → *sync.Mutex: one push per install at a time

	wake   chan struct{} // a webhook asks the follower to look now
	mirror *mirror

	renderMu    sync.Mutex
	rendered    plumbing.Hash   // the main commit last rendered (or refused)
	renderCache *renderer.Cache // what the next render reads again

	metrics *metrics
	boot    string // names this start, in /replica/version
	// sideRefs counts the moves of refs outside the ref table that
	// replicas mirror (build queue, rollouts): in /replica/version.
	sideRefs atomic.Uint64

	// A replica's writer, its HTTP client and the writer version its
	// mirror was last refreshed to.
	writer *url.URL
	client *http.Client
	seen   string
	view   *view // pages only with a ViewToken; the snapshot feeds metrics
	// ready is set once main has been checked (a writer) or the mirror
	// refreshed from the writer (a replica): see readyz.
	ready atomic.Bool
	// renderedRequests is the requests.Ref tip of that render: a new
	// request renders again, so it reaches its install.
	renderedRequests plumbing.Hash
	// renderedApprovals is the schemas.ApprovalsRef tip of that render:
	// a new approval renders its install again.
	renderedApprovals plumbing.Hash

	// archived are the installs archived and gone from main (loadArchived).
	archivedMu sync.RWMutex
	archived   map[string]bool

	rollouts *rollouts // the rollout controller (rollout.go)
	// live is every install's last signed contact (liveness.go), saved
	// and exchanged by a loop that Close stops.
	live               *liveness
	liveStop, liveDone chan struct{}
	liveOnce           sync.Once

	maint maintenance // the repository's maintenance loop (maintenance.go)
}

var _ http.Handler = (*Server)(nil)

// New opens the repository, loads its ref table and main's install keys.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	cfg.Dir = dir
	var writer *url.URL
	if cfg.Mode == ModeReplica {
		if writer, err = initReplica(ctx, &cfg); err != nil {
			return nil, err
		}
	}
	var upstreamEnv []string
	if cfg.Upstream != "" {
		if err := checkUpstream(cfg.Upstream); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		if upstreamEnv, err = cfg.UpstreamAuth.Env(cfg.Upstream); err != nil {
			return nil, fmt.Errorf("server: upstream credentials: %w", err)
		}
	}
	if cfg.Mode == ModeWriter && cfg.RenderKey != nil {
		if err := ConfigureRepo(ctx, dir); err != nil {
			return nil, err
		}
	}
	refs, err := loadRefs(ctx, dir)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:  cfg,
		log:  cfg.Logger,
		refs: refs,
		keys: newKeyTable(dir),
		wake: make(chan struct{}, 1),

		gitSlots:    make(chan struct{}, cfg.MaxGit),
		inflight:    newInflight(cfg.Limits.InstallRequests),
		renderCache: renderer.NewCache(),
		pushSlots:   make(chan struct{}, maxPushesHeld*runtime.GOMAXPROCS(0)),
		objects:     newObjectPool(dir, cfg.MaxGit),
		pushes:      newPushStore(dir, readFsyncPolicy(ctx, dir)),
		metrics:     newMetrics(),
		boot:        bootID(),
		writer:      writer,
		client:      &http.Client{Timeout: 30 * time.Second},

		upstreamEnv: upstreamEnv,
	}
	s.keys.statusTip = func(id string) plumbing.Hash { h, _ := s.refs.get(schemas.StatusRef(id)); return h }
	s.keys.readObject = s.objects.read
	s.verifier = &request.Verifier{Key: s.keys.lookup, MaxSkew: cfg.MaxSkew, Now: cfg.Now}
	if main, err := revParse(ctx, dir, schemas.MainRef); err == nil {
		s.keys.reset(main)
	}
	if cfg.Upstream != "" {
		s.mirror = newMirror(dir, cfg.Upstream, s.upstreamEnv, cfg.UpstreamAuth, s.log, s.metrics)
	}
	s.startLiveness()
	s.startMaintenance(ctx)
	if s.view, err = newView(s, cfg.ViewToken); err != nil {
		s.Close()
		return nil, err
	}
	s.metrics.reg.MustRegister(&fleetCollector{s.view})
	s.rollouts = newRollouts(s)
	s.routes()
	if cfg.ViewToken != "" {
		go s.view.buildIndex() // the fleet view's index, before any operator asks
	}
	s.log.Info("server ready", "repo", dir, "refs", refs.len(), "upstream", gitproto.Redact(cfg.Upstream), "upstream_auth", cfg.UpstreamAuth, "mode", cfg.Mode)
	return s, nil
}

// Close stops taking pushes once those being written are, and ends the
// git process the server keeps for reading objects.
func (s *Server) Close() error {
	s.stopLiveness()
	s.stopMaintenance()
	s.pushes.close()
	s.objects.close()
	return nil
}

// Mux is the server's router, for packages that add pages (fleet view,
// metrics) beside the git endpoint.
func (s *Server) Mux() *http.ServeMux { return s.mux }

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /hooks/main", s.webhook)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.Handle("GET /metrics", s.metrics.handler())
	if s.cfg.ViewToken != "" {
		s.view.routes(s.mux)
	}
	if s.cfg.Mode == ModeWriter && s.cfg.ReplicaToken != "" {
		s.replicaRoutes()
	}
	s.operatorRoutes()
	s.buildRoutes()
	s.livenessRoutes()
	// The repository's path is free: agents use any URL ending in the
	// smart-HTTP endpoints, e.g. https://server/tenant.git.
	s.mux.HandleFunc("/", s.serveGit)
}

// ServeHTTP serves the git endpoint, the webhook and the health check,
// each request within its deadlines (Limits).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.limitRequest(w, r, s.mux.ServeHTTP)
}

// serveGit authenticates the install, then dispatches on the smart-HTTP
// endpoint.
func (s *Server) serveGit(w http.ResponseWriter, r *http.Request) {
	var endpoint string
	switch {
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/info/refs"):
		endpoint = "info/refs"
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack"):
		endpoint = "git-upload-pack"
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack"):
		endpoint = "git-receive-pack"
	default:
		http.NotFound(w, r)
		return
	}
	install, err := s.verifier.Verify(r)
	if err != nil {
		reason, text, detail := authReason(err), refusalText(err), err.Error()
		if errors.Is(err, request.ErrUnknownInstall) && s.isArchived(install) {
			// Its key left main with it; say why rather than "unknown".
			reason, text, detail = reasonArchived, archivedText, archivedText
		}
		s.log.Warn("request refused", "install", install, "path", r.URL.Path, "remote", r.RemoteAddr, "reason", detail)
		s.metrics.refused(reason)
		w.Header().Set("WWW-Authenticate", request.Scheme)
		http.Error(w, "nuon: "+text, http.StatusUnauthorized)
		return
	}
	// A signed request is the install's heartbeat (liveness.go).
	s.live.record(install, contactOf(endpoint, r), s.cfg.Now())
	// Verify put a reader in r.Body that fails at the end of a body that
	// is not the one signed; every handler reads to the end before it
	// acts, so a mismatch has refused the request. Log and count it.
	if body, ok := r.Body.(*request.Body); ok {
		defer func() {
			if body.Mismatch() {
				s.log.Warn("request refused", "install", install, "path", r.URL.Path, "remote", r.RemoteAddr, "reason", request.ErrDigest.Error())
				s.metrics.refused(reasonBodyDigest)
			}
		}()
	}
	// One install's requests take their turns among its own first, and
	// only then a git process or a push slot.
	release, ok := s.inflight.acquire(install)
	if !ok {
		s.installBusy(w, r, install)
		return
	}
	defer release()
	if s.writer != nil && (endpoint == "git-receive-pack" || r.URL.Query().Get("service") == "git-receive-pack") {
		s.forward(w, r, install)
		return
	}
	switch endpoint {
	case "info/refs":
		switch r.URL.Query().Get("service") {
		case "git-upload-pack":
			s.advertiseUpload(w, r, install)
		case "git-receive-pack":
			s.advertiseReceive(w, install)
		default:
			http.Error(w, "nuon: only smart HTTP is served", http.StatusForbidden)
		}
	case "git-upload-pack":
		s.uploadPack(w, r, install)
	case "git-receive-pack":
		s.receivePack(w, r, install)
	}
}

// gitSlot waits for a turn to run a git process; release ends it. It
// fails when the request is cancelled first.
func (s *Server) gitSlot(ctx context.Context) (release func(), err error) {
	select {
	case s.gitSlots <- struct{}{}:
		return func() { <-s.gitSlots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// refusalText is what a refused client is told: the reason, without
// details another install could learn from.
func refusalText(err error) string {
	for _, e := range []error{request.ErrNoAuth, request.ErrMalformed, request.ErrExpired, request.ErrUnknownInstall, request.ErrBadSignature, request.ErrReplay} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "request refused"
}

// refuse logs and counts a refused git operation; code is one of the
// fixed reasons (reasonForeignRef…), reason says more in the log.
func (s *Server) refuse(install, ref, code, reason string) {
	s.log.Warn("git request refused", "install", install, "ref", ref, "reason", reason)
	s.metrics.refused(code)
}

// readyz answers 200 once the server can serve what agents ask of it: the
// ref table is loaded (New) and main has been checked once since start
// (Sync; so install keys and renders are current), or, on a read replica,
// its mirror has been refreshed from the writer once. Until then, and
// while a replica has not refreshed for three poll intervals, it answers
// 503 so that a load balancer sends polls elsewhere.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if err := s.readiness(); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "ok\n")
}

// readiness is nil when the server is ready (see readyz).
func (s *Server) readiness() error {
	if !s.ready.Load() {
		if s.writer != nil {
			return errors.New("mirror not refreshed from the writer yet")
		}
		return errors.New("main not checked yet")
	}
	return nil
}

// Metrics serves the server's Prometheus metrics (also on /metrics).
func (s *Server) Metrics() http.Handler { return s.metrics.handler() }

// revParse resolves a ref of the repository at dir.
func revParse(ctx context.Context, dir, ref string) (plumbing.Hash, error) {
	cmd := exec.CommandContext(ctx, "git", "rev-parse", "--verify", "--quiet", ref+"^{commit}")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("resolve %s: %w", ref, err)
	}
	return plumbing.NewHash(strings.TrimSpace(string(out))), nil
}

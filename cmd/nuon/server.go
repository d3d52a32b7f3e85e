package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"nuon.dev/nuon/cmd/internal/cli"
	"nuon.dev/nuon/internal/gitauth"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/server"
)

type serverOptions struct {
	repo, listen, renderKey, upstream string
	pollInterval, maxSkew             time.Duration
	tlsCert, tlsKey                   string
	viewTokenFile                     string
	viewStaleAfter                    time.Duration
	fleetMetrics                      bool
	mode, writer, replicaTokenFile    string
	hookSecretFile                    string
	hookOpen                          bool
	hookInterval, maintenanceInterval time.Duration
	limits                            server.Limits
}

func newServerCmd(g *cli.Globals) *cobra.Command {
	o := &serverOptions{}
	cmd := &cobra.Command{
		Use:   "server --repo DIR --render-key KEYFILE [--upstream URL]",
		Short: "Serve each install its own refs over git smart HTTP, render every change of main",
		Long: `The tenant server is the one endpoint every install's agent talks to. It
serves the tenant repository in --repo (a bare repository) over git smart
HTTP, scoped to the install that signed each request with its own key
(agentKey in installs/<id>.yaml on main; agents use --server-auth):

  - an install reads only refs/heads/nuon/installs/<id> and
    refs/heads/nuon/status/<id>, and objects reachable from them;
  - it pushes only refs/heads/nuon/status/<id>, fast-forward, every new
    commit signed by its own key, checked before the ref moves.

Anything else is refused with a git error and logged, and answered alike
whether what was asked for exists or not. Polls (protocol v2 ls-refs) are
answered from an in-memory ref table, without a process; a fetch is planned
in the server from the install's closure and packed by git pack-objects; a
push is checked and written in-process.

It follows main: every --poll-interval, and at once on a POST to /hooks/main
(point the git host's push webhook there), it fetches main from --upstream
(if set) and renders a new main with --render-key exactly as 'nuon render'
does. The hook must prove it comes from the git host: give the host and
the server the same secret (--hook-secret-file, or $NUON_HOOK_SECRET_FILE);
GitHub, Gitea and Forgejo sign the body with it (X-Hub-Signature-256),
GitLab sends it as X-Gitlab-Token. Without a secret the hook is refused
unless --hook-open. A burst of hooks makes one check of main at once and
one more at most every --hook-interval. Rendered and status refs are pushed back to --upstream so the git host
keeps the audit log. Serve it over TLS (--tls-cert/--tls-key or a proxy in
front): request signatures bind each request and its body, and are good
once, but they do not hide what agents send and receive.

A private --upstream takes the same credentials as every other command that
reads the tenant repository, given to git through its environment (never
its command line); an https:// --upstream with user information in it is
refused. A refused credential is an error that names the upstream and where
the credentials came from, never what they are.

` + gitauth.Help + `

Operators see the fleet on /fleet: every install × component with its
desired and applied version, phase, last status and staleness, errors,
drift and refusals, filtered by channel and phase (?channel=beta&phase=Failed,
a URL to share), and each install's audit log and rendered diffs. It is on
only with --view-token-file: a file holding the operators' token (never on
the command line). Scripts send it as "Authorization: Bearer TOKEN"; a
browser signs in once on /fleet/login and keeps an HttpOnly session cookie.
An install's key never opens it.

Operators' commands (nuon status, logs, debug, requests with --server URL
and --key) come in on /operator, each request signed with an operator key
that trust/requests on main lists: they read every branch (git smart HTTP,
read-only), and file a request with POST /operator/requests, which the
server checks as the renderer does, files (upstream first), and renders at
once, so the install's agent finds it at its next poll. An install's key
opens nothing there, and an operator's key nothing of the installs'.

Beyond one machine: one writer (the default --mode writer) owns the
repository, renders and accepts pushes; with --replica-token-file it also
serves its whole repository, read-only, to read replicas. A replica
(--mode replica --writer URL --replica-token-file FILE, --repo an empty or
missing directory) keeps its own mirror, refreshed every --poll-interval and
after each push it forwards; it answers polls and fetches from the mirror
and forwards an install's status push, after checking its signature, to the
writer, which checks it again before it accepts it.

Every client is bounded, so that no one of them, hostile or slow, can
starve the fleet: a request's headers must arrive within
--read-header-timeout and its body within --read-timeout; a response that
its client stops reading is cut after --write-timeout (the deadline moves
with every write, so a large fetch to a client that reads completes); a
keep-alive connection is closed after --idle-timeout without a request;
headers are bounded by --max-header-bytes. At most --max-conns connections
are open (lowered to the open-files limit, ulimit -n, less some room): at
the cap a new connection closes an idle one, or one that has sent nothing
yet, to take its place, so idle connections cannot keep a polling agent
out. An install has at most --install-requests requests in flight; more
are answered 429 with Retry-After before they take a git process or a
push slot, so one install's key cannot slow the others. A push's command
list is bounded (16 commands, ref names of 1 KiB, 32 KiB in all) before
it is parsed. A replica enforces the same.

/metrics serves Prometheus metrics; /healthz answers while the process
serves; /readyz answers 200 once main has been checked since start.`,
		Example: `  # serve and render a local repository
  nuon server --repo /srv/tenant.git --render-key render.key --listen :8443 \
      --tls-cert tls.crt --tls-key tls.key

  # follow the vendor's git host; its push webhook posts to /hooks/main
  nuon server --repo /srv/tenant.git --render-key render.key \
      --upstream https://git.example.com/vendor/tenant.git --poll-interval 1m \
      --git-token-file /etc/nuon/upstream/token --hook-secret-file /etc/nuon/hook-secret

  # the same over SSH, with a deploy key that may push
  nuon server --repo /srv/tenant.git --render-key render.key \
      --upstream ssh://git@git.example.com/vendor/tenant.git \
      --ssh-key /etc/nuon/upstream/ssh-key --known-hosts /etc/nuon/upstream/known_hosts

  # with the fleet view for operators on https://nuon.example.com/fleet
  head -c 32 /dev/urandom | base64 > /etc/nuon/view-token
  nuon server --repo /srv/tenant.git --render-key render.key --listen :8443 \
      --tls-cert tls.crt --tls-key tls.key --view-token-file /etc/nuon/view-token

  # a writer serving two read replicas (see manifests/server/)
  nuon server --repo /srv/tenant.git --render-key render.key --listen :8080 \
      --replica-token-file /etc/nuon/replica-token
  nuon server --mode replica --writer http://writer:8080 --repo /var/lib/nuon/mirror.git \
      --replica-token-file /etc/nuon/replica-token --listen :8080 --poll-interval 5s

  # an agent of install acme
  nuon-agent agent --repo https://nuon.example.com/tenant.git --server-auth \
      --install acme --key acme.key --trust allowed_signers --workdir /var/lib/nuon`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServer(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.repo, "repo", "", "the tenant repository the server serves: a bare repository on local disk (required)")
	f.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address to listen on")
	f.StringVar(&o.renderKey, "render-key", "", "OpenSSH ed25519 key that signs rendered commits (empty: serve without rendering)")
	f.StringVar(&o.upstream, "upstream", "", "the tenant repository on the git host: main is fetched from it, rendered and status refs pushed to it (credentials: --git-token-file, --git-username/--git-password-file or --ssh-key, never in the URL)")
	f.DurationVar(&o.pollInterval, "poll-interval", 30*time.Second, "how often main is checked (a POST to /hooks/main checks at once)")
	f.DurationVar(&o.maxSkew, "max-skew", request.DefaultMaxSkew, "largest clock difference accepted in a request signature")
	f.StringVar(&o.tlsCert, "tls-cert", "", "TLS certificate file (with --tls-key: serve HTTPS)")
	f.StringVar(&o.tlsKey, "tls-key", "", "TLS private key file")
	f.StringVar(&o.viewTokenFile, "view-token-file", "", "file with the operators' token for the fleet view on /fleet (empty: no fleet view)")
	f.StringVar(&o.mode, "mode", server.ModeWriter, "writer (owns the repository, renders, accepts pushes) or replica (serves a mirror, forwards pushes to --writer)")
	f.StringVar(&o.writer, "writer", "", "with --mode replica: the writer's base URL, e.g. http://nuon-server-writer:8080")
	f.StringVar(&o.replicaTokenFile, "replica-token-file", "", "file with the token replicas present to the writer (on the writer: serve replicas; on a replica: required)")
	f.BoolVar(&o.fleetMetrics, "fleet-metrics", true, "without --view-token-file, build the fleet index on the first scrape of /metrics to report installs by state and status ages (at 1,000,000 installs about 4 min of CPU and 3.5 GB, 20 s from its saved index); false: only the series that need no index (contacts, requests, refusals)")
	f.DurationVar(&o.viewStaleAfter, "view-stale-after", 10*time.Minute, "age past which the fleet view marks an install's last status stale")
	f.StringVar(&o.hookSecretFile, "hook-secret-file", os.Getenv("NUON_HOOK_SECRET_FILE"), "file with the webhook secret the git host signs /hooks/main with (default $NUON_HOOK_SECRET_FILE)")
	f.BoolVar(&o.hookOpen, "hook-open", false, "serve /hooks/main without a secret: anyone who reaches it can make the server check main")
	f.DurationVar(&o.hookInterval, "hook-interval", server.DefaultHookInterval, "least time between two checks of main that webhooks start")
	f.DurationVar(&o.maintenanceInterval, "maintenance-interval", envDuration("NUON_MAINTENANCE_INTERVAL", server.DefaultMaintenanceInterval), "how often the server repacks its repository (geometric repack, commit-graph, pack-refs, at the lowest priority, never blocking polls or pushes); 0 turns it off (default $NUON_MAINTENANCE_INTERVAL or 1h)")
	f.DurationVar(&o.limits.ReadHeaderTimeout, "read-header-timeout", server.DefaultReadHeaderTimeout, "time a client has to send a request's headers")
	f.DurationVar(&o.limits.ReadTimeout, "read-timeout", server.DefaultReadTimeout, "time a request's body has to arrive (a push is at most 8 MiB of pack)")
	f.DurationVar(&o.limits.WriteTimeout, "write-timeout", server.DefaultWriteTimeout, "time a response waits on a client that does not read it, from its last write")
	f.DurationVar(&o.limits.IdleTimeout, "idle-timeout", server.DefaultIdleTimeout, "time a keep-alive connection may wait for its next request")
	f.IntVar(&o.limits.MaxHeaderBytes, "max-header-bytes", server.DefaultMaxHeaderBytes, "largest request headers accepted")
	f.IntVar(&o.limits.MaxConns, "max-conns", server.DefaultMaxConns, "most connections open at once; idle ones are closed first to make room")
	f.IntVar(&o.limits.InstallRequests, "install-requests", server.DefaultInstallRequests, "most requests one install may have in flight; more are answered 429")
	_ = cmd.MarkFlagRequired("repo")
	return cmd
}

func runServer(ctx context.Context, g *cli.Globals, o *serverOptions) error {
	log := g.Logger()
	cfg := server.Config{
		Dir:          o.repo,
		Upstream:     o.upstream,
		PollInterval: o.pollInterval,
		MaxSkew:      o.maxSkew,
		Logger:       log,

		ViewStaleAfter: o.viewStaleAfter,
		NoFleetMetrics: !o.fleetMetrics,
		Mode:           o.mode,
		Writer:         o.writer,
		HookOpen:       o.hookOpen,
		HookInterval:   o.hookInterval,
		Limits:         o.limits,
	}
	if o.hookSecretFile != "" {
		b, err := os.ReadFile(o.hookSecretFile)
		if err != nil {
			return fmt.Errorf("webhook secret: %w", err)
		}
		cfg.HookSecret = strings.TrimSpace(string(b))
		if len(cfg.HookSecret) < 16 {
			return fmt.Errorf("webhook secret in %s: shorter than 16 characters", o.hookSecretFile)
		}
	}
	if o.upstream != "" {
		auth, err := g.GitAuth()
		if err != nil {
			return fmt.Errorf("upstream credentials: %w", err)
		}
		cfg.UpstreamAuth = auth
	}
	if o.replicaTokenFile != "" {
		b, err := os.ReadFile(o.replicaTokenFile)
		if err != nil {
			return fmt.Errorf("replica token: %w", err)
		}
		cfg.ReplicaToken = strings.TrimSpace(string(b))
		if len(cfg.ReplicaToken) < 16 {
			return fmt.Errorf("replica token in %s: shorter than 16 characters", o.replicaTokenFile)
		}
	}
	if o.viewTokenFile != "" {
		b, err := os.ReadFile(o.viewTokenFile)
		if err != nil {
			return fmt.Errorf("fleet view token: %w", err)
		}
		cfg.ViewToken = strings.TrimSpace(string(b))
		if len(cfg.ViewToken) < 16 {
			return fmt.Errorf("fleet view token in %s: shorter than 16 characters", o.viewTokenFile)
		}
	}
	if o.renderKey != "" {
		k, err := signature.LoadSigner(o.renderKey)
		if err != nil {
			return err
		}
		cfg.RenderKey = k
	}
	cfg.MaintenanceInterval = o.maintenanceInterval
	if o.maintenanceInterval == 0 {
		cfg.MaintenanceInterval = -1 // off
	}
	srv, err := server.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	hs, ln := srv.HTTPServer(ln)
	errc := make(chan error, 1)
	go func() {
		if o.tlsCert != "" {
			errc <- hs.ServeTLS(ln, o.tlsCert, o.tlsKey)
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	runDone := make(chan struct{})
	go func() { srv.Run(ctx); close(runDone) }()
	log.Info("listening", "addr", ln.Addr().String())
	fmt.Fprintf(g.Stderr, "nuon server: listening on %s\n", ln.Addr())
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = hs.Shutdown(shut)
	stop()
	<-runDone
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// envDuration is the duration in the environment variable name, or def
// when it is unset or does not parse.
func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}

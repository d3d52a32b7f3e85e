package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"nuon.dev/nuon/cmd/internal/cli"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/server"
)

type serverOptions struct {
	repo, listen, renderKey, upstream string
	pollInterval, maxSkew             time.Duration
	tlsCert, tlsKey                   string
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

Anything else is refused with a git error and logged. Polls (protocol v2
ls-refs) are answered from an in-memory ref table, without a process; pack
transfer runs git's own upload-pack and receive-pack.

It follows main: every --poll-interval, and at once on a POST to /hooks/main
(point the git host's push webhook there), it fetches main from --upstream
(if set) and renders a new main with --render-key exactly as 'nuon render'
does. Rendered and status refs are pushed back to --upstream so the git host
keeps the audit log. Serve it over TLS (--tls-cert/--tls-key or a proxy in
front): request signatures do not cover bodies.

'nuon server pre-receive' is the check git receive-pack runs for each push;
it is not meant to be run by hand.`,
		Example: `  # serve and render a local repository
  nuon server --repo /srv/tenant.git --render-key render.key --listen :8443 \
      --tls-cert tls.crt --tls-key tls.key

  # follow the vendor's git host; its push webhook posts to /hooks/main
  nuon server --repo /srv/tenant.git --render-key render.key \
      --upstream https://git.example.com/vendor/tenant.git --poll-interval 1m

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
	f.StringVar(&o.upstream, "upstream", "", "the tenant repository on the git host: main is fetched from it, rendered and status refs pushed to it")
	f.DurationVar(&o.pollInterval, "poll-interval", 30*time.Second, "how often main is checked (a POST to /hooks/main checks at once)")
	f.DurationVar(&o.maxSkew, "max-skew", request.DefaultMaxSkew, "largest clock difference accepted in a request signature")
	f.StringVar(&o.tlsCert, "tls-cert", "", "TLS certificate file (with --tls-key: serve HTTPS)")
	f.StringVar(&o.tlsKey, "tls-key", "", "TLS private key file")
	_ = cmd.MarkFlagRequired("repo")
	cmd.AddCommand(&cobra.Command{
		Use:    "pre-receive",
		Short:  "The pre-receive check git receive-pack runs inside nuon server",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := server.RunPreReceive(cmd.Context(), os.Stdin, g.Stderr, os.Getenv); err != nil {
				return cli.ExitError{Code: 1}
			}
			return nil
		},
	})
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
	}
	if o.renderKey != "" {
		k, err := signature.LoadSigner(o.renderKey)
		if err != nil {
			return err
		}
		cfg.RenderKey = k
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
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
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

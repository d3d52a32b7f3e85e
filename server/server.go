package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
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
	// means none: main is what is pushed to Dir.
	Upstream string
	// PollInterval is how often main (and Upstream) is checked; default
	// 30s. A POST to /hooks/main checks at once.
	PollInterval time.Duration
	// MirrorDelay batches status refs for one push upstream; default 1s.
	MirrorDelay time.Duration
	// MaxSkew bounds a request signature's clock skew; default
	// request.DefaultMaxSkew.
	MaxSkew time.Duration
	// MaxGit bounds the git processes (upload-pack, receive-pack) running
	// at once; more requests wait their turn, so a fleet pushing at once
	// queues instead of thrashing the machine. Default 2 × GOMAXPROCS.
	MaxGit int
	// HookCommand runs the pre-receive check (RunPreReceive) inside git
	// receive-pack; default this executable with "server pre-receive".
	HookCommand []string
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger gets every refusal and every change; default discards.
	Logger *slog.Logger
}

func (c *Config) defaults() error {
	if c.Dir == "" {
		return errors.New("server: no repository")
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
	if len(c.HookCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("server: find own executable for the pre-receive hook: %w", err)
		}
		c.HookCommand = []string{exe, "server", "pre-receive"}
	}
	if c.MaxGit <= 0 {
		c.MaxGit = 2 * runtime.GOMAXPROCS(0)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
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
	hooks    string // core.hooksPath for receive-pack
	mux      *http.ServeMux

	gitSlots chan struct{} // one per git process allowed at once

	pushMu sync.Map // install → *sync.Mutex: one push per install at a time

	wake   chan struct{} // a webhook asks the follower to look now
	mirror *mirror

	renderMu sync.Mutex
	rendered plumbing.Hash // the main commit last rendered (or refused)
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

		gitSlots: make(chan struct{}, cfg.MaxGit),
	}
	s.verifier = &request.Verifier{Key: s.keys.lookup, MaxSkew: cfg.MaxSkew, Now: cfg.Now}
	if main, err := revParse(ctx, dir, schemas.MainRef); err == nil {
		s.keys.reset(main)
	}
	if s.hooks, err = writeHook(cfg.HookCommand); err != nil {
		return nil, err
	}
	if cfg.Upstream != "" {
		s.mirror = newMirror(dir, cfg.Upstream, s.log)
	}
	s.routes()
	s.log.Info("server ready", "repo", dir, "refs", refs.len(), "upstream", redactURL(cfg.Upstream))
	return s, nil
}

// Close removes the server's temporary files.
func (s *Server) Close() error { return os.RemoveAll(s.hooks) }

// Mux is the server's router, for packages that add pages (fleet view,
// metrics) beside the git endpoint.
func (s *Server) Mux() *http.ServeMux { return s.mux }

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /hooks/main", s.webhook)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	// The repository's path is free: agents use any URL ending in the
	// smart-HTTP endpoints, e.g. https://server/tenant.git.
	s.mux.HandleFunc("/", s.serveGit)
}

// ServeHTTP serves the git endpoint, the webhook and the health check.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

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
		s.log.Warn("request refused", "install", install, "path", r.URL.Path, "remote", r.RemoteAddr, "reason", err.Error())
		w.Header().Set("WWW-Authenticate", request.Scheme)
		http.Error(w, "nuon: "+refusalText(err), http.StatusUnauthorized)
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
	for _, e := range []error{request.ErrNoAuth, request.ErrMalformed, request.ErrExpired, request.ErrUnknownInstall, request.ErrBadSignature} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "request refused"
}

// refuse logs a refused git operation.
func (s *Server) refuse(install, ref, reason string) {
	s.log.Warn("git request refused", "install", install, "ref", ref, "reason", reason)
}

// writeHook writes a hooks directory whose pre-receive runs command.
func writeHook(command []string) (string, error) {
	dir, err := os.MkdirTemp("", "nuon-server-hooks-")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("#!/bin/sh\nexec")
	for _, a := range command {
		b.WriteString(" '" + strings.ReplaceAll(a, "'", `'\''`) + "'")
	}
	b.WriteString("\n")
	if err := os.WriteFile(filepath.Join(dir, "pre-receive"), []byte(b.String()), 0o755); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

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

package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"nuon.dev/nuon/internal/gitauth"
	"nuon.dev/nuon/internal/gitproto"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/publish"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
)

// renderRetries is how often a render is retried when a ref moved under
// it.
const renderRetries = 3

// Run follows main until ctx ends: on every PollInterval and webhook it
// fetches main from upstream (if any), renders a new main and mirrors the
// refs that moved upstream.
func (s *Server) Run(ctx context.Context) error {
	if s.writer != nil {
		return s.runReplica(ctx)
	}
	if s.mirror != nil {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); s.mirror.run(ctx, s.cfg.MirrorDelay) }()
		defer wg.Wait()
	}
	var rwg sync.WaitGroup
	rwg.Add(1)
	go func() { defer rwg.Done(); s.rollouts.run(ctx) }()
	defer rwg.Wait()
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	var hooked time.Time // when a webhook last started a check
	released := false
	for {
		err := s.Sync(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Error("follow main", "error", err)
		}
		if err == nil && !released {
			// The start render (at 1,000,000 installs it reads every
			// install ref) leaves hundreds of MB of garbage the runtime
			// would keep from the OS for minutes: give it back once.
			released = true
			debug.FreeOSMemory()
		}
		// Pushes do not start git gc themselves (receive.autogc=false).
		if err := git(ctx, s.cfg.Dir, "gc", "--auto", "--quiet"); err != nil && ctx.Err() == nil {
			s.log.Warn("git gc", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.wake:
			// A burst of hooks: its first checks at once, the rest
			// together once HookInterval has passed (settleHooks).
			if !s.settleHooks(ctx, hooked) {
				return nil
			}
			hooked = time.Now()
		}
	}
}

// Sync does one step of following main: fetch it from upstream, render it
// if it changed, update the ref table and the install keys, mirror what
// moved.
func (s *Server) Sync(ctx context.Context) error {
	s.renderMu.Lock()
	defer s.renderMu.Unlock()
	result, err := s.sync(ctx)
	if err != nil {
		result = resultError
	} else {
		s.ready.Store(true)
	}
	s.metrics.mainChecks.WithLabelValues(result).Inc()
	return err
}

// sync is one step of Sync; it returns what happened as a metrics result.
func (s *Server) sync(ctx context.Context) (string, error) {
	if s.cfg.Upstream != "" {
		// Operators' requests and approvers' approvals too (patterns,
		// so a missing ref is no error): a new one renders its install
		// again. And the archive
		// (nuon install delete), whose installs the server retires.
		if err := s.fetchUpstream(ctx); err != nil {
			return "", err
		}
	}
	// main, the requests and the approvals (zero: none filed).
	tips, err := resolveRefs(ctx, s.cfg.Dir, schemas.MainRef, requests.Ref, schemas.ApprovalsRef)
	if err != nil {
		return "", err
	}
	main, ok := tips[schemas.MainRef]
	if !ok {
		return "", fmt.Errorf("resolve %s: no such ref", schemas.MainRef)
	}
	archives, err := s.loadArchived(ctx, main)
	s.keys.reset(main)
	if err == nil {
		err = s.followArchives(ctx, archives)
	}
	if err != nil {
		// Not the render's business: logged, counted and tried again at
		// the next check; the mirror holds the refs back meanwhile.
		s.log.Error("retire archived installs", "error", err)
	}
	reqs, apprs := tips[requests.Ref], tips[schemas.ApprovalsRef]
	if (main == s.rendered && reqs == s.renderedRequests && apprs == s.renderedApprovals) || s.cfg.RenderKey == nil {
		return resultUnchanged, nil
	}
	// A channel's first rollout policy holds back the pins it came with
	// (server/rollout_first.go).
	s.baselineFirstRollouts(ctx, main)
	start := time.Now()
	for attempt := 0; ; attempt++ {
		repo, err := gitrepo.Open(s.cfg.Dir)
		if err != nil {
			return "", err
		}
		refs := &renderRefs{refs: s.refs, dir: s.cfg.Dir}
		res, err := publish.Render(ctx, repo, s.cfg.RenderKey, publish.Options{Source: main.String(), Now: s.cfg.Now, Cache: s.renderCache,
			Refs: refs})
		var ps schemas.Problems
		if errors.As(err, &ps) {
			// Not retried: main must change first.
			s.rendered = main
			s.log.Error("main does not render", "commit", main.String(), "problems", len(ps), "error", ps.Error())
			s.metrics.renders.WithLabelValues(resultProblems).Inc()
			return resultProblems, nil
		}
		if errors.Is(err, gitrepo.ErrStale) && attempt < renderRetries {
			continue
		}
		if err != nil {
			s.metrics.renders.WithLabelValues(resultError).Inc()
			return "", fmt.Errorf("render %s: %w", main, err)
		}
		s.rendered, s.renderedRequests, s.renderedApprovals = main, reqs, apprs
		for _, w := range res.Warnings {
			s.log.Warn("render: "+w, "commit", main.String())
		}
		for _, in := range res.Failed() {
			s.log.Error("install not rendered, keeping its previous state", "install", in.ID, "commit", main.String(), "error", in.Error)
		}
		var moved, ids []string
		for _, u := range res.Updates {
			name := u.Name.String()
			if id, ok := strings.CutPrefix(name, schemas.InstallRefPrefix); ok {
				s.refs.set(name, u.New)
				ids = append(ids, id)
			}
			moved = append(moved, name)
		}
		// The next render is handed the list this one left.
		s.refs.adoptList(refs.handed, res.List, ids)
		s.log.Info("rendered", "commit", main.String(), "changed", res.ChangedCount(), "refs", len(moved), "duration", time.Since(start).Round(time.Millisecond))
		if s.mirror != nil && len(moved) > 0 {
			s.mirror.add(moved...)
			s.mirror.kick()
		}
		s.metrics.renders.WithLabelValues(resultRendered).Inc()
		s.metrics.renderDuration.Observe(time.Since(start).Seconds())
		s.metrics.renderChanged.Add(float64(res.ChangedCount()))
		return resultRendered, nil
	}
}

// checkUpstream refuses an http(s) upstream URL with user information:
// whatever it holds would be in git's argv, where any user of the machine
// reads it, and in its messages. Credentials come from auth (package
// gitauth: a token or password file, or an SSH key).
func checkUpstream(upstream string) error {
	u, err := url.Parse(upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User == nil {
		return nil
	}
	return fmt.Errorf("upstream %s: has user information in the URL; give credentials with --git-token-file, --git-username and --git-password-file, or --ssh-key instead", gitproto.Redact(upstream))
}

// repoConfig is the git configuration a rendering server gives its
// repository, for each key the operator has not set:
//
//   - core.looseCompression 0: main's new objects arrive loose (git fetch
//     and receive-pack unpack fewer than 100 objects), and a render reads
//     main's installs/ tree whole. At 100,000 installs that tree is 3.9 MB;
//     inflating it from zlib took some 10 ms of a one-install render's
//     63 ms, where stored it is a copy. The cost is disk: 3.9 MB for each
//     new installs/ tree where zlib made 2.5 MB, until git gc packs it
//     (pack.compression is unchanged), which Run starts after every
//     check of main. The server writes the trees of status pushes stored
//     already (createLoose).
var repoConfig = [][2]string{{"core.looseCompression", "0"}}

// ConfigureRepo gives the repository dir the configuration a rendering
// server keeps it with (repoConfig), key by key, unless the key is set
// there already.
func ConfigureRepo(ctx context.Context, dir string) error {
	for _, kv := range repoConfig {
		if err := git(ctx, dir, "config", "--local", "--get", kv[0]); err == nil {
			continue
		}
		if err := git(ctx, dir, "config", "--local", kv[0], kv[1]); err != nil {
			return fmt.Errorf("server: configure the repository: %w", err)
		}
	}
	return nil
}

// upstreamError is a failed fetch from or push to the upstream: it names
// the upstream (without user information) and where the credentials came
// from, never what they are, and says so when the upstream refused them.
func upstreamError(op, upstream string, auth *gitauth.Auth, err error) error {
	msg := err.Error()
	for _, refused := range []string{"Authentication failed", "could not read Username", "could not read Password",
		"Permission denied", "Host key verification failed", "The requested URL returned error: 401", "The requested URL returned error: 403"} {
		if strings.Contains(msg, refused) {
			return fmt.Errorf("%s upstream %s: it refused the credentials (%s): %w", op, gitproto.Redact(upstream), auth, err)
		}
	}
	return fmt.Errorf("%s upstream %s: %w", op, gitproto.Redact(upstream), err)
}

// git runs a git command in dir.
func git(ctx context.Context, dir string, args ...string) error {
	return gitEnv(ctx, dir, nil, args...)
}

// gitEnv runs a git command in dir with more environment.
func gitEnv(ctx context.Context, dir string, env []string, args ...string) error {
	_, err := runGit(ctx, dir, env, nil, args...)
	return err
}

// mirror pushes refs that moved to the upstream repository, batched.
type mirror struct {
	dir, upstream string
	env           []string // gives git the upstream's credentials
	auth          *gitauth.Auth
	log           *slog.Logger
	metrics       *metrics

	// pushMu is held through a push, and by the archive step while it
	// retires an install: no push goes up with refs it is deleting.
	pushMu sync.Mutex

	mu       sync.Mutex
	dirty    map[string]bool
	everyRef bool // push all of refs/heads/nuon/ next time
	// held are refs never pushed: archived installs' refs the server
	// could not retire yet (see hold); holding is set once hold ran.
	held    map[string]bool
	holding bool
	kickc   chan struct{}
}

// maxMirrorArgs is how many refs one push names; more are pushed as the
// whole refs/heads/nuon/ namespace.
const maxMirrorArgs = 1000

func newMirror(dir, upstream string, env []string, auth *gitauth.Auth, log *slog.Logger, m *metrics) *mirror {
	return &mirror{dir: dir, upstream: upstream, env: env, auth: auth, log: log, metrics: m, dirty: map[string]bool{}, kickc: make(chan struct{}, 1)}
}

func (m *mirror) add(refs ...string) {
	m.mu.Lock()
	for _, r := range refs {
		m.dirty[r] = true
	}
	m.mu.Unlock()
	m.kick()
}

// hold replaces the refs never to push: archived installs' refs the
// archive step kept (it failed, or they hold commits the archive lacks).
//
// The first call, after the first archive step, also marks every ref of
// refs/heads/nuon/ for the next push: what was accepted before a restart
// but not yet mirrored goes up then, once, and not before, so that an
// install archived upstream while the server was down is not pushed back.
func (m *mirror) hold(refs []string) {
	held := make(map[string]bool, len(refs))
	for _, r := range refs {
		held[r] = true
	}
	m.mu.Lock()
	m.held = held
	first := !m.holding
	m.holding = true
	m.everyRef = m.everyRef || first
	m.mu.Unlock()
	if first {
		m.kick()
	}
}

// forget drops refs from the next push: the archive step deleted them.
func (m *mirror) forget(refs ...string) {
	m.mu.Lock()
	for _, r := range refs {
		delete(m.dirty, r)
	}
	m.mu.Unlock()
}

func (m *mirror) kick() {
	select {
	case m.kickc <- struct{}{}:
	default:
	}
}

// run pushes the dirty refs at most every delay. A failed push keeps them
// dirty for the next round.
func (m *mirror) run(ctx context.Context, delay time.Duration) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.kickc:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		if err := m.push(ctx); err != nil && ctx.Err() == nil {
			m.log.Error("mirror upstream", "error", err)
			m.kick()
		}
	}
}

// push sends the dirty refs upstream in one atomic push.
func (m *mirror) push(ctx context.Context) error {
	m.pushMu.Lock()
	defer m.pushMu.Unlock()
	m.mu.Lock()
	refs := make([]string, 0, len(m.dirty))
	for r := range m.dirty {
		if !m.held[r] {
			refs = append(refs, r)
		}
	}
	held := make([]string, 0, len(m.held))
	for r := range m.held {
		held = append(held, r)
	}
	m.dirty = map[string]bool{}
	every := m.everyRef
	m.everyRef = false
	m.mu.Unlock()
	if len(refs) == 0 && !every {
		return nil
	}
	slices.Sort(refs)
	// The whole namespace is pushed without --atomic: a ref the git host
	// refuses (it moved there) must not hold back the others.
	args := []string{"push", "--quiet"}
	if !every {
		args = append(args, "--atomic")
	}
	args = append(args, m.upstream)
	if every || len(refs) > maxMirrorArgs {
		args = append(args, "refs/heads/nuon/*:refs/heads/nuon/*")
		slices.Sort(held)
		for _, r := range held {
			args = append(args, "^"+r) // a negative refspec (git 2.29)
		}
	} else {
		for _, r := range refs {
			args = append(args, r+":"+r)
		}
	}
	if err := gitEnv(ctx, m.dir, m.env, args...); err != nil {
		// The named refs are tried again; the whole namespace is not (a
		// diverged ref upstream would fail it every time).
		m.add(refs...)
		m.metrics.mirrors.WithLabelValues(resultError).Inc()
		return upstreamError("push to", m.upstream, m.auth, err)
	}
	m.metrics.mirrors.WithLabelValues(resultOK).Inc()
	m.log.Info("mirrored upstream", "refs", len(refs))
	return nil
}

// redactURL hides credentials in URLs inside s.
func redactURL(s string) string {
	f := strings.Fields(s)
	for i, w := range f {
		if u, err := url.Parse(w); err == nil && u.User != nil {
			u.User = url.User("REDACTED")
			f[i] = u.String()
		}
	}
	if len(f) == 0 {
		return s
	}
	return strings.Join(f, " ")
}

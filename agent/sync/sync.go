package sync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	stdsync "sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/sigstore/pkg/signature"
	"golang.org/x/sync/errgroup"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/schemas"
)

// Repositories makes sure a repository exists in the install registry
// before anything is pushed to it. ECR needs it; registries that create
// repositories on the first push do not.
type Repositories interface {
	EnsureRepository(ctx context.Context, repo name.Repository) error
}

// Config configures a Syncer. Client and Key are required.
type Config struct {
	// Client reaches the vendor registry and the install registry.
	Client *oci.Client
	// Key is the vendor's public key (cosign.pub): only artifacts it
	// signed are copied.
	Key signature.Verifier
	// Repositories, when set, is called before the first push to a
	// repository of the install registry.
	Repositories Repositories
	// Jobs bounds the blobs of one artifact copied at once; default
	// DefaultJobs.
	Jobs int
	// Parallel bounds the artifacts of one Sync checked or copied at
	// once; default DefaultParallel.
	Parallel int
	// Attempts at an artifact whose registry failed in a way that may
	// pass; default DefaultAttempts. Backoff is the wait before the second
	// attempt, doubled before each next; default DefaultBackoff.
	Attempts int
	Backoff  time.Duration
	// Progress is how often a running copy logs how far it got; default
	// DefaultProgress.
	Progress time.Duration
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Provenance, when set, copies only artifacts whose SLSA provenance
	// is signed by a builder of the trust root, names the digest and
	// comes from an allowed source (see ProvenanceConfig). Default: none.
	Provenance *ProvenanceConfig
	// Copied, when set, is told the bytes read from the vendor registry
	// by each artifact copy, finished or not (metrics); it must not block.
	Copied func(bytes int64)
}

// Defaults of a Config.
const (
	DefaultJobs     = 8
	DefaultParallel = 4
	DefaultAttempts = 3
	DefaultBackoff  = 500 * time.Millisecond
	DefaultProgress = 5 * time.Second
)

// Syncer copies artifacts by digest from the vendor registry into the
// install registry, each after verifying its cosign signature against the
// vendor key, together with that signature.
type Syncer struct {
	cfg Config

	mu stdsync.Mutex
	// verified holds the digests whose signature this Syncer checked,
	// so that a present artifact costs one request.
	verified map[string]bool
}

var _ agent.Syncer = (*Syncer)(nil)

// New returns a Syncer.
func New(cfg Config) (*Syncer, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("sync: no registry client")
	case cfg.Key == nil:
		return nil, errors.New("sync: no vendor key")
	}
	if cfg.Jobs <= 0 {
		cfg.Jobs = DefaultJobs
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = DefaultParallel
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = DefaultAttempts
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.Progress <= 0 {
		cfg.Progress = DefaultProgress
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Syncer{cfg: cfg, verified: map[string]bool{}}, nil
}

// Sync makes every artifact present in the install registry at its Local
// reference, with its signature, and returns nil only when all are. An
// artifact already there costs one request (a HEAD of its manifest) once
// this Syncer has verified its signature; one that is not is verified in
// the vendor registry (signature by the vendor key over its digest), then
// copied blob by blob, signature first, manifest last, so a manifest in
// the install registry always has its blobs and signature beside it.
//
// Failures are *Error: Refused ones are final, Temporary ones are retried
// Attempts times before Sync gives up.
func (s *Syncer) Sync(ctx context.Context, artifacts []schemas.Artifact) error {
	return s.SyncComponent(ctx, "", "", artifacts)
}

// SyncComponent is Sync for the artifacts of one component of an install
// on channel: provenance is judged by the sources the trust root allows
// for that component and the builders it requires for that channel
// ("" for Config.Provenance.Target's channel).
func (s *Syncer) SyncComponent(ctx context.Context, channel, component string, artifacts []schemas.Artifact) error {
	run := &syncRun{s: s, channel: channel, component: component, pushers: map[string]*remote.Pusher{}}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(s.cfg.Parallel)
	errs := make([]error, len(artifacts))
	for i, a := range artifacts {
		g.Go(func() error {
			errs[i] = run.artifact(ctx, a)
			return nil
		})
	}
	_ = g.Wait()
	return errors.Join(errs...)
}

// syncRun is one Sync call. Its pushers are its own: a pusher remembers
// what it pushed and would skip an artifact deleted since.
type syncRun struct {
	s *Syncer
	// channel and component are whose artifacts these are, for
	// provenance rules.
	channel, component string
	mu                 stdsync.Mutex
	pushers            map[string]*remote.Pusher
}

func (r *syncRun) pusher(ctx context.Context, repo name.Repository) (*remote.Pusher, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.pushers[repo.String()]; ok {
		return p, nil
	}
	if rs := r.s.cfg.Repositories; rs != nil {
		if err := rs.EnsureRepository(ctx, repo); err != nil {
			return nil, err
		}
	}
	// A failed blob is retried once at once; the artifact's own retry
	// covers longer outages, and skips the blobs already copied.
	p, err := r.s.cfg.Client.NewPusher(ctx, repo, remote.WithJobs(r.s.cfg.Jobs),
		remote.WithRetryBackoff(remote.Backoff{Duration: r.s.cfg.Backoff, Factor: 2, Steps: 2}))
	if err != nil {
		return nil, err
	}
	r.pushers[repo.String()] = p
	return p, nil
}

// artifact syncs one artifact, retrying what may pass.
func (r *syncRun) artifact(ctx context.Context, a schemas.Artifact) error {
	wait := r.s.cfg.Backoff
	for attempt := 1; ; attempt++ {
		err := r.once(ctx, a)
		if err == nil {
			return nil
		}
		e := classify(a.Name, a.Source, err)
		if !e.Temporary || attempt >= r.s.cfg.Attempts || ctx.Err() != nil {
			return e
		}
		r.s.cfg.Logger.Warn("artifact sync failed; retrying", "artifact", a.Name, "digest", a.Digest, "attempt", attempt, "retry_in", wait, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return classify(a.Name, a.Source, ctx.Err())
		case <-t.C:
		}
		wait *= 2
	}
}

// refs parses an artifact's references and checks they name its digest.
func refs(a schemas.Artifact) (src, local name.Digest, err error) {
	if local, err = name.NewDigest(a.Local); err != nil {
		return src, local, fmt.Errorf("local reference %q: %w", a.Local, err)
	}
	if src, err = name.NewDigest(a.Source); err != nil {
		return src, local, fmt.Errorf("source reference %q: %w", a.Source, err)
	}
	if src.DigestStr() != local.DigestStr() || (a.Digest != "" && a.Digest != src.DigestStr()) {
		return src, local, fmt.Errorf("%w: source %s, local %s and digest %s disagree", ErrDigestMismatch, a.Source, a.Local, a.Digest)
	}
	return src, local, nil
}

func (s *Syncer) isVerified(d string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.verified[d]
}

func (s *Syncer) setVerified(d string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.verified[d] = true
}

package sync

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sync/errgroup"

	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/schemas"
)

// once makes one attempt at artifact a: check, verify, copy.
func (r *syncRun) once(ctx context.Context, a schemas.Artifact) error {
	s := r.s
	c := s.cfg.Client
	src, local, err := refs(a)
	if err != nil {
		return err
	}
	d, err := v1.NewHash(src.DigestStr())
	if err != nil {
		return err
	}
	log := s.cfg.Logger.With("artifact", a.Name, "digest", d.String())

	present, err := c.Head(ctx, local, true)
	if err != nil {
		return fmt.Errorf("install registry: %w", err)
	}
	if present {
		if s.isVerified(r.verifiedKey(d)) {
			return nil
		}
		// Present but not verified by this agent yet: check the copy of
		// the signature that travelled with it.
		if _, err := c.VerifySignature(ctx, local.Context(), d, s.cfg.Key); err == nil && r.provenance(ctx, src.Context(), d) == nil {
			s.setVerified(r.verifiedKey(d))
			log.Debug("artifact present and signed", "local", a.Local)
			return nil
		}
		log.Info("artifact present without a valid signature copy; syncing it again", "local", a.Local)
	}

	m, err := c.Get(ctx, src)
	if err != nil {
		return fmt.Errorf("vendor registry: %w", err)
	}
	sigs, err := c.VerifySignature(ctx, src.Context(), d, s.cfg.Key)
	if err != nil {
		return err
	}
	if err := r.provenance(ctx, src.Context(), d); err != nil {
		return err
	}
	p, err := r.pusher(ctx, local.Context())
	if err != nil {
		return fmt.Errorf("install registry: %w", err)
	}
	sigEntity, err := c.Entity(ctx, sigs.Raw, nil)
	if err != nil {
		return err
	}
	var read atomic.Int64
	entity, err := c.Entity(ctx, m, &read)
	if err != nil {
		return err
	}
	start := time.Now()
	stop := r.progress(log, local, m, &read, start)
	err = r.copy(ctx, p, local, entity, oci.SignatureTag(local.Context(), d), sigEntity)
	stop()
	if s.cfg.Copied != nil {
		s.cfg.Copied(read.Load())
	}
	if err != nil {
		return err
	}
	s.setVerified(r.verifiedKey(d))
	elapsed := time.Since(start)
	log.Info("artifact copied", "local", a.Local, "bytes", read.Load(), "duration", elapsed.Round(time.Millisecond),
		"mb_per_s", fmt.Sprintf("%.1f", float64(read.Load())/1e6/max(elapsed.Seconds(), 1e-6)))
	return nil
}

// copy writes the signature manifest and the artifact's blobs, at once,
// then the artifact's manifest: a manifest is only ever written once
// everything it needs is there.
func (r *syncRun) copy(ctx context.Context, p *remote.Pusher, local name.Digest, entity remote.Taggable, sigTag name.Tag, sig remote.Taggable) error {
	img, ok := entity.(v1.Image)
	if !ok {
		// An index: its children are manifests, pushed in order by the
		// pusher, after the signature.
		if err := p.Push(ctx, sigTag, sig); err != nil {
			return fmt.Errorf("copy signature to %s: %w", sigTag, err)
		}
		if err := p.Push(ctx, local, entity); err != nil {
			return fmt.Errorf("copy to %s: %w", local, err)
		}
		return nil
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	cfg, err := partial.ConfigLayer(img)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := p.Push(gctx, sigTag, sig); err != nil {
			return fmt.Errorf("copy signature to %s: %w", sigTag, err)
		}
		return nil
	})
	blobs := make(chan v1.Layer)
	g.Go(func() error {
		defer close(blobs)
		for _, l := range append([]v1.Layer{cfg}, layers...) {
			select {
			case blobs <- l:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	for range r.s.cfg.Jobs {
		g.Go(func() error {
			for l := range blobs {
				if err := p.Upload(gctx, local.Context(), l); err != nil {
					d, _ := l.Digest()
					return fmt.Errorf("copy blob %s to %s: %w", d, local.Context(), err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := p.Put(ctx, local, img); err != nil {
		return fmt.Errorf("copy to %s: %w", local, err)
	}
	return nil
}

// progress logs a copy's progress every Progress until stop is called.
func (r *syncRun) progress(log *slog.Logger, local name.Digest, m *oci.Manifest, read *atomic.Int64, start time.Time) (stop func()) {
	total := blobSize(m)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(r.s.cfg.Progress)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n := read.Load()
				args := []any{"local", local.String(), "bytes", n, "elapsed", time.Since(start).Round(time.Second)}
				if total > 0 {
					args = append(args, "total", total, "percent", 100*n/total)
				}
				log.Info("copying artifact", args...)
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// blobSize is the size of an image manifest's blobs; -1 for an index,
// whose children are read as the copy goes.
func blobSize(m *oci.Manifest) int64 {
	if !m.MediaType.IsImage() {
		return -1
	}
	man, err := v1.ParseManifest(bytes.NewReader(m.Raw))
	if err != nil {
		return -1
	}
	n := man.Config.Size
	for _, l := range man.Layers {
		n += l.Size
	}
	return n
}

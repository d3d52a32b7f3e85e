package oci

import (
	"bytes"
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// NewPusher returns a go-containerregistry pusher for repo through c.
// Make one per unit of work: a pusher remembers what it pushed and would
// not notice an artifact deleted since.
func (c *Client) NewPusher(ctx context.Context, repo name.Repository, opts ...remote.Option) (*remote.Pusher, error) {
	ro, err := c.Remote(ctx, repo, true)
	if err != nil {
		return nil, err
	}
	return remote.NewPusher(append(ro, opts...)...)
}

// Source gives plugins their artifacts from the install's registry: it
// reads each artifact's manifest by the digest in its Local reference and
// unpacks its content layer into the plugin's directory, verifying every
// digest on the way (see Extract).
type Source struct {
	Client *Client
}

var _ reconciler.ArtifactSource = (*Source)(nil)

// Extract implements reconciler.ArtifactSource.
func (s *Source) Extract(ctx context.Context, a schemas.Artifact, dir string) error {
	ref, err := localRef(a)
	if err != nil {
		return err
	}
	m, err := s.Client.Get(ctx, ref)
	if err != nil {
		return fmt.Errorf("artifact %s: %w", a.Name, err)
	}
	layer, strip, err := contentLayer(m)
	if err != nil {
		return fmt.Errorf("artifact %s: %w", a.Name, err)
	}
	rc, err := s.Client.Blob(ctx, ref.Context(), layer)
	if err != nil {
		return fmt.Errorf("artifact %s: %w", a.Name, err)
	}
	defer rc.Close()
	if err := Extract(ctx, rc, layer, dir, ExtractOptions{Strip: strip}); err != nil {
		return fmt.Errorf("artifact %s: %w", a.Name, err)
	}
	return nil
}

// contentLayer picks the layer of a directory artifact: the one with a
// media type of a known kind, or the only layer.
func contentLayer(m *Manifest) (v1.Descriptor, int, error) {
	if !m.MediaType.IsImage() {
		return v1.Descriptor{}, 0, fmt.Errorf("%s is a %s, not a directory artifact", m.Ref, m.MediaType)
	}
	man, err := v1.ParseManifest(bytes.NewReader(m.Raw))
	if err != nil {
		return v1.Descriptor{}, 0, fmt.Errorf("manifest %s: %w", m.Ref, err)
	}
	for _, l := range man.Layers {
		if k, ok := kindOfLayer(string(l.MediaType)); ok {
			return l, k.Strip, nil
		}
	}
	if len(man.Layers) == 1 {
		return man.Layers[0], 0, nil
	}
	return v1.Descriptor{}, 0, fmt.Errorf("%s has %d layers and none of a known artifact media type", m.Ref, len(man.Layers))
}

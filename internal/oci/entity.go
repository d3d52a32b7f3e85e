package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Entity returns the manifest m of a repository as something
// go-containerregistry's remote.Pusher can push: an image, an index or, for
// any other manifest, the manifest alone. Child manifests and blobs are
// read through c when the pusher needs them (never for what the
// destination already has), each verified against its digest; the bytes
// of blobs read are added to *read when read is not nil.
//
// The entity keeps ctx for those reads, as go-containerregistry's own
// remote images keep theirs: use it within the call that made it.
func (c *Client) Entity(ctx context.Context, m *Manifest, read *atomic.Int64) (remote.Taggable, error) {
	src := &source{ctx: ctx, c: c, repo: m.Ref.Context(), read: read}
	return src.entity(m)
}

type source struct {
	ctx  context.Context
	c    *Client
	repo name.Repository
	read *atomic.Int64
}

func (s *source) entity(m *Manifest) (remote.Taggable, error) {
	switch {
	case m.MediaType.IsIndex():
		var im v1.IndexManifest
		if err := json.Unmarshal(m.Raw, &im); err != nil {
			return nil, fmt.Errorf("index %s: %w", m.Ref, err)
		}
		return &sourceIndex{s: s, m: m, im: &im}, nil
	case m.MediaType == types.OCIManifestSchema1 || m.MediaType == types.DockerManifestSchema2:
		return partial.CompressedToImage(&sourceImage{s: s, m: m})
	default:
		return &rawManifest{m: m}, nil
	}
}

// sourceImage is the compressed core of an image manifest in the source.
type sourceImage struct {
	s      *source
	m      *Manifest
	config []byte
}

func (i *sourceImage) RawManifest() ([]byte, error)        { return i.m.Raw, nil }
func (i *sourceImage) MediaType() (types.MediaType, error) { return i.m.MediaType, nil }

func (i *sourceImage) RawConfigFile() ([]byte, error) {
	if i.config != nil {
		return i.config, nil
	}
	m, err := v1.ParseManifest(bytes.NewReader(i.m.Raw))
	if err != nil {
		return nil, err
	}
	rc, err := i.s.c.Blob(i.s.ctx, i.s.repo, m.Config)
	if err != nil {
		return nil, fmt.Errorf("config of %s: %w", i.m.Ref, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("config of %s: %w", i.m.Ref, err)
	}
	i.config = b
	return b, nil
}

func (i *sourceImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	m, err := v1.ParseManifest(bytes.NewReader(i.m.Raw))
	if err != nil {
		return nil, err
	}
	if m.Config.Digest == h {
		return &sourceBlob{s: i.s, desc: m.Config}, nil
	}
	for _, l := range m.Layers {
		if l.Digest == h {
			return &sourceBlob{s: i.s, desc: l}, nil
		}
	}
	return nil, fmt.Errorf("%s has no blob %s", i.m.Ref, h)
}

// sourceBlob is a blob of the source, read when it is pushed.
type sourceBlob struct {
	s    *source
	desc v1.Descriptor
}

func (b *sourceBlob) Digest() (v1.Hash, error)            { return b.desc.Digest, nil }
func (b *sourceBlob) Size() (int64, error)                { return b.desc.Size, nil }
func (b *sourceBlob) MediaType() (types.MediaType, error) { return b.desc.MediaType, nil }

func (b *sourceBlob) Compressed() (io.ReadCloser, error) {
	rc, err := b.s.c.Blob(b.s.ctx, b.s.repo, b.desc)
	if err != nil {
		return nil, err
	}
	if b.s.read == nil {
		return rc, nil
	}
	return &countingReader{ReadCloser: rc, n: b.s.read}, nil
}

type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.n.Add(int64(n))
	return n, err
}

// sourceIndex is an index in the source; its children are read as the
// pusher walks them.
type sourceIndex struct {
	s  *source
	m  *Manifest
	im *v1.IndexManifest
}

var _ v1.ImageIndex = (*sourceIndex)(nil)

func (x *sourceIndex) MediaType() (types.MediaType, error)       { return x.m.MediaType, nil }
func (x *sourceIndex) Digest() (v1.Hash, error)                  { return x.m.Digest, nil }
func (x *sourceIndex) Size() (int64, error)                      { return int64(len(x.m.Raw)), nil }
func (x *sourceIndex) IndexManifest() (*v1.IndexManifest, error) { return x.im, nil }
func (x *sourceIndex) RawManifest() ([]byte, error)              { return x.m.Raw, nil }

func (x *sourceIndex) child(h v1.Hash) (remote.Taggable, error) {
	m, err := x.s.c.Get(x.s.ctx, x.s.repo.Digest(h.String()))
	if err != nil {
		return nil, err
	}
	return x.s.entity(m)
}

func (x *sourceIndex) Image(h v1.Hash) (v1.Image, error) {
	t, err := x.child(h)
	if err != nil {
		return nil, err
	}
	img, ok := t.(v1.Image)
	if !ok {
		return nil, fmt.Errorf("%s@%s is not an image", x.s.repo, h)
	}
	return img, nil
}

func (x *sourceIndex) ImageIndex(h v1.Hash) (v1.ImageIndex, error) {
	t, err := x.child(h)
	if err != nil {
		return nil, err
	}
	idx, ok := t.(v1.ImageIndex)
	if !ok {
		return nil, fmt.Errorf("%s@%s is not an index", x.s.repo, h)
	}
	return idx, nil
}

// rawManifest is a manifest pushed as it is, without dependencies.
type rawManifest struct{ m *Manifest }

func (r *rawManifest) RawManifest() ([]byte, error)        { return r.m.Raw, nil }
func (r *rawManifest) MediaType() (types.MediaType, error) { return r.m.MediaType, nil }
func (r *rawManifest) Digest() (v1.Hash, error)            { return r.m.Digest, nil }
func (r *rawManifest) Size() (int64, error)                { return int64(len(r.m.Raw)), nil }

package oci

import (
	"bytes"
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NewArtifact returns an OCI image manifest of one config blob and one
// layer, as a go-containerregistry image ready to push. Its bytes depend
// only on the arguments.
func NewArtifact(configMediaType string, config []byte, layerMediaType string, layer []byte, annotations map[string]string) (v1.Image, error) {
	cfgHash, cfgSize, err := v1.SHA256(bytes.NewReader(config))
	if err != nil {
		return nil, err
	}
	l := static.NewLayer(layer, types.MediaType(layerMediaType))
	lHash, err := l.Digest()
	if err != nil {
		return nil, err
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        v1.Descriptor{MediaType: types.MediaType(configMediaType), Digest: cfgHash, Size: cfgSize},
		Layers:        []v1.Descriptor{{MediaType: types.MediaType(layerMediaType), Digest: lHash, Size: int64(len(layer))}},
		Annotations:   annotations,
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&artifact{manifest: raw, config: config, layer: l, layerHash: lHash})
}

// Package packages dir as an artifact of kind k: its files (see DirFiles)
// in one archive (see Archive), with a small config naming the kind.
func Package(k Kind, dir string) (v1.Image, error) {
	files, err := DirFiles(dir)
	if err != nil {
		return nil, err
	}
	return PackageFiles(k, files, nil, nil)
}

// PackageFiles packages files as an artifact of kind k. A nil config is
// {"type": k.Type}.
func PackageFiles(k Kind, files []File, config []byte, annotations map[string]string) (v1.Image, error) {
	if !hasRegular(files) {
		return nil, fmt.Errorf("package %s: %w", k.Type, errNoFiles)
	}
	layer, err := Archive(files)
	if err != nil {
		return nil, err
	}
	if config == nil {
		config, err = json.Marshal(map[string]string{"type": k.Type})
		if err != nil {
			return nil, err
		}
	}
	return NewArtifact(k.Config, config, k.Layer, layer, annotations)
}

func hasRegular(files []File) bool {
	for _, f := range files {
		if f.Mode.IsRegular() {
			return true
		}
	}
	return false
}

// artifact is the compressed core of an image built in memory.
type artifact struct {
	manifest  []byte
	config    []byte
	layer     v1.Layer
	layerHash v1.Hash
}

var _ partial.CompressedImageCore = (*artifact)(nil)

func (a *artifact) RawConfigFile() ([]byte, error)      { return a.config, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }

func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if h == a.layerHash {
		return a.layer, nil
	}
	cfg, _, err := v1.SHA256(bytes.NewReader(a.config))
	if err != nil {
		return nil, err
	}
	if h == cfg {
		return static.NewLayer(a.config, types.OCIConfigJSON), nil
	}
	return nil, fmt.Errorf("artifact has no blob %s", h)
}

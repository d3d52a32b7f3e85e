package builder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/sigstore/pkg/signature"

	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/schemas"
)

// Target is one component to build and where its content comes from.
type Target struct {
	Component schemas.Component
	// Source is the component's directory (terraform, helm, manifests),
	// or for an image component an OCI image layout directory or an image
	// reference (registry/repository@digest or :tag).
	Source string
	// Artifact names the artifact in the release instead of its type's
	// name: the sandbox's artifacts are named after their sandboxes
	// (local, aws-eks), one per sandbox, all terraform modules.
	Artifact string
}

// Options configure Build. Client and Signer are required.
type Options struct {
	// Client reaches the vendor registry (and an image's source registry).
	Client *oci.Client
	// Signer is the vendor's cosign key (see LoadKey).
	Signer signature.SignerVerifier
	// Tag, when set, also tags every artifact with it. A chart is always
	// tagged with its version as well, as helm pull expects.
	Tag string
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Provenance, with BuilderKey, makes every artifact carry a signed
	// SLSA v1 provenance statement (see Attest); its Parameters, Started
	// and Finished are filled in per artifact. Default: none.
	Provenance *Provenance
	// BuilderKey signs the provenance: a key of the root's builders role.
	BuilderKey signature.SignerVerifier
}

// Artifact is one built, pushed and signed artifact.
type Artifact struct {
	Component string `json:"component"`
	Type      string `json:"type"`
	// Name is the artifact's name in the release: module, chart,
	// manifests or image.
	Name       string `json:"name"`
	Repository string `json:"repository"`
	Digest     string `json:"digest"`
	MediaType  string `json:"mediaType"`
	// Tags pushed besides the digest.
	Tags []string `json:"tags,omitempty"`
	// Signature is the tag that holds the artifact's cosign signatures.
	Signature string `json:"signature"`
	// Signed is true when this build wrote a signature, false when one by
	// the same key was there already.
	Signed bool   `json:"signed"`
	Source string `json:"source"`
	// Provenance is the tag that holds the artifact's attestations, when
	// this build wrote its provenance.
	Provenance string `json:"provenance,omitempty"`
}

// Ref is repository@digest.
func (a Artifact) Ref() string { return a.Repository + "@" + a.Digest }

// Build packages every target, pushes it to its component's repository
// by digest and signs it, in order; it stops at the first failure. A
// rebuild of unchanged content pushes nothing new and keeps the existing
// signature.
func Build(ctx context.Context, targets []Target, o Options) ([]Artifact, error) {
	if o.Client == nil || o.Signer == nil {
		return nil, errors.New("build: a registry client and a signing key are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var out []Artifact
	for _, t := range targets {
		b := &build{o: o, t: t, log: o.Logger.With("component", t.Component.Name)}
		b.started = time.Now().UTC()
		for _, step := range []func(context.Context) error{b.resolve, b.pack, b.push, b.sign, b.attest} {
			if err := step(ctx); err != nil {
				return out, fmt.Errorf("build %s: %w", t.Component.Name, err)
			}
		}
		b.log.Info("artifact built", "digest", b.art.Digest, "repository", b.art.Repository, "signed", b.art.Signed)
		out = append(out, b.art)
	}
	return out, nil
}

// build is one target's build; its steps run in order.
type build struct {
	o    Options
	t    Target
	log  *slog.Logger
	repo name.Repository
	// entity is what is pushed: an image, or an index for multi-platform
	// image components.
	entity remote.Taggable
	digest v1.Hash
	art    Artifact
	// started is when the build of this target began, for provenance.
	started time.Time
}

func (b *build) resolve(context.Context) error {
	c := b.t.Component
	repo, err := name.NewRepository(c.Repository)
	if err != nil {
		return fmt.Errorf("repository %q: %w", c.Repository, err)
	}
	b.repo = repo
	b.art = Artifact{Component: c.Name, Type: c.Type, Repository: repo.Name(), Source: b.t.Source}
	if k, ok := oci.KindOf(c.Type); ok {
		b.art.Name = k.Artifact
		if b.t.Artifact != "" {
			b.art.Name = b.t.Artifact
		}
	} else if c.Type == schemas.TypeImage {
		b.art.Name = oci.ImageArtifact
	} else {
		return fmt.Errorf("unknown component type %q", c.Type)
	}
	if b.o.Tag != "" {
		b.art.Tags = append(b.art.Tags, b.o.Tag)
	}
	return nil
}

// pack makes the artifact from its source.
func (b *build) pack(ctx context.Context) error {
	var img v1.Image
	var err error
	switch b.t.Component.Type {
	case schemas.TypeTerraform:
		img, err = oci.Package(oci.Terraform, b.t.Source)
	case schemas.TypeManifests:
		img, err = oci.Package(oci.Manifests, b.t.Source)
	case schemas.TypeHelm:
		var ch *Chart
		if ch, err = PackageChart(b.t.Source); err == nil {
			img = ch.Image
			if base := b.repo.RepositoryStr(); filepath.Base(base) != ch.Metadata.Name {
				b.log.Warn("the chart's name differs from its repository's last element; helm pull will name it by the chart", "chart", ch.Metadata.Name, "repository", base)
			}
			if tag := ChartTag(ch.Metadata.Version); !slices.Contains(b.art.Tags, tag) {
				b.art.Tags = append(b.art.Tags, tag)
			}
		}
	case schemas.TypeImage:
		return b.packImage(ctx)
	}
	if err != nil {
		return err
	}
	b.entity = img
	d, err := img.Digest()
	if err != nil {
		return err
	}
	b.digest = d
	b.art.Digest, b.art.MediaType = d.String(), oci.ManifestMediaType
	return nil
}

// packImage takes an image component's image, unchanged, from an OCI
// image layout directory or a registry.
func (b *build) packImage(ctx context.Context) error {
	src := b.t.Source
	if info, err := os.Stat(filepath.Join(src, "oci-layout")); err == nil && info.Mode().IsRegular() {
		idx, err := layout.ImageIndexFromPath(src)
		if err != nil {
			return fmt.Errorf("image layout %s: %w", src, err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return err
		}
		if len(im.Manifests) != 1 {
			return fmt.Errorf("image layout %s holds %d manifests; want one", src, len(im.Manifests))
		}
		desc := im.Manifests[0]
		switch {
		case desc.MediaType.IsIndex():
			b.entity, err = idx.ImageIndex(desc.Digest)
		case desc.MediaType.IsImage():
			b.entity, err = idx.Image(desc.Digest)
		default:
			err = fmt.Errorf("image layout %s: %s is not an image", src, desc.MediaType)
		}
		if err != nil {
			return err
		}
		b.digest, b.art.Digest, b.art.MediaType = desc.Digest, desc.Digest.String(), string(desc.MediaType)
		return nil
	}
	ref, err := name.ParseReference(src)
	if err != nil {
		return fmt.Errorf("image source %q is neither an OCI layout directory nor a reference: %w", src, err)
	}
	m, err := b.o.Client.Get(ctx, ref)
	if err != nil {
		return fmt.Errorf("image %s: %w", src, err)
	}
	if b.entity, err = b.o.Client.Entity(ctx, m, nil); err != nil {
		return err
	}
	b.digest, b.art.Digest, b.art.MediaType = m.Digest, m.Digest.String(), string(m.MediaType)
	return nil
}

// push writes the artifact by digest, then its tags.
func (b *build) push(ctx context.Context) error {
	p, err := b.o.Client.NewPusher(ctx, b.repo)
	if err != nil {
		return err
	}
	if err := p.Push(ctx, b.repo.Digest(b.art.Digest), b.entity); err != nil {
		return fmt.Errorf("push %s: %w", b.repo.Digest(b.art.Digest), err)
	}
	sort.Strings(b.art.Tags)
	for _, tag := range b.art.Tags {
		if err := p.Push(ctx, b.repo.Tag(tag), b.entity); err != nil {
			return fmt.Errorf("push %s: %w", b.repo.Tag(tag), err)
		}
	}
	return nil
}

// attest writes the artifact's provenance, signed by the builder key,
// when the build was asked to.
func (b *build) attest(ctx context.Context) error {
	if b.o.Provenance == nil || b.o.BuilderKey == nil {
		return nil
	}
	p := *b.o.Provenance
	p.Started, p.Finished = b.started, time.Now().UTC()
	st, err := p.Statement(b.art)
	if err != nil {
		return err
	}
	env, err := Envelope(st, b.o.BuilderKey)
	if err != nil {
		return err
	}
	if err := Attest(ctx, b.o.Client, b.repo.Digest(b.art.Digest), env); err != nil {
		return err
	}
	b.art.Provenance = strings.TrimSuffix(oci.SignatureTag(b.repo, b.digest).String(), ".sig") + ".att"
	return nil
}

func (b *build) sign(ctx context.Context) error {
	signed, err := Sign(ctx, b.o.Client, b.repo.Digest(b.art.Digest), b.o.Signer)
	if err != nil {
		return err
	}
	b.art.Signed = signed
	b.art.Signature = oci.SignatureTag(b.repo, b.digest).String()
	return nil
}

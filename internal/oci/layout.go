package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// ErrNotLayout reports a directory that is not an OCI image layout.
var ErrNotLayout = errors.New("not an OCI image layout")

// Layout gives plugins their artifacts from an OCI image layout on local
// disk (the image-spec's image-layout: an oci-layout file, index.json and
// blobs/<algorithm>/<hex>), for development and air-gapped tests where no
// install registry runs. `crane pull --format=oci`, `skopeo copy … oci:DIR`
// and `oras copy --to-oci-layout` write such a directory, and
// go-containerregistry's layout package does in tests.
//
// It checks what it reads exactly as Source checks what it reads from a
// registry: the artifact is found by the digest of its Local reference
// (which must equal its Digest), its manifest must hash to that digest,
// and its content layer is extracted by Extract, which verifies the
// layer's size and digest before anything appears in the target
// directory. So a layout can hold many versions of many artifacts, and a
// blob changed on disk is refused (ErrDigestMismatch) rather than
// deployed. Like Source it does not check cosign signatures: the agent's
// sync does that before a job starts, over the same digests.
type Layout struct {
	// Path is the layout's root directory.
	Path string
}

var _ reconciler.ArtifactSource = Layout{}

// Extract implements reconciler.ArtifactSource.
func (l Layout) Extract(ctx context.Context, a schemas.Artifact, dir string) error {
	ref, err := localRef(a)
	if err != nil {
		return err
	}
	root, err := openLayout(l.Path)
	if err != nil {
		return fmt.Errorf("artifact %s: %w", a.Name, err)
	}
	defer root.Close()
	m, err := layoutManifest(root, ref)
	if err != nil {
		return fmt.Errorf("artifact %s: %w", a.Name, err)
	}
	layer, strip, err := contentLayer(m)
	if err != nil {
		return fmt.Errorf("artifact %s: %w", a.Name, err)
	}
	f, err := root.Open(blobPath(layer.Digest))
	if err != nil {
		return fmt.Errorf("artifact %s: layer %s: %w", a.Name, layer.Digest, err)
	}
	defer f.Close()
	if err := Extract(ctx, f, layer, dir, ExtractOptions{Strip: strip}); err != nil {
		return fmt.Errorf("artifact %s: %w", a.Name, err)
	}
	return nil
}

// localRef parses a's Local reference and checks that it names a's
// Digest.
func localRef(a schemas.Artifact) (name.Digest, error) {
	ref, err := name.NewDigest(a.Local)
	if err != nil {
		return ref, fmt.Errorf("artifact %s: local reference %q: %w", a.Name, a.Local, err)
	}
	if a.Digest != "" && ref.DigestStr() != a.Digest {
		return ref, fmt.Errorf("artifact %s: %w: reference %s does not name digest %s", a.Name, ErrDigestMismatch, a.Local, a.Digest)
	}
	return ref, nil
}

// openLayout opens path and checks that it is an OCI image layout.
func openLayout(path string) (*os.Root, error) {
	root, err := os.OpenRoot(path)
	if err != nil {
		return nil, err
	}
	data, err := root.ReadFile("oci-layout")
	var marker struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err == nil {
		err = json.Unmarshal(data, &marker)
	}
	if err != nil || marker.Version == "" {
		root.Close()
		return nil, fmt.Errorf("%s: %w (no valid oci-layout file: %v)", path, ErrNotLayout, err)
	}
	return root, nil
}

// layoutManifest reads the manifest ref names from the layout's blobs and
// checks that it hashes to ref's digest.
func layoutManifest(root *os.Root, ref name.Digest) (*Manifest, error) {
	h, err := v1.NewHash(ref.DigestStr())
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", ref, err)
	}
	f, err := root.Open(blobPath(h))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("manifest %s: not in the layout", h)
	}
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", h, err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", h, err)
	}
	if len(raw) > maxManifestSize {
		return nil, fmt.Errorf("manifest %s is larger than %d bytes", h, maxManifestSize)
	}
	got, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	if got != h {
		return nil, fmt.Errorf("%w: manifest %s hashes to %s", ErrDigestMismatch, h, got)
	}
	return &Manifest{Ref: ref, Raw: raw, MediaType: peekMediaType(raw), Digest: h}, nil
}

// blobPath is where a layout keeps the blob with digest h. NewHash has
// checked that h's algorithm and hex hold no path separators.
func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

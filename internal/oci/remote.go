package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// manifestAccept is every manifest media type, sent on every manifest
// request: registries answer 404 for a manifest whose type the client did
// not accept.
var manifestAccept = strings.Join([]string{
	string(types.OCIManifestSchema1),
	string(types.OCIImageIndex),
	string(types.DockerManifestSchema2),
	string(types.DockerManifestList),
	string(types.DockerManifestSchema1Signed),
	string(types.DockerManifestSchema1),
}, ",")

// maxManifestSize bounds a manifest read, as registries bound what they
// accept (Distribution: 4 MiB).
const maxManifestSize = 4 << 20

// Manifest is a manifest read by digest.
type Manifest struct {
	Ref       name.Digest
	Raw       []byte
	MediaType types.MediaType
	Digest    v1.Hash
}

// Descriptor describes the manifest.
func (m *Manifest) Descriptor() v1.Descriptor {
	return v1.Descriptor{MediaType: m.MediaType, Digest: m.Digest, Size: int64(len(m.Raw))}
}

// Get reads the manifest ref names. A manifest that does not hash to
// ref's digest is ErrDigestMismatch. A registry's error answer is a
// *transport.Error (StatusCode 404: no such manifest).
func (c *Client) Get(ctx context.Context, ref name.Reference) (*Manifest, error) {
	resp, err := c.do(ctx, ref.Context(), false, http.MethodGet, "manifests/"+ref.Identifier(), manifestAccept)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", ref, err)
	}
	if len(raw) > maxManifestSize {
		return nil, fmt.Errorf("manifest %s is larger than %d bytes", ref, maxManifestSize)
	}
	d, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	if want, ok := ref.(name.Digest); ok && want.DigestStr() != d.String() {
		return nil, fmt.Errorf("%w: manifest %s hashes to %s", ErrDigestMismatch, ref, d)
	}
	mt := types.MediaType(resp.Header.Get("Content-Type"))
	if i := strings.IndexByte(string(mt), ';'); i >= 0 {
		mt = mt[:i]
	}
	if peeked := peekMediaType(raw); peeked != "" {
		mt = peeked
	}
	return &Manifest{Ref: ref.Context().Digest(d.String()), Raw: raw, MediaType: mt, Digest: d}, nil
}

// peekMediaType returns the mediaType a manifest states about itself.
func peekMediaType(raw []byte) types.MediaType {
	var m struct {
		MediaType types.MediaType `json:"mediaType"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return ""
	}
	return m.MediaType
}

// Head reports whether repo has the manifest with digest d: one request.
func (c *Client) Head(ctx context.Context, ref name.Digest, push bool) (bool, error) {
	resp, err := c.do(ctx, ref.Context(), push, http.MethodHead, "manifests/"+ref.DigestStr(), manifestAccept)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return false, nil
	}
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		return false, err
	}
	if got := resp.Header.Get("Docker-Content-Digest"); got != "" && got != ref.DigestStr() {
		return false, fmt.Errorf("%w: %s answered for %s", ErrDigestMismatch, got, ref)
	}
	return true, nil
}

// Blob opens the blob desc describes in repo. The reader verifies size
// and digest: at the end it returns ErrDigestMismatch rather than io.EOF
// unless both match.
func (c *Client) Blob(ctx context.Context, repo name.Repository, desc v1.Descriptor) (io.ReadCloser, error) {
	resp, err := c.do(ctx, repo, false, http.MethodGet, "blobs/"+desc.Digest.String(), "")
	if err != nil {
		return nil, err
	}
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		resp.Body.Close()
		return nil, err
	}
	if n, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64); err == nil && desc.Size >= 0 && n != desc.Size {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: blob %s has %d bytes, not %d", ErrDigestMismatch, desc.Digest, n, desc.Size)
	}
	return &verifyingBody{verifier: verifier{r: io.LimitReader(resp.Body, desc.Size+1), h: sha256.New(), want: desc.Digest, size: desc.Size}, c: resp.Body}, nil
}

type verifyingBody struct {
	verifier
	c io.Closer
}

func (b *verifyingBody) Close() error { return b.c.Close() }

// do sends one request to repo's API path (under /v2/<repo>/).
func (c *Client) do(ctx context.Context, repo name.Repository, push bool, method, p, accept string) (*http.Response, error) {
	t, err := c.transport(ctx, repo, push)
	if err != nil {
		return nil, err
	}
	u := url.URL{Scheme: repo.Scheme(), Host: repo.RegistryStr(), Path: "/v2/" + repo.RepositoryStr() + "/" + p}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	return (&http.Client{Transport: t}).Do(req)
}

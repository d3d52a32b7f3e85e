package oci

import (
	"bytes"
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/options"
)

// Cosign's signature format, as `cosign sign --key` stores it in a
// registry without the referrers API: an image manifest tagged
// sha256-<hex>.sig in the artifact's repository, one layer per signature
// holding a simple-signing payload, the signature in an annotation.
const (
	SimpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	SignatureAnnotation    = "dev.cosignproject.cosign/signature"
	// CosignSignatureType is the payload's critical.type.
	CosignSignatureType = "cosign container image signature"
)

// Reasons a signature check fails. All are final: the same registry
// content fails the same way.
var (
	// ErrUnsigned means the artifact has no cosign signature.
	ErrUnsigned = errors.New("artifact is not signed")
	// ErrBadSignature means no signature of the artifact verifies with
	// the key: it was signed by another key, or tampered with.
	ErrBadSignature = errors.New("no signature verifies with the vendor key")
)

// Limits on what a signature manifest may make a verifier read.
const (
	maxSignatures  = 64
	maxPayloadSize = 64 << 10
)

// SignatureTag is the tag under which cosign stores the signatures of the
// artifact with digest d in repo.
func SignatureTag(repo name.Repository, d v1.Hash) name.Tag {
	return repo.Tag(d.Algorithm + "-" + d.Hex + ".sig")
}

// LoadPublicKey reads a PEM public key, as `cosign generate-key-pair`
// writes cosign.pub, into a verifier with cosign's hash (SHA-256).
func LoadPublicKey(file string) (signature.Verifier, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	v, err := ParsePublicKey(b)
	if err != nil {
		return nil, fmt.Errorf("public key %s: %w", file, err)
	}
	return v, nil
}

// ParsePublicKey parses a PEM public key into a verifier, with the
// options cosign loads keys with: SHA-256, and Ed25519ph for Ed25519 keys.
func ParsePublicKey(pem []byte) (signature.Verifier, error) {
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(pem)
	if err != nil {
		return nil, err
	}
	return signature.LoadVerifierWithOpts(pub, options.WithHash(crypto.SHA256), options.WithED25519ph())
}

// SimpleSigning is the payload cosign signs.
type SimpleSigning struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional map[string]any `json:"optional"`
}

// Signatures is the signature manifest of an artifact.
type Signatures struct {
	Ref      name.Tag
	Manifest *v1.Manifest
	// Raw is the manifest as the registry holds it, to copy it verbatim.
	Raw *Manifest
}

// Signatures reads the signature manifest of the artifact d in repo. An
// artifact without one is ErrUnsigned.
func (c *Client) Signatures(ctx context.Context, repo name.Repository, d v1.Hash) (*Signatures, error) {
	tag := SignatureTag(repo, d)
	raw, err := c.Get(ctx, tag)
	var terr *transport.Error
	if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
		return nil, fmt.Errorf("%w: %s has no %s", ErrUnsigned, repo.Digest(d.String()), tag.TagStr())
	}
	if err != nil {
		return nil, fmt.Errorf("signatures of %s: %w", d, err)
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw.Raw))
	if err != nil {
		return nil, fmt.Errorf("%w: signature manifest %s: %v", ErrBadSignature, tag, err)
	}
	return &Signatures{Ref: tag, Manifest: m, Raw: raw}, nil
}

// VerifySignature checks that the artifact d in repo carries a cosign
// signature by v: Signatures, then Verify.
func (c *Client) VerifySignature(ctx context.Context, repo name.Repository, d v1.Hash, v signature.Verifier) (*Signatures, error) {
	sigs, err := c.Signatures(ctx, repo, d)
	if err != nil {
		return nil, err
	}
	if err := sigs.Verify(ctx, c, repo, d, v); err != nil {
		return nil, err
	}
	return sigs, nil
}

// Verify checks that at least one signature layer verifies with v and
// claims digest d, reading the payload blobs from repo through c. A
// signature by the key over another digest is ErrDigestMismatch.
func (s *Signatures) Verify(ctx context.Context, c *Client, repo name.Repository, d v1.Hash, v signature.Verifier) error {
	layers := s.Manifest.Layers
	if len(layers) == 0 {
		return fmt.Errorf("%w: %s holds no signature", ErrUnsigned, s.Ref)
	}
	if len(layers) > maxSignatures {
		layers = layers[:maxSignatures]
	}
	var problems []string
	claimedOther := false
	for _, l := range layers {
		sig, ok := l.Annotations[SignatureAnnotation]
		if l.MediaType != SimpleSigningMediaType || !ok {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(sig)
		if err != nil {
			problems = append(problems, "signature is not base64")
			continue
		}
		if l.Size > maxPayloadSize || l.Size < 0 {
			problems = append(problems, fmt.Sprintf("payload of %d bytes", l.Size))
			continue
		}
		payload, err := c.readBlob(ctx, repo, l)
		if err != nil {
			return err
		}
		if err := v.VerifySignature(bytes.NewReader(raw), bytes.NewReader(payload)); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		claim, err := CheckPayload(payload, d)
		if errors.Is(err, ErrDigestMismatch) {
			claimedOther = true
			problems = append(problems, fmt.Sprintf("signed payload names %s", claim))
			continue
		}
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		return nil
	}
	if claimedOther {
		return fmt.Errorf("%w: the vendor key signed %s for another artifact (%s)", ErrDigestMismatch, s.Ref.TagStr(), strings.Join(problems, "; "))
	}
	if len(problems) == 0 {
		return fmt.Errorf("%w: %s holds no cosign signature layer", ErrUnsigned, s.Ref)
	}
	return fmt.Errorf("%w: %s", ErrBadSignature, strings.Join(problems, "; "))
}

// CheckPayload parses a simple-signing payload and checks that it is a
// cosign signature of digest d. It returns the digest the payload names.
func CheckPayload(payload []byte, d v1.Hash) (string, error) {
	var ss SimpleSigning
	if err := json.Unmarshal(payload, &ss); err != nil {
		return "", fmt.Errorf("payload: %w", err)
	}
	if ss.Critical.Type != CosignSignatureType {
		return "", fmt.Errorf("payload type %q is not %q", ss.Critical.Type, CosignSignatureType)
	}
	got := ss.Critical.Image.DockerManifestDigest
	if got != d.String() {
		return got, fmt.Errorf("%w: payload names %s, not %s", ErrDigestMismatch, got, d)
	}
	return got, nil
}

// readBlob reads a small blob of repo, verifying its size and digest.
func (c *Client) readBlob(ctx context.Context, repo name.Repository, desc v1.Descriptor) ([]byte, error) {
	rc, err := c.Blob(ctx, repo, desc)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", desc.Digest, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", desc.Digest, err)
	}
	return b, nil
}

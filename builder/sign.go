package builder

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/cosign/v2/pkg/oci/mutate"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"
	"github.com/sigstore/cosign/v2/pkg/oci/static"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"

	"nuon.dev/nuon/internal/oci"
)

// LoadKey reads a cosign private key file, as `cosign generate-key-pair`
// writes cosign.key, decrypting it with password (COSIGN_PASSWORD).
func LoadKey(file string, password []byte) (signature.SignerVerifier, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	sv, err := cosign.LoadPrivateKey(b, password, nil)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", file, err)
	}
	return sv, nil
}

// Sign signs the artifact ref in cosign's format, offline (no
// transparency log, no certificate), and stores the signature under the
// artifact's sha256-<hex>.sig tag as `cosign sign --key` does, so that
// `cosign verify --key --insecure-ignore-tlog` accepts it. When a
// signature by the same key is there already it writes nothing and
// returns false.
func Sign(ctx context.Context, c *oci.Client, ref name.Digest, sv signature.SignerVerifier) (bool, error) {
	d, err := v1.NewHash(ref.DigestStr())
	if err != nil {
		return false, err
	}
	_, err = c.VerifySignature(ctx, ref.Context(), d, sv)
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, oci.ErrUnsigned), errors.Is(err, oci.ErrBadSignature), errors.Is(err, oci.ErrDigestMismatch):
	default:
		return false, fmt.Errorf("sign %s: %w", ref, err)
	}
	pl, err := payload.Cosign{Image: ref}.MarshalJSON()
	if err != nil {
		return false, err
	}
	raw, err := sv.SignMessage(bytes.NewReader(pl))
	if err != nil {
		return false, fmt.Errorf("sign %s: %w", ref, err)
	}
	sig, err := static.NewSignature(pl, base64.StdEncoding.EncodeToString(raw))
	if err != nil {
		return false, err
	}
	ro, err := c.Remote(ctx, ref.Context(), true)
	if err != nil {
		return false, err
	}
	opts := ociremote.WithRemoteOptions(ro...)
	se, err := ociremote.SignedEntity(ref, opts)
	if err != nil {
		return false, fmt.Errorf("sign %s: %w", ref, err)
	}
	se, err = mutate.AttachSignatureToEntity(se, sig)
	if err != nil {
		return false, err
	}
	if err := ociremote.WriteSignatures(ref.Context(), se, opts); err != nil {
		return false, fmt.Errorf("sign %s: write signature: %w", ref, err)
	}
	return true, nil
}

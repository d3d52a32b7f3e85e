package oci_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"

	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/oci/ocitest"
	"nuon.dev/nuon/schemas"
)

var module = map[string]string{
	"main.tf":          "resource \"terraform_data\" \"x\" {}\n",
	"outputs.tf":       "output \"id\" { value = terraform_data.x.id }\n",
	"files/config.txt": "hello\n",
}

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		got[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// push packages files as a module and pushes it to repo by digest.
func push(t *testing.T, c *oci.Client, repo name.Repository, files map[string]string) name.Digest {
	t.Helper()
	dir := t.TempDir()
	writeTree(t, dir, files)
	img, err := oci.Package(oci.Terraform, dir)
	if err != nil {
		t.Fatal(err)
	}
	return pushImage(t, c, repo, img)
}

func pushImage(t *testing.T, c *oci.Client, repo name.Repository, img v1.Image) name.Digest {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ref := repo.Digest(d.String())
	p, err := c.NewPusher(context.Background(), repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Push(context.Background(), ref, img); err != nil {
		t.Fatal(err)
	}
	return ref
}

func TestSourceFromDistribution(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{TLS: true, Username: "AWS", Password: "s3cret"})
	c, err := oci.NewClient(reg.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	repo, _ := name.NewRepository(reg.Host + "/nuon-acme/shop/network")
	ref := push(t, c, repo, module)
	_ = reg.Requests(t)

	ctx := context.Background()
	ok, err := c.Head(ctx, ref, false)
	if err != nil || !ok {
		t.Fatalf("head: %v %v", ok, err)
	}
	if got := reg.Requests(t); len(got) != 1 {
		t.Errorf("checking a present manifest took %d requests: %v", len(got), got)
	}
	missing := repo.Digest("sha256:" + strings.Repeat("0", 64))
	if ok, err := c.Head(ctx, missing, false); err != nil || ok {
		t.Errorf("head of a missing manifest: %v %v", ok, err)
	}

	dir := filepath.Join(t.TempDir(), "module")
	src := &oci.Source{Client: c}
	a := schemas.Artifact{Name: "module", Local: ref.String(), Digest: ref.DigestStr()}
	if err := src.Extract(ctx, a, dir); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(module, readTree(t, dir)); diff != "" {
		t.Errorf("extracted (-want +got):\n%s", diff)
	}

	a.Digest = "sha256:" + strings.Repeat("1", 64)
	if err := src.Extract(ctx, a, dir); !errors.Is(err, oci.ErrDigestMismatch) {
		t.Errorf("an artifact whose reference names another digest: %v", err)
	}
}

func TestWrongCredentials(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{TLS: true, Username: "AWS", Password: "s3cret"})
	c, err := oci.NewClient(append(reg.ClientOptions(), oci.WithAuth(reg.Host, nil))...)
	if err != nil {
		t.Fatal(err)
	}
	repo, _ := name.NewRepository(reg.Host + "/x")
	if _, err := c.Head(context.Background(), repo.Digest("sha256:"+strings.Repeat("0", 64)), false); err == nil || !strings.Contains(err.Error(), "401") && !strings.Contains(err.Error(), "UNAUTHORIZED") {
		t.Errorf("anonymous head: %v", err)
	}
}

// tamper serves the in-process registry through a proxy that flips the
// last byte of every response body whose path contains part.
func tamper(t *testing.T, part string) string {
	host := ocitest.InProcess(t)
	u, _ := url.Parse("http://" + host)
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ModifyResponse = func(r *http.Response) error {
		if r.Request.Method != http.MethodGet || !strings.Contains(r.Request.URL.Path, part) || r.StatusCode != http.StatusOK {
			return nil
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		b[len(b)-1] ^= 1
		r.Body = io.NopCloser(bytes.NewReader(b))
		return nil
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestTamperedRegistry(t *testing.T) {
	ctx := context.Background()
	for _, part := range []string{"/manifests/", "/blobs/"} {
		t.Run(part, func(t *testing.T) {
			host := tamper(t, part)
			c, err := oci.NewClient(oci.WithKeychain(nil))
			if err != nil {
				t.Fatal(err)
			}
			repo, _ := name.NewRepository(host + "/shop/network")
			// Pushing goes through the proxy too but never GETs.
			ref := push(t, c, repo, module)
			dir := filepath.Join(t.TempDir(), "module")
			err = (&oci.Source{Client: c}).Extract(ctx, schemas.Artifact{Name: "module", Local: ref.String()}, dir)
			if !errors.Is(err, oci.ErrDigestMismatch) {
				t.Fatalf("got %v, want ErrDigestMismatch", err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("tampered content was extracted: %v", entries)
			}
		})
	}
}

// sign attaches signatures in cosign's format, one per signer, each over
// a payload naming digest claim, to the artifact ref.
func sign(t *testing.T, c *oci.Client, ref name.Digest, claim name.Digest, signers ...signature.Signer) {
	t.Helper()
	pl, err := (&payload.Cosign{Image: claim}).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	for _, sv := range signers {
		sig, err := sv.SignMessage(bytes.NewReader(pl))
		if err != nil {
			t.Fatal(err)
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:       static.NewLayer(pl, oci.SimpleSigningMediaType),
			Annotations: map[string]string{oci.SignatureAnnotation: base64.StdEncoding.EncodeToString(sig)},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	d, _ := v1.NewHash(ref.DigestStr())
	p, err := c.NewPusher(context.Background(), ref.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Push(context.Background(), oci.SignatureTag(ref.Context(), d), img); err != nil {
		t.Fatal(err)
	}
}

func newKey(t *testing.T) (signature.SignerVerifier, []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sv, err := signature.LoadECDSASignerVerifier(k, crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := cryptoutils.MarshalPublicKeyToPEM(k.Public())
	if err != nil {
		t.Fatal(err)
	}
	return sv, pem
}

func TestVerifySignature(t *testing.T) {
	ctx := context.Background()
	host := ocitest.InProcess(t)
	c, err := oci.NewClient(oci.WithKeychain(nil))
	if err != nil {
		t.Fatal(err)
	}
	vendor, vendorPub := newKey(t)
	other, _ := newKey(t)
	verifier, err := oci.ParsePublicKey(vendorPub)
	if err != nil {
		t.Fatal(err)
	}
	repo, _ := name.NewRepository(host + "/shop/network")
	signed := push(t, c, repo, module)
	sign(t, c, signed, signed, vendor)
	unsigned := push(t, c, repo, map[string]string{"main.tf": "# unsigned\n"})
	wrongKey := push(t, c, repo, map[string]string{"main.tf": "# wrong key\n"})
	sign(t, c, wrongKey, wrongKey, other)
	borrowed := push(t, c, repo, map[string]string{"main.tf": "# borrowed signature\n"})
	sign(t, c, borrowed, signed, vendor)
	both := push(t, c, repo, map[string]string{"main.tf": "# two signatures\n"})
	sign(t, c, both, both, other, vendor)

	for _, tc := range []struct {
		name string
		ref  name.Digest
		want error
	}{
		{"signed", signed, nil},
		{"unsigned", unsigned, oci.ErrUnsigned},
		{"wrong key", wrongKey, oci.ErrBadSignature},
		{"signature of another artifact", borrowed, oci.ErrDigestMismatch},
		{"one of two signatures by the vendor", both, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := v1.NewHash(tc.ref.DigestStr())
			_, err := c.VerifySignature(ctx, repo, d, verifier)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

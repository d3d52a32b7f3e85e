package builder_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"
	"github.com/sigstore/sigstore/pkg/signature"
	"helm.sh/helm/v3/pkg/chart/loader"
	helmregistry "helm.sh/helm/v3/pkg/registry"

	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/oci/ocitest"
	"nuon.dev/nuon/schemas"
)

const (
	fixtures   = "../fixtures"
	fixtureApp = "../fixtures/tenant/nuon.yaml"
)

// vendor is a vendor registry and key for a test.
type vendor struct {
	host   string
	client *oci.Client
	key    signature.SignerVerifier
	pub    []byte
	app    schemas.App
}

// newVendor serves a registry at host (in-process when empty) and loads
// the sample app with its repositories moved there.
func newVendor(t *testing.T, host string, opts ...oci.ClientOption) *vendor {
	t.Helper()
	if host == "" {
		host = ocitest.InProcess(t)
		opts = append(opts, oci.WithKeychain(nil))
	}
	c, err := oci.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	key, pub := newKey(t)
	app, err := builder.LoadApp(fixtureApp)
	if err != nil {
		t.Fatal(err)
	}
	app.Components = slices.Clone(app.Components)
	for i, comp := range app.Components {
		app.Components[i].Repository = host + strings.TrimPrefix(comp.Repository, "registry.vendor.example")
	}
	return &vendor{host: host, client: c, key: key, pub: pub, app: app}
}

var (
	keysMu sync.Mutex
	keys   = map[string]keyPair{}
)

type keyPair struct {
	sv  signature.SignerVerifier
	pub []byte
}

// newKey returns the cosign key pair of that name, made (once per test
// binary: key derivation is slow under the race detector) as `cosign
// generate-key-pair` makes one and loaded as LoadKey loads it.
func newKey(t *testing.T, names ...string) (signature.SignerVerifier, []byte) {
	t.Helper()
	n := "vendor"
	if len(names) > 0 {
		n = names[0]
	}
	keysMu.Lock()
	defer keysMu.Unlock()
	if k, ok := keys[n]; ok {
		return k.sv, k.pub
	}
	kb, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return []byte("pw"), nil })
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "cosign.key")
	if err := os.WriteFile(file, kb.PrivateBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	sv, err := builder.LoadKey(file, []byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	keys[n] = keyPair{sv, kb.PublicBytes}
	return sv, kb.PublicBytes
}

func (v *vendor) build(t *testing.T, root string, names ...string) []builder.Artifact {
	t.Helper()
	targets, err := builder.Targets(v.app, root, nil, names)
	if err != nil {
		t.Fatal(err)
	}
	arts, err := builder.Build(context.Background(), targets, builder.Options{Client: v.client, Signer: v.key})
	if err != nil {
		t.Fatal(err)
	}
	return arts
}

func digests(arts []builder.Artifact) map[string]string {
	out := map[string]string{}
	for _, a := range arts {
		out[a.Component] = a.Digest
	}
	return out
}

// copyTree copies src to dst with other times and permission bits, as
// another checkout on another machine would have them.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	when := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			return err
		}
		return os.Chtimes(to, when, when)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestBuildIsReproducible(t *testing.T) {
	v := newVendor(t, "")
	first := v.build(t, fixtures)
	if len(first) != 5 {
		t.Fatalf("built %d artifacts, want 5", len(first))
	}
	for _, a := range first {
		if !a.Signed {
			t.Errorf("%s: the first build did not sign", a.Component)
		}
	}
	second := v.build(t, fixtures)
	for _, a := range second {
		if a.Signed {
			t.Errorf("%s: a rebuild signed again instead of keeping the signature", a.Component)
		}
	}
	if d1, d2 := digests(first), digests(second); !equalMaps(d1, d2) {
		t.Fatalf("two builds, two digests:\n%v\n%v", d1, d2)
	}
	// Another checkout, another registry, another key: same digests.
	other := t.TempDir()
	for _, dir := range []string{"modules", "charts", "manifests", "images"} {
		copyTree(t, filepath.Join(fixtures, dir), filepath.Join(other, dir))
	}
	w := newVendor(t, "")
	if d1, d3 := digests(first), digests(w.build(t, other)); !equalMaps(d1, d3) {
		t.Fatalf("a copy of the sources built to other digests:\n%v\n%v", d1, d3)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestCosignVerifies checks the signatures with cosign's own verification,
// as `cosign verify --key cosign.pub --insecure-ignore-tlog` runs it.
func TestCosignVerifies(t *testing.T) {
	v := newVendor(t, "")
	ctx := context.Background()
	for _, a := range v.build(t, fixtures) {
		t.Run(a.Component, func(t *testing.T) {
			ref, err := name.NewDigest(a.Ref())
			if err != nil {
				t.Fatal(err)
			}
			verifier, err := oci.ParsePublicKey(v.pub)
			if err != nil {
				t.Fatal(err)
			}
			ro, err := v.client.Remote(ctx, ref.Context(), false)
			if err != nil {
				t.Fatal(err)
			}
			sigs, _, err := cosign.VerifyImageSignatures(ctx, ref, &cosign.CheckOpts{
				RegistryClientOpts: []ociremote.Option{ociremote.WithRemoteOptions(ro...)},
				SigVerifier:        verifier,
				IgnoreTlog:         true,
				IgnoreSCT:          true,
				ClaimVerifier:      cosign.SimpleClaimVerifier,
			})
			if err != nil {
				t.Fatalf("cosign refuses the signature: %v", err)
			}
			if len(sigs) != 1 {
				t.Errorf("%d signatures, want 1", len(sigs))
			}
			_, otherPub := newKey(t, "other")
			otherVerifier, _ := oci.ParsePublicKey(otherPub)
			if _, _, err := cosign.VerifyImageSignatures(ctx, ref, &cosign.CheckOpts{
				RegistryClientOpts: []ociremote.Option{ociremote.WithRemoteOptions(ro...)},
				SigVerifier:        otherVerifier,
				IgnoreTlog:         true,
				IgnoreSCT:          true,
				ClaimVerifier:      cosign.SimpleClaimVerifier,
			}); err == nil {
				t.Error("cosign accepts the signature with another key")
			}
		})
	}
}

func TestHelmMediaTypes(t *testing.T) {
	if oci.HelmConfigMediaType != helmregistry.ConfigMediaType || oci.HelmChartMediaType != helmregistry.ChartLayerMediaType {
		t.Fatalf("oci's Helm media types %s, %s differ from Helm's %s, %s",
			oci.HelmConfigMediaType, oci.HelmChartMediaType, helmregistry.ConfigMediaType, helmregistry.ChartLayerMediaType)
	}
}

// TestHelmPullsChart pulls the built chart from a real registry with
// Helm's own registry client, by tag as `helm pull --version` does and by
// digest, and loads it as `helm install` would.
func TestHelmPullsChart(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	v := newVendor(t, reg.Host, reg.ClientOptions()...)
	arts := v.build(t, fixtures, "api")
	a := arts[0]
	if !slices.Contains(a.Tags, "2.4.0") {
		t.Errorf("chart tags %v lack its version", a.Tags)
	}
	src, err := loader.LoadDir(filepath.Join(fixtures, "charts", "api"))
	if err != nil {
		t.Fatal(err)
	}
	client, err := helmregistry.NewClient(helmregistry.ClientOptPlainHTTP(), helmregistry.ClientOptWriter(&bytes.Buffer{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{a.Repository + ":2.4.0", a.Ref()} {
		res, err := client.Pull(ref)
		if err != nil {
			t.Fatalf("helm pull %s: %v", ref, err)
		}
		if res.Manifest.Digest != a.Digest {
			t.Errorf("helm pulled manifest %s, built %s", res.Manifest.Digest, a.Digest)
		}
		ch, err := loader.LoadArchive(bytes.NewReader(res.Chart.Data))
		if err != nil {
			t.Fatal(err)
		}
		if ch.Name() != "api" || ch.Metadata.Version != "2.4.0" || len(ch.Templates) != len(src.Templates) {
			t.Errorf("pulled chart %s %s with %d templates", ch.Name(), ch.Metadata.Version, len(ch.Templates))
		}
	}
}

func TestImageCopiedByDigest(t *testing.T) {
	v := newVendor(t, "")
	a := v.build(t, fixtures, "api-image")[0]
	// The layout's own digest, unchanged.
	want := "sha256:5d0fa794fae04c69fdb02585c3be238fa1c63d27c596c6ff85dbfe4b96642368"
	if a.Digest != want || a.MediaType != "application/vnd.oci.image.manifest.v1+json" {
		t.Fatalf("image %s %s, want %s", a.Digest, a.MediaType, want)
	}
	// From a registry reference: another vendor copies it by digest.
	w := newVendor(t, "")
	targets, err := builder.Targets(w.app, "", map[string]string{"api-image": a.Ref()}, []string{"api-image"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := oci.NewClient(oci.WithKeychain(nil))
	if err != nil {
		t.Fatal(err)
	}
	arts, err := builder.Build(context.Background(), targets, builder.Options{Client: c, Signer: w.key})
	if err != nil {
		t.Fatal(err)
	}
	if arts[0].Digest != want || arts[0].Repository == a.Repository {
		t.Errorf("copied to %s, want digest %s in another registry", arts[0].Ref(), want)
	}
}

func TestTargets(t *testing.T) {
	app, err := builder.LoadApp(fixtureApp)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := builder.Targets(app, fixtures, map[string]string{"network": "/src/network"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tg := range ts {
		got = append(got, tg.Component.Name+"="+filepath.ToSlash(tg.Source))
	}
	want := []string{
		"network=/src/network",
		"database=../fixtures/modules/database",
		"api-image=../fixtures/images/api-image",
		"api=../fixtures/charts/api",
		"dashboards=../fixtures/manifests/dashboards",
	}
	if !slices.Equal(got, want) {
		t.Errorf("targets %v, want %v", got, want)
	}
	if _, err := builder.Targets(app, fixtures+"/previous", nil, nil); err == nil || !strings.Contains(err.Error(), "network") {
		t.Errorf("a component without a source: %v", err)
	}
	if _, err := builder.Targets(app, fixtures, nil, []string{"nope"}); err == nil {
		t.Error("an unknown component was accepted")
	}
}

package plugin_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/sigstore/pkg/signature"

	agentsync "nuon.dev/nuon/agent/sync"
	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/internal/oci/ocitest"
	"nuon.dev/nuon/plugin"
	"nuon.dev/nuon/plugin/plugintest"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

func syncKey(t testing.TB) (signature.SignerVerifier, signature.Verifier) {
	t.Helper()
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
	v, err := oci.ParsePublicKey(kb.PublicBytes)
	if err != nil {
		t.Fatal(err)
	}
	return sv, v
}

func syncPush(t testing.TB, c *oci.Client, repo name.Repository, img v1.Image) name.Digest {
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

// TestPluginArtifactSynced: a released plugin is an artifact like any
// other to the agent's sync: copied by digest from the vendor registry to
// the install's with its signature, once, then fetched there and run.
func TestPluginArtifactSynced(t *testing.T) {
	if _, err := os.Stat("/usr/bin/perl"); err != nil {
		t.Skip("no perl")
	}
	ctx := context.Background()
	vendorHost, installHost := ocitest.InProcess(t), ocitest.InProcess(t)
	c, err := oci.NewClient(oci.WithKeychain(nil))
	if err != nil {
		t.Fatal(err)
	}
	key, pub := syncKey(t)
	img, _, err := plugin.Package("../fixtures/plugins/zonefile")
	if err != nil {
		t.Fatal(err)
	}
	vendorRepo, _ := name.NewRepository(vendorHost + "/acme/plugins/zonefile")
	src := syncPush(t, c, vendorRepo, img)
	if _, err := builder.Sign(ctx, c, src, key); err != nil {
		t.Fatal(err)
	}
	local, _ := name.NewDigest(installHost + "/nuon-acme/acme/plugins/zonefile@" + src.DigestStr())
	s, err := agentsync.New(agentsync.Config{Client: c, Key: pub})
	if err != nil {
		t.Fatal(err)
	}
	a := schemas.Artifact{Name: "zonefile", Source: src.String(), Local: local.String(), Digest: src.DigestStr()}
	if err := s.Sync(ctx, []schemas.Artifact{a}); err != nil {
		t.Fatal(err)
	}
	f, err := plugin.Fetch(ctx, c, local, pub, filepath.Join(t.TempDir(), "plugin"), "linux/amd64")
	if err != nil {
		t.Fatal(err)
	}
	p := f.Process(f.Manifest.Capabilities)
	p.Runner.Environ = append(os.Environ(), "NUON_ZONE_DIR="+t.TempDir())
	job := &schemas.Job{APIVersion: schemas.APIVersion, Kind: schemas.KindJob, ID: "dns-health-1", Install: "acme",
		Component: "dns", Operation: schemas.OpHealth, Plugin: "zonefile", Version: "0.3.0", Generation: 1,
		Commit: strings.Repeat("a", 40), Inputs: map[string]any{"zone": "acme.internal"}, Timeout: "1m",
		StateDir: t.TempDir(), ResultFile: filepath.Join(t.TempDir(), "result.json")}
	h, err := p.Health(ctx, job, reconciler.Env{StateDir: job.StateDir})
	if err != nil || h.Status != schemas.HealthReady {
		t.Errorf("health of the synced plugin = %+v, %v", h, err)
	}
}

// countingTransport counts the requests that reach host, and the bytes
// they upload.
type countingTransport struct {
	host    string
	mu      sync.Mutex
	uploads int
	sent    int64
	reqs    int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == c.host {
		c.mu.Lock()
		c.reqs++
		if r.Method == http.MethodPut || r.Method == http.MethodPatch || r.Method == http.MethodPost {
			c.uploads++
			if r.ContentLength > 0 {
				c.sent += r.ContentLength
			}
		}
		c.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (c *countingTransport) take() (reqs, uploads int, sent int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	reqs, uploads, sent = c.reqs, c.uploads, c.sent
	c.reqs, c.uploads, c.sent = 0, 0, 0
	return
}

// syncVersions releases two versions of the zonefile plugin with their
// images on a perl base, and syncs each version's artifact and image into
// an install registry, each twice; it returns, per sync, the requests,
// uploads and bytes the install registry saw and the bytes read from the
// vendor's.
func syncVersions(tb testing.TB) [4]struct {
	reqs, uploads int
	sent, read    int64
} {
	tb.Helper()
	ctx := context.Background()
	vendorHost, installHost := ocitest.InProcess(tb), ocitest.InProcess(tb)
	ct := &countingTransport{host: installHost}
	c, err := oci.NewClient(oci.WithKeychain(nil), oci.WithTransport(ct))
	if err != nil {
		tb.Fatal(err)
	}
	key, pub := syncKey(tb)
	base, err := plugintest.HostImageList("../fixtures/plugins/zonefile-base.txt")
	if err != nil {
		tb.Fatal(err)
	}
	vendorRepo, _ := name.NewRepository(vendorHost + "/acme/plugins/zonefile")
	var read atomic.Int64
	s, err := agentsync.New(agentsync.Config{Client: c, Key: pub, Copied: func(n int64) { read.Add(n) }})
	if err != nil {
		tb.Fatal(err)
	}
	var out [4]struct {
		reqs, uploads int
		sent, read    int64
	}
	for v, version := range []string{"0.3.0", "0.3.1"} {
		dir := filepath.Join(tb.TempDir(), "zonefile")
		if err := os.CopyFS(dir, os.DirFS("../fixtures/plugins/zonefile")); err != nil {
			tb.Fatal(err)
		}
		m, _ := os.ReadFile(filepath.Join(dir, plugin.ManifestFile))
		if err := os.WriteFile(filepath.Join(dir, plugin.ManifestFile), []byte(strings.Replace(string(m), "0.3.0", version, 1)), 0o644); err != nil {
			tb.Fatal(err)
		}
		art, _, err := plugin.Package(dir)
		if err != nil {
			tb.Fatal(err)
		}
		ad, _ := art.Digest()
		img, _, err := plugin.PackageImage(dir, base, ad)
		if err != nil {
			tb.Fatal(err)
		}
		var arts []schemas.Artifact
		for _, a := range []struct {
			name string
			i    v1.Image
		}{{schemas.PluginArtifactName, art}, {schemas.PluginImageArtifactName, img}} {
			src := syncPush(tb, c, vendorRepo, a.i)
			if _, err := builder.Sign(ctx, c, src, key); err != nil {
				tb.Fatal(err)
			}
			arts = append(arts, schemas.Artifact{Name: a.name, Source: src.String(),
				Local: installHost + "/nuon-acme/acme/plugins/zonefile@" + src.DigestStr(), Digest: src.DigestStr()})
		}
		ct.take()
		for again := range 2 {
			read.Store(0)
			if err := s.Sync(ctx, arts); err != nil {
				tb.Fatal(err)
			}
			o := &out[2*v+again]
			o.reqs, o.uploads, o.sent = ct.take()
			o.read = read.Load()
		}
		local, _ := name.NewDigest(arts[1].Local)
		if _, err := plugin.FetchImage(ctx, c, local, pub); err != nil {
			tb.Fatalf("the synced image: %v", err)
		}
	}
	return out
}

// TestPluginImageSyncedOncePerVersion: the agent's sync copies a plugin's
// image like any artifact, by digest with its signature, into the install
// registry, where it verifies again; a version synced again costs no
// upload, and a second version uploads its own layer and not the base's.
func TestPluginImageSyncedOncePerVersion(t *testing.T) {
	if _, err := os.Stat("/usr/bin/perl"); err != nil {
		t.Skip("no perl")
	}
	out := syncVersions(t)
	for i, what := range []string{"0.3.0", "0.3.0 again", "0.3.1", "0.3.1 again"} {
		t.Logf("sync of %s: %d requests, %d uploads, %d bytes sent to the install registry, %d read from the vendor's", what, out[i].reqs, out[i].uploads, out[i].sent, out[i].read)
	}
	if out[0].uploads == 0 || out[0].sent < 1<<20 {
		t.Errorf("the first version uploaded %d bytes in %d uploads: not the base", out[0].sent, out[0].uploads)
	}
	for _, again := range []int{1, 3} {
		if out[again].uploads != 0 || out[again].read != 0 {
			t.Errorf("a version synced again uploaded %d times, read %d bytes", out[again].uploads, out[again].read)
		}
	}
	if out[2].sent*10 > out[0].sent {
		t.Errorf("the second version sent %d bytes against the first's %d: the base went again", out[2].sent, out[0].sent)
	}
}

// BenchmarkPluginImageSync reports what syncing a plugin version's
// artifact and image costs the install registry: the first version (with
// the perl base), the same again, a second version.
func BenchmarkPluginImageSync(b *testing.B) {
	if _, err := os.Stat("/usr/bin/perl"); err != nil {
		b.Skip("no perl")
	}
	var out [4]struct {
		reqs, uploads int
		sent, read    int64
	}
	for b.Loop() {
		out = syncVersions(b)
	}
	b.ReportMetric(float64(out[0].sent), "first-B")
	b.ReportMetric(float64(out[0].uploads), "first-uploads")
	b.ReportMetric(float64(out[1].reqs), "again-requests")
	b.ReportMetric(float64(out[1].uploads), "again-uploads")
	b.ReportMetric(float64(out[2].sent), "next-version-B")
	b.ReportMetric(float64(out[2].uploads), "next-version-uploads")
}

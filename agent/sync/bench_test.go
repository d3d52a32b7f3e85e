package sync_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"nuon.dev/nuon/agent/sync"
	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/schemas"
)

// envInt reads a positive integer from the environment.
func envInt(key string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(key)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkSyncVsCrane copies an image of 10 layers of random bytes,
// NUON_BENCH_SYNC_MB in all (default 100; 1024 for the full figure), from
// a vendor registry to an install registry with TLS and basic auth, both
// real Distribution servers on loopback: once with Syncer (which also
// verifies and copies the signature) and once with crane.Copy, in turn,
// NUON_BENCH_SYNC_ROUNDS times per iteration (default 3), each copy into
// a repository of its own so every byte moves. It reports both
// throughputs and their ratio. NUON_BENCH_SYNC_JOBS sets the Syncer's
// blobs in flight (default DefaultJobs; crane copies 4 at once);
// NUON_BENCH_SYNC_HTTP2=1 lets the Syncer use HTTP/2 as crane does.
func BenchmarkSyncVsCrane(b *testing.B) {
	ctx := context.Background()
	mb := envInt("NUON_BENCH_SYNC_MB", 100)
	rounds := envInt("NUON_BENCH_SYNC_ROUNDS", 3)
	w := newWorld(b)
	k := key(b, vendorKey)

	// The image: 10 layers of incompressible bytes.
	size := int64(mb) << 20
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	rng := rand.NewChaCha8([32]byte{42})
	for i := 0; i < 10; i++ {
		layer := make([]byte, size/10)
		rng.Read(layer)
		var err error
		if img, err = mutate.AppendLayers(img, static.NewLayer(layer, types.OCILayer)); err != nil {
			b.Fatal(err)
		}
	}
	d, err := img.Digest()
	if err != nil {
		b.Fatal(err)
	}
	repo, _ := name.NewRepository(w.vendor.Host + "/bench/image")
	p, err := w.client.NewPusher(ctx, repo, remote.WithJobs(10))
	if err != nil {
		b.Fatal(err)
	}
	src := repo.Digest(d.String())
	if err := p.Push(ctx, src, img); err != nil {
		b.Fatal(err)
	}
	if _, err := builder.Sign(ctx, w.client, src, k); err != nil {
		b.Fatal(err)
	}
	img = nil
	if os.Getenv("NUON_BENCH_SYNC_HTTP2") == "1" {
		w.client = w.newClient(b, oci.WithHTTP1(false))
	}
	s := w.syncer(b, func(c *sync.Config) { c.Logger = nil; c.Jobs = envInt("NUON_BENCH_SYNC_JOBS", sync.DefaultJobs) })

	// crane as `crane copy` runs it, trusting the install registry's
	// certificate and using its credentials.
	tr := remote.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: w.install.RootCAs()}
	craneOpts := []crane.Option{crane.WithTransport(tr), crane.WithAuthFromKeychain(staticKeychain{w.install.Host: w.install.Auth()}), crane.WithContext(ctx)}

	var nuonTime, craneTime time.Duration
	copies := 0
	for b.Loop() {
		for r := 0; r < rounds; r++ {
			copies++
			local := fmt.Sprintf("%s/bench/nuon-%d@%s", w.install.Host, copies, d)
			dst := fmt.Sprintf("%s/bench/crane-%d@%s", w.install.Host, copies, d)
			runNuon := func() {
				start := time.Now()
				if err := s.Sync(ctx, []schemas.Artifact{{Name: "image", Source: src.String(), Local: local, Digest: d.String()}}); err != nil {
					b.Fatal(err)
				}
				nuonTime += time.Since(start)
			}
			runCrane := func() {
				start := time.Now()
				if err := crane.Copy(src.String(), dst, craneOpts...); err != nil {
					b.Fatal(err)
				}
				craneTime += time.Since(start)
			}
			// Alternate who goes first, so neither always meets a warm
			// or a cold page cache.
			if copies%2 == 0 {
				runNuon()
				runCrane()
			} else {
				runCrane()
				runNuon()
			}
		}
	}
	total := float64(size) * float64(copies) / 1e6
	nuon, cr := total/nuonTime.Seconds(), total/craneTime.Seconds()
	b.ReportMetric(nuon, "nuon-MB/s")
	b.ReportMetric(cr, "crane-MB/s")
	b.ReportMetric(nuon/cr, "nuon/crane")
	b.ReportMetric(float64(mb), "MB")
}

type staticKeychain map[string]authn.Authenticator

func (k staticKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if a, ok := k[r.RegistryStr()]; ok {
		return a, nil
	}
	return authn.Anonymous, nil
}

// BenchmarkNoopSync syncs 50 artifacts that are all present in the install
// registry and counts, in the registries' access logs, what that costs.
func BenchmarkNoopSync(b *testing.B) {
	ctx := context.Background()
	w := newWorld(b)
	k := key(b, vendorKey)
	var arts []schemas.Artifact
	for i := 0; i < 50; i++ {
		dir := b.TempDir()
		os.WriteFile(filepath.Join(dir, "main.tf"), []byte(fmt.Sprintf("# module %d\n", i)), 0o644)
		targets, err := builder.Targets(w.app, "", map[string]string{"network": dir}, []string{"network"})
		if err != nil {
			b.Fatal(err)
		}
		targets[0].Component.Repository = fmt.Sprintf("%s/shop/module-%d", w.vendor.Host, i)
		built, err := builder.Build(ctx, targets, builder.Options{Client: w.client, Signer: k})
		if err != nil {
			b.Fatal(err)
		}
		arts = append(arts, w.artifacts(built)...)
	}
	s := w.syncer(b, func(c *sync.Config) { c.Logger = nil })
	if err := s.Sync(ctx, arts); err != nil {
		b.Fatal(err)
	}
	w.install.Requests(b)
	w.vendor.Requests(b)
	syncs := 0
	for b.Loop() {
		if err := s.Sync(ctx, arts); err != nil {
			b.Fatal(err)
		}
		syncs++
	}
	install, vendor := len(w.install.Requests(b)), len(w.vendor.Requests(b))
	b.ReportMetric(float64(install)/float64(syncs*len(arts)), "requests/artifact")
	b.ReportMetric(float64(vendor)/float64(syncs), "vendor-requests/op")
	b.ReportMetric(float64(len(arts)), "artifacts")
}

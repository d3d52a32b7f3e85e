package plugin_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

func syncKey(t *testing.T) (signature.SignerVerifier, signature.Verifier) {
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

func syncPush(t *testing.T, c *oci.Client, repo name.Repository, img v1.Image) name.Digest {
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

package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/trusttest"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// TestVendorKeyRotationDrillWithTheBinaries is the rotation drill's
// vendor key (the cosign key artifacts are signed with), with nuon build
// and nuon release as vendor CI runs them, nuon server following main
// and acme's long-running nuon-agent behind it, on real registries. The
// agent is given only its key and version 1 of the trust root, whose
// vendor-artifacts role names cosign key A (no --vendor-key). Then:
// a release signed by A is copied and applied; version 2 of the root
// adds key B and a release signed by B is copied and applied; version 3
// retires A (its window ends) and a new release signed only by A is
// refused, nothing copied, the status naming why, B's release still
// applied; after a leak, version 4 revokes B and names C: B's next
// release is refused the same way and C's is applied. The agent runs
// all along and no file in acme's folder changes.
func TestVendorKeyRotationDrillWithTheBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries on real registries")
	}
	r := newReleaseDrill(t)
	nuonBinary(t) // built before the clock runs
	agentBinary(t)
	keyA, pubA := r.cosignKey(t, "cosign-a")
	keyB, pubB := r.cosignKey(t, "cosign-b")
	keyC, pubC := r.cosignKey(t, "cosign-c")
	expires := time.Now().AddDate(1, 0, 0)
	// version is the root's version n naming vendor keys, signed by
	// both root keys (the threshold of the previous version and its own).
	version := func(n int64, vendor ...schemas.TrustKey) []byte {
		c := trusttest.Version{Version: n, Expires: expires, RootKeys: []string{"root-1", "root-2"}, Threshold: 2,
			Render: []trusttest.RenderKey{{Name: "render-a"}}}.Content(t)
		c.Roles.VendorArtifacts = &schemas.TrustRole{Threshold: 1, Keys: vendor}
		return trusttest.Sign(t, c, "root-1", "root-2")
	}
	publish := func(n int64, file []byte) {
		writeTestFile(t, filepath.Join(r.src, trust.FileName(n)), file)
	}
	r.main(t, version(1, schemas.TrustKey{Name: "cosign-a", Key: pubA}))
	given := map[string]string{}
	folderHashes(t, "acme", r.folder, given)
	// step runs one step of the drill, whose run returns how long after
	// the server's render the running agent's status named it, and keeps
	// both times for the note.
	var table strings.Builder
	table.WriteString("| step | took | status after the render |\n| --- | --- | --- |\n")
	step := func(name string, run func() time.Duration) {
		t.Helper()
		start := time.Now()
		agent := run().Round(100 * time.Millisecond)
		took := time.Since(start).Round(100 * time.Millisecond)
		fmt.Fprintf(&table, "| %s | %s | %s |\n", name, took, agent)
		t.Logf("drill step %q: %s (status %s after the render)", name, took, agent)
	}
	// unchanged fails the test when the agent exited or a file in acme's
	// folder changed.
	unchanged := func(step string) {
		t.Helper()
		if r.agent.ProcessState != nil || r.agent.Process.Signal(syscall.Signal(0)) != nil {
			t.Errorf("%s: acme's agent is gone: %v", step, r.agent.ProcessState)
		}
		now := map[string]string{}
		folderHashes(t, "acme", r.folder, now)
		sameConfig(t, step, given, now)
	}
	// image writes an image of its own digest under a new --src: fixtures'
	// image with version as an annotation.
	image := func(version string) string {
		t.Helper()
		src := filepath.Join(t.TempDir(), "src")
		idx, err := layout.ImageIndexFromPath(filepath.Join(r.root, "fixtures", "images", "api-image"))
		if err != nil {
			t.Fatal(err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		img, err := idx.Image(im.Manifests[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		img = mutate.Annotations(img, map[string]string{"org.opencontainers.image.version": version}).(v1.Image)
		p, err := layout.Write(filepath.Join(src, "images", "api-image"), empty.Index)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.AppendImage(img); err != nil {
			t.Fatal(err)
		}
		return src
	}

	var digestA, digestB string
	step("server and agent up, a release signed by A (root version 1) copied and applied", func() time.Duration {
		var report string
		report, digestA = r.build(t, "a", filepath.Join(r.root, "fixtures", "previous"), "--key", keyA)
		got, took := r.release(t, "2.3.0", report)
		if got.Phase != "Applied" || got.Digests["image"] != digestA || !r.inInstall(t, digestA) {
			t.Fatalf("A's release: %+v, want %s applied\n%s", got, digestA, r.logs())
		}
		return took
	})
	unchanged("key A")
	step("root version 2 adds B, taken by the running agent", func() time.Duration {
		publish(2, version(2, schemas.TrustKey{Name: "cosign-b", Key: pubB}, schemas.TrustKey{Name: "cosign-a", Key: pubA}))
		got, took := r.commit(t, "trust root version 2: cosign-b")
		if got.Phase != "Applied" || got.Digests["image"] != digestA {
			t.Fatalf("after version 2: %+v, want %s still applied", got, digestA)
		}
		return took
	})
	step("a release signed by B copied and applied", func() time.Duration {
		var report string
		report, digestB = r.build(t, "b", filepath.Join(r.root, "fixtures"), "--key", keyB)
		if digestB == digestA {
			t.Fatal("the two builds made one digest")
		}
		got, took := r.release(t, "2.4.0", report)
		if got.Phase != "Applied" || got.Digests["image"] != digestB || !r.inInstall(t, digestB) {
			t.Fatalf("B's release: %+v, want %s applied\n%s", got, digestB, r.logs())
		}
		return took
	})
	unchanged("key B added")
	step("root version 3 retires A, taken by the running agent", func() time.Duration {
		retired := time.Now().UTC().Truncate(time.Second)
		publish(3, version(3, schemas.TrustKey{Name: "cosign-b", Key: pubB},
			schemas.TrustKey{Name: "cosign-a", Key: pubA, NotAfter: retired.Format(time.RFC3339)}))
		got, took := r.commit(t, "trust root version 3: cosign-a retired")
		if got.Phase != "Applied" || got.Digests["image"] != digestB {
			t.Fatalf("after version 3: %+v, want %s still applied", got, digestB)
		}
		return took
	})
	step("a release signed only by the retired A refused", func() time.Duration {
		report, digestC := r.build(t, "c", image("2.5.0"), "--key", keyA)
		if digestC == digestA || digestC == digestB {
			t.Fatal("the third build made an earlier digest")
		}
		got, took := r.release(t, "2.5.0", report)
		t.Logf("A's release after its retirement: %s: %s", got.Phase, got.Error)
		if got.Phase == "Applied" || !strings.Contains(got.Error, digestC) || !strings.Contains(got.Error, "no signature verifies with the vendor key") ||
			!strings.Contains(got.Error, "does not trust now") {
			t.Errorf("A's release after version 3: %+v, want %s refused for its signature\n%s", got, digestC, r.logs())
		}
		if r.inInstall(t, digestC) {
			t.Errorf("%s, signed by the retired key, was copied into the install's registry", digestC)
		}
		if got.Digests["image"] != digestB || !r.inInstall(t, digestB) || !r.inInstall(t, digestA) {
			t.Errorf("the applied state moved: %+v, want %s kept", got, digestB)
		}
		return took
	})
	unchanged("key A retired")
	// A leak: B is revoked from a minute before version 4, which names C;
	// B's next release is refused, C's is applied.
	var digestD string
	step("root version 4 adds C and revokes B after a leak, taken by the running agent", func() time.Duration {
		c := trusttest.Version{Version: 4, Expires: expires, RootKeys: []string{"root-1", "root-2"}, Threshold: 2,
			Render: []trusttest.RenderKey{{Name: "render-a"}}}.Content(t)
		c.Roles.VendorArtifacts = &schemas.TrustRole{Threshold: 1, Keys: []schemas.TrustKey{{Name: "cosign-c", Key: pubC}, {Name: "cosign-b", Key: pubB}}}
		fp := ssh.FingerprintSHA256(mustAuthorizedKey(t, pubB))
		c.Revocations = []schemas.TrustRevocation{{Fingerprint: fp, RevokedAt: time.Now().Add(-time.Minute).UTC().Format(time.RFC3339), Reason: "leaked"}}
		publish(4, trusttest.Sign(t, c, "root-1", "root-2"))
		got, took := r.commit(t, "trust root version 4: cosign-b revoked")
		// main still pins A's refused 2.5.0: refused still, B's kept.
		if got.Phase == "Applied" || got.Digests["image"] != digestB {
			t.Fatalf("after version 4: %+v, want 2.5.0 refused and %s kept", got, digestB)
		}
		return took
	})
	step("a release signed by the revoked B refused", func() time.Duration {
		report, digest := r.build(t, "b-leaked", image("2.6.0"), "--key", keyB)
		got, took := r.release(t, "2.6.0", report)
		t.Logf("B's release after its revocation: %s: %s", got.Phase, got.Error)
		if got.Phase == "Applied" || !strings.Contains(got.Error, digest) || !strings.Contains(got.Error, "no signature verifies with the vendor key") ||
			!strings.Contains(got.Error, "does not trust now") {
			t.Errorf("B's release after version 4: %+v, want %s refused for its signature\n%s", got, digest, r.logs())
		}
		if r.inInstall(t, digest) {
			t.Errorf("%s, signed by the revoked key, was copied into the install's registry", digest)
		}
		if got.Digests["image"] != digestB || !r.inInstall(t, digestB) {
			t.Errorf("the applied state moved: %+v, want %s kept", got, digestB)
		}
		return took
	})
	step("a release signed by C copied and applied", func() time.Duration {
		var report string
		report, digestD = r.build(t, "c-new", image("2.7.0"), "--key", keyC)
		got, took := r.release(t, "2.7.0", report)
		if got.Phase != "Applied" || got.Digests["image"] != digestD || !r.inInstall(t, digestD) {
			t.Fatalf("C's release: %+v, want %s applied\n%s", got, digestD, r.logs())
		}
		return took
	})
	unchanged("key B revoked")
	t.Logf("steps:\n%s", table.String())
}

// mustAuthorizedKey parses an authorized_keys line.
func mustAuthorizedKey(t *testing.T, line string) ssh.PublicKey {
	t.Helper()
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

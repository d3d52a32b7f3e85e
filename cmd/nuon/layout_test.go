package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/schemas"
)

// fixtureLayout packages the fixtures' terraform modules, the current and
// the previous versions, into one OCI image layout, as `nuon build` would
// push them (the builds are reproducible, so the digests are those of
// fixtures/tenant/releases). It returns the layout's path.
func fixtureLayout(t *testing.T) string {
	path, _ := moduleLayout(t, filepath.Join(repoRoot(), "fixtures", "modules", "*"), filepath.Join(repoRoot(), "fixtures", "previous", "modules", "*"))
	return path
}

// moduleLayout packages each directory the globs match as a terraform
// module into a new OCI image layout; it returns its path and the digests
// by directory.
func moduleLayout(t *testing.T, globs ...string) (string, map[string]v1.Hash) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "artifacts")
	p, err := layout.Write(path, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	digests := map[string]v1.Hash{}
	for _, g := range globs {
		dirs, _ := filepath.Glob(g)
		for _, dir := range dirs {
			img, err := oci.Package(oci.Terraform, dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.AppendImage(img); err != nil {
				t.Fatal(err)
			}
			if digests[dir], err = img.Digest(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return path, digests
}

// TestJobRunChecksLayoutDigests: `nuon job run --artifacts` reads a
// module from an OCI image layout only when it hashes to the digest its
// manifest pins; a layer changed on disk fails the job before terraform
// sees it.
func TestJobRunChecksLayoutDigests(t *testing.T) {
	module := filepath.Join(repoRoot(), "fixtures", "modules", "network")
	path, digests := moduleLayout(t, module)
	d := digests[module]
	f, err := os.Open(filepath.Join(path, "blobs", d.Algorithm, d.Hex))
	if err != nil {
		t.Fatal(err)
	}
	m, err := v1.ParseManifest(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(path, "blobs", "sha256", m.Layers[0].Digest.Hex)
	data, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	os.Chmod(blob, 0o644)
	if err := os.WriteFile(blob, data, 0o644); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	job := schemas.Job{
		APIVersion: schemas.APIVersion, Kind: schemas.KindJob, ID: "network-g1-create", Install: "acme",
		Component: "network", Operation: schemas.OpCreate, Plugin: schemas.TypeTerraform, Version: "1.0.0",
		Generation: 1, Commit: strings.Repeat("a", 40), Timeout: "1m",
		Artifacts: []schemas.Artifact{{Name: "module", Local: "registry.test/acme/network@" + d.String(), Digest: d.String()}},
		StateDir:  filepath.Join(dir, "state"), ResultFile: filepath.Join(dir, "result.json"),
	}
	b, _ := json.Marshal(job)
	manifest := filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(manifest, b, 0o600); err != nil {
		t.Fatal(err)
	}
	nuon(t, nil, 1, "job", "run", "--artifacts", path, manifest)
	var res schemas.JobResult
	if b, err := os.ReadFile(job.ResultFile); err != nil || json.Unmarshal(b, &res) != nil {
		t.Fatalf("no result: %v", err)
	}
	if !strings.Contains(res.Error, "digest mismatch") {
		t.Errorf("job error %q, want a digest mismatch", res.Error)
	}
	if _, err := os.Stat(filepath.Join(job.StateDir, "terraform.tfstate")); err == nil {
		t.Error("terraform ran on a tampered module")
	}
}

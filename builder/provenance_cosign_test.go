package builder_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/testenv"
)

// cosignVersion is the cosign CLI `make cosign` builds from the module
// cache, the version go.mod requires.
const cosignVersion = "v2.6.5"

// cosignCLI is the stock cosign binary: $NUON_COSIGN (the Makefile sets
// it), else the nuon cache's.
func cosignCLI(t *testing.T) string {
	t.Helper()
	p := os.Getenv("NUON_COSIGN")
	if p == "" {
		dir, err := os.UserCacheDir()
		if err == nil {
			p = filepath.Join(dir, "nuon", "cosign", cosignVersion, "cosign")
		}
	}
	if fi, err := os.Stat(p); err != nil || fi.IsDir() {
		testenv.Missing(t, "no cosign CLI at %q: run 'make cosign'", p)
	}
	return p
}

// TestProvenanceStockCosign: stock `cosign verify-attestation --key
// --type slsaprovenance1` accepts the provenance nuon build writes, and
// refuses it with another key or another predicate type.
func TestProvenanceStockCosign(t *testing.T) {
	cosign := cosignCLI(t)
	v := newVendor(t, "")
	ctx := context.Background()
	sv, pub := newKey(t, "builder")
	_, otherPub := newKey(t, "other")
	targets, err := builder.Targets(v.app, fixtures, nil, []string{"network"})
	if err != nil {
		t.Fatal(err)
	}
	arts, err := builder.Build(ctx, targets, builder.Options{Client: v.client, Signer: v.key, BuilderKey: sv,
		Provenance: &builder.Provenance{BuilderID: "https://ci.example.com/builder-1",
			Source: builder.Source{Repository: "git+https://git.example.com/vendor/shop", Ref: "refs/tags/v1.0.0", Commit: strings.Repeat("d", 40)}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(key, typ string) (string, error) {
		cmd := exec.Command(cosign, "verify-attestation", "--key", key, "--type", typ,
			"--insecure-ignore-tlog", "--allow-http-registry", arts[0].Ref())
		cmd.Env = append(os.Environ(), "HOME="+dir, "DOCKER_CONFIG="+dir, "SIGSTORE_NO_CACHE=true", "TUF_ROOT="+dir)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(write("builder.pub", pub), "slsaprovenance1"); err != nil {
		t.Fatalf("cosign verify-attestation refuses the provenance: %v\n%s", err, out)
	}
	if out, err := run(write("other.pub", otherPub), "slsaprovenance1"); err == nil {
		t.Errorf("cosign accepts the provenance with another key:\n%s", out)
	}
	if out, err := run(filepath.Join(dir, "builder.pub"), "slsaprovenance02"); err == nil {
		t.Errorf("cosign accepts the provenance as SLSA 0.2:\n%s", out)
	}
}

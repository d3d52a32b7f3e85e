package oci

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"nuon.dev/nuon/schemas"
)

// writeLayout packages each directory of trees as a terraform module and
// writes them all into one OCI image layout with go-containerregistry's
// layout package, as `crane pull --format=oci` lays one out. It returns
// the layout's path and each artifact's digest, by tree name.
func writeLayout(t *testing.T, trees map[string]map[string]string) (string, map[string]v1.Hash) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(path, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	digests := map[string]v1.Hash{}
	for name, files := range trees {
		src := t.TempDir()
		writeTree(t, src, files)
		img, err := Package(Terraform, src)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.AppendImage(img); err != nil {
			t.Fatal(err)
		}
		if digests[name], err = img.Digest(); err != nil {
			t.Fatal(err)
		}
	}
	return path, digests
}

func artifactAt(d v1.Hash) schemas.Artifact {
	return schemas.Artifact{Name: "module", Local: "registry.test/acme/network@" + d.String(), Digest: d.String()}
}

func TestLayoutExtract(t *testing.T) {
	path, digests := writeLayout(t, map[string]map[string]string{
		"v1": {"main.tf": "# v1\n", "modules/db/db.tf": "module {}\n"},
		"v2": {"main.tf": "# v2\n", "run.sh*": "#!/bin/sh\n"},
	})
	for name, want := range map[string]map[string]string{
		"v1": {"main.tf": "# v1\n", "modules/db/db.tf": "module {}\n"},
		"v2": {"main.tf": "# v2\n", "run.sh*": "#!/bin/sh\n"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "module")
			if err := (Layout{Path: path}).Extract(context.Background(), artifactAt(digests[name]), dir); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, readTree(t, dir)); diff != "" {
				t.Errorf("extracted (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLayoutRefuses: content that does not hash to the digest the
// desired state pins is refused with nothing extracted, as from a
// registry.
func TestLayoutRefuses(t *testing.T) {
	files := map[string]string{"main.tf": "# honest\n"}
	other := map[string]string{"main.tf": "# other\n"}
	tests := []struct {
		name   string
		edit   func(t *testing.T, path string, d, o v1.Hash) schemas.Artifact
		wantIs error
		want   string
	}{
		{
			name: "layer changed on disk",
			edit: func(t *testing.T, path string, d, _ v1.Hash) schemas.Artifact {
				overwrite(t, path, layerOfManifest(t, path, d), func(b []byte) []byte { b[len(b)/2] ^= 0xff; return b })
				return artifactAt(d)
			},
			wantIs: ErrDigestMismatch,
		},
		{
			name: "layer replaced by another artifact's",
			edit: func(t *testing.T, path string, d, o v1.Hash) schemas.Artifact {
				b, err := os.ReadFile(filepath.Join(path, blobPath(layerOfManifest(t, path, o))))
				if err != nil {
					t.Fatal(err)
				}
				overwrite(t, path, layerOfManifest(t, path, d), func([]byte) []byte { return b })
				return artifactAt(d)
			},
			wantIs: ErrDigestMismatch,
		},
		{
			name: "manifest changed on disk",
			edit: func(t *testing.T, path string, d, _ v1.Hash) schemas.Artifact {
				overwrite(t, path, d, func(b []byte) []byte { return append(b, ' ') })
				return artifactAt(d)
			},
			wantIs: ErrDigestMismatch,
		},
		{
			name: "reference and digest disagree",
			edit: func(_ *testing.T, _ string, d, o v1.Hash) schemas.Artifact {
				a := artifactAt(d)
				a.Digest = o.String()
				return a
			},
			wantIs: ErrDigestMismatch,
		},
		{
			name: "digest not in the layout",
			edit: func(_ *testing.T, _ string, _, _ v1.Hash) schemas.Artifact {
				return artifactAt(v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)})
			},
			want: "not in the layout",
		},
		{
			name: "not a layout",
			edit: func(t *testing.T, path string, d, _ v1.Hash) schemas.Artifact {
				if err := os.Remove(filepath.Join(path, "oci-layout")); err != nil {
					t.Fatal(err)
				}
				return artifactAt(d)
			},
			wantIs: ErrNotLayout,
		},
		{
			name: "no digest",
			edit: func(_ *testing.T, _ string, _, _ v1.Hash) schemas.Artifact {
				return schemas.Artifact{Name: "module", Local: "registry.test/acme/network:1.0.0"}
			},
			want: "local reference",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, digests := writeLayout(t, map[string]map[string]string{"a": files, "b": other})
			a := tt.edit(t, path, digests["a"], digests["b"])
			dir := filepath.Join(t.TempDir(), "module")
			err := (Layout{Path: path}).Extract(context.Background(), a, dir)
			if err == nil {
				t.Fatal("extracted")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v, want %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "artifact module") {
				t.Errorf("error %q does not name the artifact and %q", err, tt.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) > 0 {
				t.Errorf("%d entries extracted from a refused artifact", len(entries))
			}
		})
	}
}

func TestLayoutHonoursContext(t *testing.T) {
	path, digests := writeLayout(t, map[string]map[string]string{"a": {"main.tf": "# a\n"}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := (Layout{Path: path}).Extract(ctx, artifactAt(digests["a"]), filepath.Join(t.TempDir(), "m"))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
}

// layerOfManifest returns the content layer's digest of the manifest d in
// the layout at path.
func layerOfManifest(t *testing.T, path string, d v1.Hash) v1.Hash {
	t.Helper()
	f, err := os.Open(filepath.Join(path, blobPath(d)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := v1.ParseManifest(f)
	if err != nil {
		t.Fatal(err)
	}
	return m.Layers[0].Digest
}

// overwrite replaces the blob h of the layout at path with edit's result.
func overwrite(t *testing.T, path string, h v1.Hash, edit func([]byte) []byte) {
	t.Helper()
	p := filepath.Join(path, blobPath(h))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, edit(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// FuzzExtract feeds arbitrary bytes to the extractor: it may refuse them,
// but it must never panic, write outside its directory, or leave anything
// there but directories and regular files.
func FuzzExtract(f *testing.F) {
	f.Add(rawArchive(f, tar.Header{Name: "main.tf", Typeflag: tar.TypeReg, Mode: 0o644}))
	f.Add(rawArchive(f, tar.Header{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o755}, tar.Header{Name: "a/b", Typeflag: tar.TypeReg, Mode: 0o755}))
	f.Add(rawArchive(f, tar.Header{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644}))
	f.Add(rawArchive(f, tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/"}, tar.Header{Name: "l/x", Typeflag: tar.TypeReg}))
	f.Add(rawArchive(f, tar.Header{Name: "chart/Chart.yaml", Typeflag: tar.TypeReg, Mode: 0o644}))
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dst := filepath.Join(parent, "out")
		_ = Extract(context.Background(), bytes.NewReader(data), descOf(data), dst, ExtractOptions{Strip: len(data) % 2, MaxBytes: 1 << 20, MaxEntries: 1000})
		entries, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() != "out" {
				t.Fatalf("extraction left %s beside its directory", e.Name())
			}
		}
		err = filepath.WalkDir(parent, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && !d.Type().IsRegular() {
				t.Fatalf("%s is a %s", p, d.Type())
			}
			if rel, _ := filepath.Rel(parent, p); strings.HasPrefix(rel, "..") {
				t.Fatalf("%s lies outside", p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzCheckPayload feeds arbitrary payloads to the simple-signing check: it
// accepts only a cosign payload that names the digest exactly.
func FuzzCheckPayload(f *testing.F) {
	d := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
	f.Add([]byte(`{"critical":{"identity":{"docker-reference":"r.example/a"},"image":{"docker-manifest-digest":"sha256:` + d.Hex + `"},"type":"cosign container image signature"},"optional":null}`))
	f.Add([]byte(`{"critical":{"image":{"docker-manifest-digest":"sha256:00"},"type":"cosign container image signature"}}`))
	f.Add([]byte(`{"critical":{"type":"atomic container signature"}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		got, err := CheckPayload(payload, d)
		if err == nil && got != d.String() {
			t.Fatalf("accepted a payload naming %q", got)
		}
	})
}

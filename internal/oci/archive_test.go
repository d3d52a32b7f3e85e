package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// writeTree creates files under dir; a name ending in "*" is executable.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		mode := os.FileMode(0o644)
		if n, ok := strings.CutSuffix(name, "*"); ok {
			name, mode = n, 0o755
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
}

var module = map[string]string{
	"main.tf":               "resource \"terraform_data\" \"x\" {}\n",
	"variables.tf":          "variable \"name\" {}\n",
	"scripts/run.sh*":       "#!/bin/sh\necho hi\n",
	"modules/inner/main.tf": "# inner\n",
}

func TestPackageIsReproducible(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeTree(t, a, module)
	writeTree(t, b, module)
	// The second copy differs in everything that must not matter: times,
	// group/other permission bits, and files that are never packaged.
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	_ = filepath.WalkDir(b, func(p string, d fs.DirEntry, err error) error {
		return os.Chtimes(p, old, old)
	})
	if err := os.Chmod(filepath.Join(b, "main.tf"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(b, "scripts/run.sh"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeTree(t, b, map[string]string{
		".git/HEAD":                       "ref: refs/heads/main\n",
		".terraform/providers/x":          "binary",
		"terraform.tfstate":               `{"secret": "hunter2"}`,
		"terraform.tfstate.backup":        `{}`,
		"modules/inner/terraform.tfstate": `{}`,
	})
	da, db := digestOf(t, Terraform, a), digestOf(t, Terraform, b)
	if da != db {
		t.Fatalf("same module, different digests: %s and %s", da, db)
	}
	if again := digestOf(t, Terraform, a); again != da {
		t.Fatalf("a second build gave %s, the first %s", again, da)
	}
	writeTree(t, b, map[string]string{"main.tf": "# changed\n"})
	if d := digestOf(t, Terraform, b); d == da {
		t.Fatal("a changed module kept its digest")
	}
}

func digestOf(t *testing.T, k Kind, dir string) v1.Hash {
	t.Helper()
	img, err := Package(k, dir)
	if err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestArchiveHeaders(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, module)
	files, err := DirFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Archive(files)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() || zr.OS != 255 {
		t.Errorf("gzip header: name %q, time %v, OS %d", zr.Name, zr.ModTime, zr.OS)
	}
	tr := tar.NewReader(zr)
	var got []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(Epoch) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: time %v owner %d:%d %q:%q", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		got = append(got, h.Name+" "+fs.FileMode(h.Mode).String())
	}
	want := []string{
		"main.tf -rw-r--r--",
		"modules/ -rwxr-xr-x",
		"modules/inner/ -rwxr-xr-x",
		"modules/inner/main.tf -rw-r--r--",
		"scripts/ -rwxr-xr-x",
		"scripts/run.sh -rwxr-xr-x",
		"variables.tf -rw-r--r--",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}

func TestDirFilesRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, module)
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "passwd")); err != nil {
		t.Fatal(err)
	}
	if _, err := DirFiles(dir); err == nil || !strings.Contains(err.Error(), "passwd") {
		t.Fatalf("a symbolic link was packaged: %v", err)
	}
}

func TestPackageNeedsFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Package(Terraform, dir); !errors.Is(err, errNoFiles) {
		t.Fatalf("an empty module was packaged: %v", err)
	}
}

// layerOf returns the content layer of a packaged directory.
func layerOf(t *testing.T, k Kind, dir string) ([]byte, v1.Descriptor) {
	t.Helper()
	img, err := Package(k, dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Config.MediaType) != k.Config || len(m.Layers) != 1 || string(m.Layers[0].MediaType) != k.Layer {
		t.Fatalf("manifest: %+v", m)
	}
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := ls[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b, m.Layers[0]
}

func TestExtractRoundTrip(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src, module)
	b, desc := layerOf(t, Terraform, src)
	dst := filepath.Join(t.TempDir(), "module")
	writeTree(t, dst, map[string]string{"main.tf": "stale", "other.tf": "kept"})
	if err := Extract(context.Background(), bytes.NewReader(b), desc, dst, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	got := readTree(t, dst)
	want := map[string]string{"other.tf": "kept"}
	for k, v := range module {
		want[k] = v
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("extracted (-want +got):\n%s", diff)
	}
	entries, _ := os.ReadDir(filepath.Dir(dst))
	if len(entries) != 1 {
		t.Errorf("extraction left %d entries beside the directory", len(entries)-1)
	}
}

// readTree reads the files under dir; executable ones get a "*" suffix.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() {
			t.Errorf("%s: %s", p, d.Type())
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, _ := d.Info()
		if info.Mode()&0o111 != 0 {
			rel += "*"
		}
		got[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestExtractVerifiesDigest(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src, module)
	b, desc := layerOf(t, Terraform, src)
	tampered := bytes.Clone(b)
	tampered[len(tampered)-10] ^= 0xff // inside the gzip trailer: the tar reads fine
	other := sha256.Sum256([]byte("other"))
	for _, tc := range []struct {
		name string
		blob []byte
		desc v1.Descriptor
	}{
		{"changed byte", tampered, desc},
		{"other digest", b, v1.Descriptor{Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(other[:])}, Size: desc.Size}},
		{"truncated", b[:len(b)-1], desc},
		{"longer", append(bytes.Clone(b), 0), desc},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "module")
			err := Extract(context.Background(), bytes.NewReader(tc.blob), tc.desc, dst, ExtractOptions{})
			if !errors.Is(err, ErrDigestMismatch) {
				t.Fatalf("got %v, want a digest mismatch", err)
			}
			if entries, _ := os.ReadDir(dst); len(entries) != 0 {
				t.Errorf("unverified content reached the directory: %v", entries)
			}
		})
	}
}

// rawArchive writes tar headers as given, for archives no packager makes.
func rawArchive(t testing.TB, entries ...tar.Header) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		body := h.Name
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(body))
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func descOf(b []byte) v1.Descriptor {
	sum := sha256.Sum256(b)
	return v1.Descriptor{Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}, Size: int64(len(b))}
}

func TestExtractRefusesUnsafeEntries(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []tar.Header
	}{
		{"parent", []tar.Header{{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"nested parent", []tar.Header{{Name: "a/../../evil", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"absolute", []tar.Header{{Name: "/tmp/evil", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"symlink", []tar.Header{{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/etc"}}},
		{"symlink then file", []tar.Header{{Name: "a", Typeflag: tar.TypeSymlink, Linkname: ".."}, {Name: "a/evil", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"hard link", []tar.Header{{Name: "link", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}}},
		{"device", []tar.Header{{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}},
		{"backslash", []tar.Header{{Name: "..\\evil", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"twice", []tar.Header{{Name: "a", Typeflag: tar.TypeReg, Mode: 0o644}, {Name: "a", Typeflag: tar.TypeReg, Mode: 0o644}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := rawArchive(t, tc.entries...)
			parent := t.TempDir()
			dst := filepath.Join(parent, "out")
			err := Extract(context.Background(), bytes.NewReader(b), descOf(b), dst, ExtractOptions{})
			if !errors.Is(err, ErrUnsafeArchive) {
				t.Fatalf("got %v, want ErrUnsafeArchive", err)
			}
			entries, _ := os.ReadDir(parent)
			if len(entries) != 1 {
				t.Errorf("the parent directory holds %d entries", len(entries))
			}
			if e, _ := os.ReadDir(dst); len(e) != 0 {
				t.Errorf("the directory holds %v", e)
			}
		})
	}
}

func TestExtractLimits(t *testing.T) {
	b := rawArchive(t, tar.Header{Name: "a", Typeflag: tar.TypeReg}, tar.Header{Name: "b", Typeflag: tar.TypeReg})
	dst := filepath.Join(t.TempDir(), "out")
	if err := Extract(context.Background(), bytes.NewReader(b), descOf(b), dst, ExtractOptions{MaxEntries: 1}); !errors.Is(err, ErrUnsafeArchive) {
		t.Errorf("entries: got %v", err)
	}
	if err := Extract(context.Background(), bytes.NewReader(b), descOf(b), dst, ExtractOptions{MaxBytes: 1}); !errors.Is(err, ErrUnsafeArchive) {
		t.Errorf("bytes: got %v", err)
	}
}

func TestExtractStrip(t *testing.T) {
	b := rawArchive(t,
		tar.Header{Name: "api/Chart.yaml", Typeflag: tar.TypeReg, Mode: 0o644},
		tar.Header{Name: "api/templates/x.yaml", Typeflag: tar.TypeReg, Mode: 0o644},
	)
	dst := filepath.Join(t.TempDir(), "chart")
	if err := Extract(context.Background(), bytes.NewReader(b), descOf(b), dst, ExtractOptions{Strip: 1}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"Chart.yaml": "api/Chart.yaml", "templates/x.yaml": "api/templates/x.yaml"}
	if diff := cmp.Diff(want, readTree(t, dst)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

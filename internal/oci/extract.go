package oci

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Errors of extraction. Both are final: the same bytes fail the same way.
var (
	// ErrDigestMismatch means content does not hash to the digest that
	// names it: it was changed in the registry or on the way.
	ErrDigestMismatch = errors.New("digest mismatch")
	// ErrUnsafeArchive means an archive holds an entry that could write
	// outside the target directory or is not a plain file or directory,
	// or exceeds the limits.
	ErrUnsafeArchive = errors.New("unsafe archive")
)

// ExtractOptions bound an extraction.
type ExtractOptions struct {
	// Strip drops this many leading path elements of every entry (a Helm
	// chart archive holds one directory named after the chart).
	Strip int
	// MaxBytes bounds the uncompressed size of all files; default
	// DefaultMaxBytes.
	MaxBytes int64
	// MaxEntries bounds the number of entries; default DefaultMaxEntries.
	MaxEntries int
}

// Default bounds of an extraction: far above any module, chart or set of
// manifests, far below what would fill a disk.
const (
	DefaultMaxBytes   = 1 << 30
	DefaultMaxEntries = 100_000
)

// Extract writes the gzipped tar that r yields, the blob desc describes,
// into dir. It hashes the blob as it reads and reads it to the end; only
// when the digest and size match does anything appear in dir: the archive
// is unpacked next to dir first and moved in afterwards, replacing entries
// of the same name. Entries must be directories or regular files whose
// paths stay inside dir; modes are normalised to 0755 and 0644.
func Extract(ctx context.Context, r io.Reader, desc v1.Descriptor, dir string, o ExtractOptions) error {
	if desc.Digest.Algorithm != "sha256" || len(desc.Digest.Hex) != 64 {
		return fmt.Errorf("extract: unsupported digest %q", desc.Digest)
	}
	vr := &verifier{r: io.LimitReader(r, desc.Size+1), h: sha256.New(), want: desc.Digest, size: desc.Size}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".extract-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := extract(ctx, vr, tmp, o); err != nil {
		// Content that does not match its digest is reported as such,
		// whatever it broke first.
		if ctx.Err() == nil && !errors.Is(err, ErrDigestMismatch) {
			if _, derr := io.Copy(io.Discard, vr); errors.Is(derr, ErrDigestMismatch) {
				return fmt.Errorf("%w (%v)", derr, err)
			}
		}
		return err
	}
	// The archive ended; the blob must end too, with the right digest.
	if _, err := io.Copy(io.Discard, vr); err != nil {
		return err
	}
	if !vr.done {
		return fmt.Errorf("%w: blob %s did not end", ErrDigestMismatch, desc.Digest)
	}
	return moveInto(tmp, dir)
}

// verifier hashes what it reads; at the end it returns ErrDigestMismatch
// instead of io.EOF unless size and digest match.
type verifier struct {
	r    io.Reader
	h    hash.Hash
	n    int64
	want v1.Hash
	size int64
	done bool
}

func (v *verifier) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.n > v.size {
		return n, fmt.Errorf("%w: blob %s is larger than its %d bytes", ErrDigestMismatch, v.want, v.size)
	}
	if errors.Is(err, io.EOF) {
		got := hex.EncodeToString(v.h.Sum(nil))
		if v.n != v.size || got != v.want.Hex {
			return n, fmt.Errorf("%w: blob %s has %d bytes hashing to sha256:%s", ErrDigestMismatch, v.want, v.n, got)
		}
		v.done = true
	}
	return n, err
}

// extract unpacks the gzipped tar r into dir, which must be empty, then
// reads the gzip stream to its end so its checksum is verified.
func extract(ctx context.Context, r io.Reader, dir string, o ExtractOptions) error {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	zr, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	zr.Multistream(false)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(zr)
	var total int64
	for entries := 0; ; entries++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("extract: %w", err)
		}
		if entries >= o.MaxEntries {
			return fmt.Errorf("%w: more than %d entries", ErrUnsafeArchive, o.MaxEntries)
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name, err := entryName(h.Name, o.Strip)
		if err != nil {
			return err
		}
		if name == "" {
			continue // a stripped leading directory
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, dirMode); err != nil {
				return fmt.Errorf("extract %s: %w", name, err)
			}
		case tar.TypeReg, tar.TypeRegA:
			if h.Size < 0 || h.Size > o.MaxBytes-total {
				return fmt.Errorf("%w: files larger than %d bytes in all", ErrUnsafeArchive, o.MaxBytes)
			}
			total += h.Size
			if err := writeEntry(root, name, h, tr); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: %s is not a regular file or directory (type %q)", ErrUnsafeArchive, h.Name, h.Typeflag)
		}
	}
	if _, err := io.Copy(io.Discard, io.LimitReader(zr, o.MaxBytes)); err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	return nil
}

// entryName cleans an entry's name and drops strip leading elements. It
// refuses names that are absolute, climb out with "..", or hold
// backslashes or NULs.
func entryName(name string, strip int) (string, error) {
	if strings.ContainsAny(name, "\\\x00") || strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w: entry %q", ErrUnsafeArchive, name)
	}
	clean := path.Clean(name)
	if clean == "." {
		return "", nil
	}
	if !filepath.IsLocal(clean) {
		return "", fmt.Errorf("%w: entry %q leaves the directory", ErrUnsafeArchive, name)
	}
	parts := strings.Split(clean, "/")
	if strip > 0 {
		if len(parts) <= strip {
			return "", nil
		}
		parts = parts[strip:]
	}
	return strings.Join(parts, "/"), nil
}

func writeEntry(root *os.Root, name string, h *tar.Header, r io.Reader) error {
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, dirMode); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
	}
	mode := os.FileMode(fileMode)
	if h.Mode&0o111 != 0 {
		mode = execMode
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: %s appears twice", ErrUnsafeArchive, name)
	}
	if err != nil {
		return fmt.Errorf("extract %s: %w", name, err)
	}
	if _, err := io.CopyN(f, r, h.Size); err != nil {
		f.Close()
		return fmt.Errorf("extract %s: %w", name, err)
	}
	return f.Close()
}

// moveInto moves every entry of src into dst, replacing what dst has of
// the same name.
func moveInto(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		to := filepath.Join(dst, e.Name())
		if err := os.RemoveAll(to); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(src, e.Name()), to); err != nil {
			return err
		}
	}
	return nil
}

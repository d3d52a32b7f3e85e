package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// File is one entry of an archive: a directory (Mode has fs.ModeDir) or a
// regular file with its content.
type File struct {
	// Name is the slash-separated path inside the archive.
	Name string
	Mode fs.FileMode
	Data []byte
}

// Epoch is the modification time of every archive entry: a build must not
// depend on when or where the files were checked out.
var Epoch = time.Unix(0, 0).UTC()

// Normalised modes: what matters of a file is whether it is executable.
const (
	dirMode  = 0o755
	fileMode = 0o644
	execMode = 0o755
)

// Skipped reports whether packaging leaves out a path of a source
// directory: version control metadata, Terraform's working directory and
// any local Terraform state, which may hold secrets.
func Skipped(rel string, dir bool) bool {
	base := path.Base(rel)
	switch {
	case dir && (base == ".git" || base == ".hg" || base == ".svn" || base == ".terraform"):
		return true
	case !dir && (base == ".DS_Store" || strings.HasPrefix(base, "terraform.tfstate") || strings.HasSuffix(base, ".tfstate")):
		return true
	}
	return false
}

// DirFiles reads the directories and regular files under dir, leaving out
// what Skipped names. A symbolic link or any other kind of file is an
// error: what a link points to differs between machines.
func DirFiles(dir string) ([]File, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("package %s: %w", dir, err)
	}
	defer root.Close()
	var files []File
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		if Skipped(p, d.IsDir()) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		switch {
		case d.IsDir():
			files = append(files, File{Name: p, Mode: fs.ModeDir | dirMode})
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			data, err := fs.ReadFile(root.FS(), p)
			if err != nil {
				return err
			}
			files = append(files, File{Name: p, Mode: info.Mode().Perm(), Data: data})
		default:
			return fmt.Errorf("%s: %s is not a regular file or directory", filepath.Join(dir, filepath.FromSlash(p)), d.Type())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("package %s: %w", dir, err)
	}
	return files, nil
}

// Archive writes files as a gzipped tar that depends only on their names,
// contents and whether they are executable: entries sorted by name, every
// time Epoch, owner 0:0 with no names, modes 0755 or 0644, and a gzip
// header with no name, time or OS. The same files give the same bytes, so
// the same directory gives the same digest wherever it is built (with the
// same Go release, whose compressor the bytes also depend on).
func Archive(files []File) ([]byte, error) {
	sorted := slices.Clone(files)
	slices.SortFunc(sorted, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	zw.Header = gzip.Header{OS: 255}
	tw := tar.NewWriter(zw)
	for i, f := range sorted {
		if i > 0 && sorted[i-1].Name == f.Name {
			return nil, fmt.Errorf("archive: %s appears twice", f.Name)
		}
		if !fs.ValidPath(f.Name) || f.Name == "." {
			return nil, fmt.Errorf("archive: invalid entry name %q", f.Name)
		}
		h := &tar.Header{
			Name:    f.Name,
			ModTime: Epoch,
			Format:  tar.FormatPAX,
		}
		switch {
		case f.Mode.IsDir():
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, f.Name+"/", dirMode
		case f.Mode.IsRegular():
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, fileMode, int64(len(f.Data))
			if f.Mode&0o111 != 0 {
				h.Mode = execMode
			}
		default:
			return nil, fmt.Errorf("archive: %s: not a regular file or directory", f.Name)
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("archive %s: %w", f.Name, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("archive %s: %w", f.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// errNoFiles is returned when a directory has nothing to package.
var errNoFiles = errors.New("no files to package")

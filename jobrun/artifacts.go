package jobrun

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// DirArtifacts serves artifacts from unpacked directories on local disk:
// the artifact whose repository is registry.example.com/app/api is the
// directory Root/api. It stands in until job processes pull artifacts
// from the install's registry by digest; until then it does not verify
// digests, only that nothing it copies lies outside Root.
type DirArtifacts struct {
	// Root holds one directory per repository name.
	Root string
}

var _ reconciler.ArtifactSource = DirArtifacts{}

// Extract copies the artifact's directory into dir. It copies regular
// files and directories; a symbolic link is copied as the file it points
// to if that lies inside Root, and anything else is an error.
func (d DirArtifacts) Extract(ctx context.Context, a schemas.Artifact, dir string) error {
	name, err := artifactDir(a)
	if err != nil {
		return err
	}
	src, err := os.OpenRoot(d.Root)
	if err != nil {
		return fmt.Errorf("artifact %s: %w", a.Name, err)
	}
	defer src.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("artifact %s: %w", a.Name, err)
	}
	dst, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("artifact %s: %w", a.Name, err)
	}
	defer dst.Close()
	err = fs.WalkDir(src.FS(), name, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		return copyEntry(src, dst, p, strings.TrimPrefix(strings.TrimPrefix(p, name), "/"), e)
	})
	if err != nil {
		return fmt.Errorf("artifact %s from %s: %w", a.Name, d.Root, err)
	}
	return nil
}

// artifactDir returns the directory name of a's repository: the last path
// element of its local reference, or of its source reference, before the
// digest.
func artifactDir(a schemas.Artifact) (string, error) {
	ref := a.Local
	if ref == "" {
		ref = a.Source
	}
	repo, _, _ := strings.Cut(ref, "@")
	name := path.Base(repo)
	if repo == "" || name == "." || name == ".." || name == "/" || strings.ContainsRune(name, '\\') {
		return "", fmt.Errorf("artifact %s: no repository name in %q", a.Name, ref)
	}
	return name, nil
}

// copyEntry copies the entry p of src to rel in dst.
func copyEntry(src, dst *os.Root, p, rel string, e fs.DirEntry) error {
	if rel == "" {
		rel = "."
	}
	info, err := src.Stat(p)
	if err != nil {
		return err
	}
	switch {
	case info.IsDir() && e.Type()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s: symbolic link to a directory", p)
	case info.IsDir():
		return dst.MkdirAll(rel, 0o755)
	case info.Mode().IsRegular():
		return copyFile(src, dst, p, rel, info.Mode().Perm())
	default:
		return fmt.Errorf("%s: not a regular file or directory (%s)", p, info.Mode().Type())
	}
}

func copyFile(src, dst *os.Root, p, rel string, perm fs.FileMode) error {
	in, err := src.Open(p)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := dst.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

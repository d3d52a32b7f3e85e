package plugintest

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"nuon.dev/nuon/internal/oci"
)

// HostImage is a one-layer linux/amd64 image of files of this machine, at
// the same paths: each of paths (a directory whole, links followed), and
// for a dynamically linked ELF executable the shared libraries and the
// loader it needs (as ldd names them). It is the base a plugin author's
// script needs in its container image (`nuon plugin release
// --image-base`) to test that image with the interpreter this machine
// has, without a base image from elsewhere.
func HostImage(paths ...string) (v1.Image, error) {
	seen := map[string]bool{}
	var files []oci.File
	var add func(p string) error
	addDirs := func(p string) {
		for d := path.Dir(p); d != "." && d != "/" && !seen[d]; d = path.Dir(d) {
			seen[d] = true
			files = append(files, oci.File{Name: strings.TrimPrefix(d, "/"), Mode: fs.ModeDir | 0o755})
		}
	}
	add = func(p string) error {
		p = filepath.Clean(p)
		if seen[p] {
			return nil
		}
		info, err := os.Stat(p)
		if err != nil {
			return err
		}
		seen[p] = true
		addDirs(p)
		if info.IsDir() {
			files = append(files, oci.File{Name: strings.TrimPrefix(p, "/"), Mode: fs.ModeDir | 0o755})
			entries, err := os.ReadDir(p)
			if err != nil {
				return err
			}
			for _, e := range entries {
				if err := add(filepath.Join(p, e.Name())); err != nil {
					return err
				}
			}
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, oci.File{Name: strings.TrimPrefix(p, "/"), Mode: info.Mode().Perm(), Data: data})
		libs, err := sharedLibraries(p, data)
		if err != nil {
			return err
		}
		for _, l := range libs {
			if err := add(l); err != nil {
				return err
			}
		}
		return nil
	}
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("host image: %s is not an absolute path", p)
		}
		if err := add(p); err != nil {
			return nil, fmt.Errorf("host image: %w", err)
		}
	}
	slices.SortFunc(files, func(a, b oci.File) int { return strings.Compare(a.Name, b.Name) })
	layer, err := oci.Archive(files)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	// The layer's diff ID (in the config) is the digest of the tar, not
	// of its gzip: a node's containerd checks it when it unpacks the layer.
	gz, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img, err = mutate.Append(img, mutate.Addendum{Layer: gz, MediaType: types.OCILayer})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	return mutate.ConfigFile(img, cf)
}

// sharedLibraries are the libraries and loader a dynamically linked ELF
// executable needs, as ldd names them; none for anything else.
func sharedLibraries(file string, data []byte) ([]string, error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, nil // not ELF
	}
	defer f.Close()
	interp := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			interp = true
		}
	}
	if !interp || f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return nil, nil
	}
	out, err := exec.Command("ldd", file).Output()
	if err != nil {
		return nil, nil // a shared library ldd will not read: its own libraries come with its executable's
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		for _, w := range strings.Fields(sc.Text()) {
			if strings.HasPrefix(w, "/") {
				libs = append(libs, w)
			}
		}
	}
	return libs, nil
}

// HostImageList is HostImage of the paths listed in file, one a line;
// blank lines and lines starting with # are skipped.
func HostImageList(file string) (v1.Image, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			paths = append(paths, l)
		}
	}
	return HostImage(paths...)
}

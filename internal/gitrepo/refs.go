package gitrepo

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"strings"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// refsOnDisk returns the file system of a repository whose refs are files
// this package reads itself: loose ref files and packed-refs, not those of
// a linked worktree.
func (r *Repo) refsOnDisk() (billy.Filesystem, bool) {
	sf, ok := r.repo.Storer.(interface{ Filesystem() billy.Filesystem })
	if !ok {
		return nil, false
	}
	fsys := sf.Filesystem()
	if _, err := fsys.Lstat("commondir"); err == nil {
		return nil, false
	}
	return fsys, true
}

// readPackedRefsFile returns the bytes of packed-refs, nil when there is
// none.
func readPackedRefsFile(fsys billy.Filesystem) ([]byte, error) {
	f, err := fsys.Open(packedRefsFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var size int64
	if fi, err := fsys.Stat(packedRefsFile); err == nil {
		size = fi.Size()
	}
	var buf bytes.Buffer
	buf.Grow(int(size) + 512)
	_, err = buf.ReadFrom(f)
	return buf.Bytes(), err
}

// findPackedRef finds one ref in packed-refs. Lines are "<hash> <name>", and
// "^<hash>" for the value an annotated tag peels to.
func findPackedRef(data []byte, name string) (plumbing.Hash, bool) {
	for len(data) > 0 {
		i := bytes.Index(data, []byte(name))
		if i < 0 {
			return plumbing.ZeroHash, false
		}
		end := i + len(name)
		start := bytes.LastIndexByte(data[:i], '\n') + 1
		if i-start == 41 && data[i-1] == ' ' && (end == len(data) || data[end] == '\n' || data[end] == '\r') {
			if h := string(data[start : i-1]); plumbing.IsHash(h) {
				return plumbing.NewHash(h), true
			}
		}
		data = data[end:]
	}
	return plumbing.ZeroHash, false
}

// packedRefsWithPrefix lists the refs of packed-refs whose name starts
// with prefix.
func packedRefsWithPrefix(data []byte, prefix string, out map[plumbing.ReferenceName]plumbing.Hash) {
	for len(data) > 0 {
		line := data
		if nl := bytes.IndexByte(data, '\n'); nl >= 0 {
			line, data = data[:nl], data[nl+1:]
		} else {
			data = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) < 42 || line[40] != ' ' || line[0] == '#' || line[0] == '^' {
			continue
		}
		name := line[41:]
		if !bytes.HasPrefix(name, []byte(prefix)) {
			continue
		}
		if h := string(line[:40]); plumbing.IsHash(h) {
			out[plumbing.ReferenceName(name)] = plumbing.NewHash(h)
		}
	}
}

// hasLooseRefs reports whether any ref file may have a name starting with
// prefix; an error reading the folders counts as yes.
func hasLooseRefs(fsys billy.Filesystem, prefix string) bool {
	dir := prefix
	if i := strings.LastIndexByte(dir, '/'); i >= 0 {
		dir = dir[:i]
	}
	var walk func(dir string) bool
	walk = func(dir string) bool {
		infos, err := fsys.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			return false
		}
		if err != nil {
			return true
		}
		for _, fi := range infos {
			name := fsys.Join(dir, fi.Name())
			if !fi.IsDir() {
				if strings.HasPrefix(name, prefix) {
					return true
				}
				continue
			}
			if walk(name) {
				return true
			}
		}
		return false
	}
	return walk(dir)
}

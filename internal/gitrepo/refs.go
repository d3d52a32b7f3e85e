package gitrepo

import (
	"bytes"
	"errors"
	"io/fs"

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

// findPackedRef finds one ref in packed-refs, the last line of its name
// winning as when git reads a file it did not sort. Lines are "<hash>
// <name>", and "^<hash>" for the value an annotated tag peels to.
func findPackedRef(data []byte, name string) (h plumbing.Hash, found bool) {
	if name == "" {
		// No line names it, and an empty needle matches everywhere.
		return h, false
	}
	for len(data) > 0 {
		i := bytes.Index(data, []byte(name))
		if i < 0 {
			return h, found
		}
		end := i + len(name)
		start := bytes.LastIndexByte(data[:i], '\n') + 1
		// The name ends the line: a carriage return counts as the
		// line's end only before its newline, as packedRefList reads it.
		crlf := end < len(data) && data[end] == '\r' && (end+1 == len(data) || data[end+1] == '\n')
		if i-start == 41 && data[i-1] == ' ' && (end == len(data) || data[end] == '\n' || crlf) {
			if s := string(data[start : i-1]); plumbing.IsHash(s) {
				h, found = plumbing.NewHash(s), true
			}
		}
		data = data[end:]
	}
	return h, found
}

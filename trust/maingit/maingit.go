// Package maingit reads the keys of a trust role from a commit of main in
// a git object store: trust.MainKeys over go-git, the one reader the
// server, the renderer and the build agent share. Package trust itself
// stays free of git.
package maingit

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/trust"
)

// MaxFile bounds each file read: a key file or one root version.
const MaxFile = 1 << 20

// maxRootVersions bounds the versions main may hold: a root rotated every
// day for ten years stays well below it.
const maxRootVersions = 10000

// Keys returns the keys of role on the main commit in st, judged at now
// (see trust.MainKeys). A zero commit (no main yet) names no key.
func Keys(st storer.EncodedObjectStorer, commit plumbing.Hash, role trust.Role, now time.Time) (*trust.Keys, error) {
	if commit.IsZero() {
		return &trust.Keys{Role: role}, nil
	}
	m, err := Open(st, commit)
	if err != nil {
		return nil, err
	}
	return trust.MainKeys(m, role, now)
}

// Main is trust.Main over one commit's tree.
type Main struct {
	st   storer.EncodedObjectStorer
	tree *object.Tree
}

var _ trust.Main = (*Main)(nil)

// Open reads commit's tree from st.
func Open(st storer.EncodedObjectStorer, commit plumbing.Hash) (*Main, error) {
	c, err := gitobj.ReadCommit(st, commit)
	if err != nil {
		return nil, fmt.Errorf("read main %s: %w", commit, err)
	}
	t, err := gitobj.ReadTree(st, c.TreeHash)
	if err != nil {
		return nil, fmt.Errorf("read main %s: %w", commit, err)
	}
	return &Main{st: st, tree: t}, nil
}

// ReadFile returns the file at name, or an error wrapping fs.ErrNotExist.
func (m *Main) ReadFile(name string) ([]byte, error) {
	e, err := m.tree.FindEntry(name)
	if errors.Is(err, object.ErrEntryNotFound) || errors.Is(err, object.ErrDirectoryNotFound) {
		return nil, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if e.Mode != filemode.Regular && e.Mode != filemode.Deprecated && e.Mode != filemode.Executable {
		return nil, fmt.Errorf("%s: not a regular file", name)
	}
	return gitobj.ReadBlob(m.st, e.Hash, MaxFile)
}

// RootFiles returns the files under trust.Dir, nil when main has none.
func (m *Main) RootFiles() (map[string][]byte, error) {
	e, err := m.tree.FindEntry(trust.Dir)
	if errors.Is(err, object.ErrEntryNotFound) || errors.Is(err, object.ErrDirectoryNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if e.Mode != filemode.Dir {
		return nil, fmt.Errorf("%s is not a folder", trust.Dir)
	}
	dir, err := gitobj.ReadTree(m.st, e.Hash)
	if err != nil {
		return nil, err
	}
	if len(dir.Entries) > maxRootVersions {
		return nil, fmt.Errorf("%s holds %d entries, at most %d versions are read", trust.Dir, len(dir.Entries), maxRootVersions)
	}
	files := make(map[string][]byte, len(dir.Entries))
	for _, f := range dir.Entries {
		name := trust.Dir + "/" + f.Name
		if f.Mode != filemode.Regular && f.Mode != filemode.Deprecated {
			return nil, fmt.Errorf("%s is not a regular file", name)
		}
		if files[name], err = gitobj.ReadBlob(m.st, f.Hash, MaxFile); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return files, nil
}

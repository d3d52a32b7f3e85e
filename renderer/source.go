package renderer

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"testing/fstest"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"nuon.dev/nuon/schemas"
)

// LoadSource reads and validates the source files of a main commit.
func LoadSource(st storer.EncodedObjectStorer, commit plumbing.Hash) (*schemas.Source, error) {
	fsys, err := SourceFS(st, commit)
	if err != nil {
		return nil, err
	}
	return schemas.Load(fsys)
}

// SourceFS returns the source files of a commit as a file system.
func SourceFS(st storer.EncodedObjectStorer, commit plumbing.Hash) (fs.FS, error) {
	return sourceFS(st, commit, nil, nil)
}

// sourceFS reads the source files of a commit. With only, of installs/ it
// reads only the files of those installs, whose entries are in installs.
func sourceFS(st storer.EncodedObjectStorer, commit plumbing.Hash, only map[string]bool, installs map[string]entry) (fs.FS, error) {
	tree, err := commitTree(st, commit)
	if err != nil {
		return nil, fmt.Errorf("read source commit %s: %w", commit, err)
	}
	fsys := fstest.MapFS{}
	for _, e := range tree.Entries {
		switch {
		case e.Name == schemas.AppFile && e.Mode.IsFile():
			if err := addBlob(fsys, st, e.Name, e.Hash); err != nil {
				return nil, err
			}
		case e.Mode == filemode.Dir && e.Name == schemas.InstallsDir && only != nil:
			fsys[e.Name] = &fstest.MapFile{Mode: fs.ModeDir | 0o755}
			for id := range only {
				name := id + ".yaml"
				if f, ok := installs[name]; ok {
					if err := addBlob(fsys, st, e.Name+"/"+name, f.hash); err != nil {
						return nil, err
					}
				}
			}
		case e.Mode == filemode.Dir && (e.Name == schemas.ChannelsDir || e.Name == schemas.ReleasesDir || e.Name == schemas.InstallsDir):
			sub, err := object.GetTree(st, e.Hash)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", e.Name, err)
			}
			fsys[e.Name] = &fstest.MapFile{Mode: fs.ModeDir | 0o755}
			for _, f := range sub.Entries {
				name := e.Name + "/" + f.Name
				if f.Mode == filemode.Dir {
					fsys[name] = &fstest.MapFile{Mode: fs.ModeDir | 0o755}
					continue
				}
				if err := addBlob(fsys, st, name, f.Hash); err != nil {
					return nil, err
				}
			}
		}
	}
	return fsys, nil
}

func commitTree(st storer.EncodedObjectStorer, commit plumbing.Hash) (*object.Tree, error) {
	c, err := object.GetCommit(st, commit)
	if err != nil {
		return nil, err
	}
	return c.Tree()
}

func addBlob(fsys fstest.MapFS, st storer.EncodedObjectStorer, name string, h plumbing.Hash) error {
	data, err := readBlob(st, h)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	fsys[name] = &fstest.MapFile{Data: data, Mode: 0o644}
	return nil
}

func readBlob(st storer.EncodedObjectStorer, h plumbing.Hash) ([]byte, error) {
	b, err := object.GetBlob(st, h)
	if err != nil {
		return nil, err
	}
	rd, err := b.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	return io.ReadAll(rd)
}

// sourceDelta compares the source commit with the one the previous render
// was made from. When only install files changed, it returns every install
// id of the source and the ids whose file is new or changed: the state of
// any other install is the same as in the previous render, because an
// install's state depends only on its own file, nuon.yaml, channels/ and
// releases/. ok is false when a full render is needed.
func (r *renderRun) sourceDelta() (ids []string, changed map[string]bool, curInstalls map[string]entry, ok bool) {
	if !r.trusted || r.prevCommit == nil {
		return nil, nil, nil, false
	}
	if f, _ := schemas.Trailer(r.prevCommit.Message, TrailerFormat); f != strconv.Itoa(Format) {
		return nil, nil, nil, false
	}
	from, _ := schemas.Trailer(r.prevCommit.Message, schemas.TrailerSource)
	if !plumbing.IsHash(from) {
		return nil, nil, nil, false
	}
	old, err := commitTree(r.st, plumbing.NewHash(from))
	if err != nil {
		return nil, nil, nil, false
	}
	cur, err := commitTree(r.st, r.source)
	if err != nil {
		return nil, nil, nil, false
	}
	for _, name := range []string{schemas.AppFile, schemas.ChannelsDir, schemas.ReleasesDir} {
		if entryOf(cur, name) != entryOf(old, name) {
			return nil, nil, nil, false
		}
	}
	if entryOf(cur, schemas.InstallsDir) == entryOf(old, schemas.InstallsDir) {
		// Nothing that is rendered changed: every install keeps its state.
		ids = make([]string, 0, len(r.prevTrees))
		for id := range r.prevTrees {
			ids = append(ids, id)
		}
		return ids, map[string]bool{}, nil, true
	}
	oldInstalls, err := subtreeEntries(r.st, old, schemas.InstallsDir)
	if err != nil {
		return nil, nil, nil, false
	}
	if curInstalls, err = subtreeEntries(r.st, cur, schemas.InstallsDir); err != nil {
		return nil, nil, nil, false
	}
	changed = map[string]bool{}
	for name, e := range curInstalls {
		id, isYAML := strings.CutSuffix(name, ".yaml")
		same := oldInstalls[name] == e
		switch {
		case isYAML && e.mode.IsFile():
			ids = append(ids, id)
			if !same {
				changed[id] = true
			} else if _, ok := r.prevTrees[id]; !ok {
				return nil, nil, nil, false
			}
		case same || e.mode.IsFile() && !strings.HasSuffix(name, ".yml"):
			// Loading skips files that are not .yaml (a README).
		default:
			// A folder, or a .yml file: let a full load report it.
			return nil, nil, nil, false
		}
	}
	for name, e := range oldInstalls {
		if _, ok := curInstalls[name]; !ok && !e.mode.IsFile() {
			return nil, nil, nil, false
		}
	}
	return ids, changed, curInstalls, true
}

// entry is a tree entry's mode and object.
type entry struct {
	mode filemode.FileMode
	hash plumbing.Hash
}

func entryOf(t *object.Tree, name string) entry {
	for _, e := range t.Entries {
		if e.Name == name {
			return entry{e.Mode, e.Hash}
		}
	}
	return entry{}
}

// subtreeEntries lists the folder name of t, which may not exist.
func subtreeEntries(st storer.EncodedObjectStorer, t *object.Tree, name string) (map[string]entry, error) {
	out := map[string]entry{}
	e := entryOf(t, name)
	if e.hash.IsZero() {
		return out, nil
	}
	if e.mode != filemode.Dir {
		return nil, fmt.Errorf("%s is not a folder", name)
	}
	return treeEntries(st, e.hash)
}

// treeEntries reads a tree's entries by name. It parses the tree object
// itself: the trees it reads hold one entry per install, and go-git's tree
// decoding costs several times more.
func treeEntries(st storer.EncodedObjectStorer, h plumbing.Hash) (map[string]entry, error) {
	o, err := st.EncodedObject(plumbing.TreeObject, h)
	if err != nil {
		return nil, err
	}
	rd, err := o.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	data, err := io.ReadAll(rd)
	if err != nil {
		return nil, err
	}
	out := make(map[string]entry, len(data)/40)
	for len(data) > 0 {
		sp := bytes.IndexByte(data, ' ')
		if sp < 0 {
			return nil, fmt.Errorf("tree %s: malformed entry", h)
		}
		mode, err := strconv.ParseUint(string(data[:sp]), 8, 32)
		if err != nil {
			return nil, fmt.Errorf("tree %s: malformed mode", h)
		}
		data = data[sp+1:]
		nul := bytes.IndexByte(data, 0)
		if nul < 1 || len(data) < nul+1+len(plumbing.ZeroHash) {
			return nil, fmt.Errorf("tree %s: malformed entry", h)
		}
		var e entry
		e.mode = filemode.FileMode(mode)
		copy(e.hash[:], data[nul+1:])
		out[string(data[:nul])] = e
		data = data[nul+1+len(plumbing.ZeroHash):]
	}
	return out, nil
}

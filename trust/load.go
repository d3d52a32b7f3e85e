package trust

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"nuon.dev/nuon/schemas"
)

// Load reads every version under Dir in fsys (a checkout of main, or a
// tree read from git): Dir/1.json, Dir/2.json, … Each must parse and hold
// the version its name says; any other file there is refused, so that a
// mistyped name never hides a version from the chain. The versions come
// back in file order (not sorted); Chain sorts them. The error is
// schemas.Problems, every file's problems at once.
func Load(fsys fs.FS) ([]*Root, error) {
	entries, err := fs.ReadDir(fsys, Dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", Dir, err)
	}
	var files []file
	for _, e := range entries {
		name := path.Join(Dir, e.Name())
		f := file{name: name, dir: e.IsDir()}
		if !f.dir {
			f.data, f.err = fs.ReadFile(fsys, name)
		}
		files = append(files, f)
	}
	return load(files)
}

// file is one entry under Dir, read.
type file struct {
	name string
	dir  bool
	data []byte
	err  error
}

// load parses every file as Load does.
func load(files []file) ([]*Root, error) {
	var roots []*Root
	var ps schemas.Problems
	for _, f := range files {
		base := path.Base(f.name)
		v, ok := versionOf(base)
		if !ok || f.dir || path.Dir(f.name) != Dir {
			ps = append(ps, schemas.Problem{File: f.name, Message: "not a root version: files here are named <version>.json (1.json, 2.json, …)"})
			continue
		}
		if f.err != nil {
			ps = append(ps, schemas.Problem{File: f.name, Message: f.err.Error()})
			continue
		}
		r, err := Parse(f.name, f.data)
		var fps schemas.Problems
		switch {
		case errors.As(err, &fps):
			ps = append(ps, fps...)
			continue
		case err != nil:
			ps = append(ps, schemas.Problem{File: f.name, Message: err.Error()})
			continue
		}
		if r.Version != v {
			ps = append(ps, schemas.Problem{File: f.name, Field: "signed.version",
				Message: fmt.Sprintf("file %s holds version %d", base, r.Version)})
			continue
		}
		roots = append(roots, r)
	}
	if err := ps.Err(); err != nil {
		return nil, err
	}
	return roots, nil
}

// versionOf reads the version from a file name such as 12.json.
func versionOf(name string) (int64, bool) {
	s, ok := strings.CutSuffix(name, ".json")
	if !ok || s == "" || s[0] == '0' {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil && v > 0
}

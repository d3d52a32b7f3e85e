package renderer

import (
	"bytes"
	"fmt"
	"path"
	"sort"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	fdiff "github.com/go-git/go-git/v5/plumbing/format/diff"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/utils/diff"

	"github.com/sergi/go-diff/diffmatchpatch"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/schemas"
)

// diff returns a unified diff, paths as installs/<id>/…, from the install's
// previous tree (zero: none) to its new files.
func (r *renderRun) diff(id string, prevTree plumbing.Hash, files Files) (string, error) {
	old := Files{}
	if !prevTree.IsZero() {
		var err error
		if old, err = ReadFiles(r.st, prevTree); err != nil {
			return "", fmt.Errorf("render %s: read previous state: %w", id, err)
		}
	}
	return UnifiedDiff(path.Join(schemas.InstallsDir, id), old, files)
}

// ReadFiles reads an install's rendered tree back into Files, checking
// every object's hash.
func ReadFiles(st storer.EncodedObjectStorer, tree plumbing.Hash) (Files, error) {
	return gitobj.ReadFiles(st, tree, 0)
}

// UnifiedDiff renders the difference between two file sets as a unified
// diff, as `git diff` prints it, with paths under dir.
func UnifiedDiff(dir string, from, to Files) (string, error) {
	names := map[string]bool{}
	for n := range from {
		names[n] = true
	}
	for n := range to {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	p := patch{}
	for _, n := range sorted {
		a, inA := from[n]
		b, inB := to[n]
		if inA && inB && bytes.Equal(a, b) {
			continue
		}
		fp := filePatch{}
		if inA {
			fp.from = &file{path: path.Join(dir, n), hash: plumbing.ComputeHash(plumbing.BlobObject, a)}
		}
		if inB {
			fp.to = &file{path: path.Join(dir, n), hash: plumbing.ComputeHash(plumbing.BlobObject, b)}
		}
		for _, d := range diff.Do(string(a), string(b)) {
			op := fdiff.Equal
			switch d.Type {
			case diffmatchpatch.DiffInsert:
				op = fdiff.Add
			case diffmatchpatch.DiffDelete:
				op = fdiff.Delete
			}
			fp.chunks = append(fp.chunks, chunk{content: d.Text, op: op})
		}
		p = append(p, fp)
	}
	if len(p) == 0 {
		return "", nil
	}
	var buf bytes.Buffer
	if err := fdiff.NewUnifiedEncoder(&buf, fdiff.DefaultContextLines).Encode(p); err != nil {
		return "", err
	}
	return buf.String(), nil
}

type patch []fdiff.FilePatch

func (p patch) FilePatches() []fdiff.FilePatch { return p }
func (p patch) Message() string                { return "" }

type filePatch struct {
	from, to *file
	chunks   []fdiff.Chunk
}

func (f filePatch) IsBinary() bool { return false }
func (f filePatch) Files() (fdiff.File, fdiff.File) {
	var a, b fdiff.File
	if f.from != nil {
		a = f.from
	}
	if f.to != nil {
		b = f.to
	}
	return a, b
}
func (f filePatch) Chunks() []fdiff.Chunk { return f.chunks }

type file struct {
	path string
	hash plumbing.Hash
}

func (f *file) Hash() plumbing.Hash     { return f.hash }
func (f *file) Mode() filemode.FileMode { return filemode.Regular }
func (f *file) Path() string            { return f.path }

type chunk struct {
	content string
	op      fdiff.Operation
}

func (c chunk) Content() string       { return c.content }
func (c chunk) Type() fdiff.Operation { return c.op }

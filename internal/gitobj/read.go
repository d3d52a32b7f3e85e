package gitobj

import (
	"errors"
	"fmt"
	"io"
	"path"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// ErrTooLarge marks an object larger than a reader's limit. It is checked
// from the object's size before its content is read whole.
var ErrTooLarge = errors.New("object too large")

// ReadObject reads the object h of type t from st and checks that its
// content hashes to h: a store whose files were edited is caught here,
// not trusted. A positive limit refuses, with ErrTooLarge, an object whose
// size is above it before reading it. The content returned is the
// object's own (a Store's objects are not copied again): neither is to be
// changed.
func ReadObject(st storer.EncodedObjectStorer, t plumbing.ObjectType, h plumbing.Hash, limit int64) (plumbing.EncodedObject, []byte, error) {
	o, content, err := readUnchecked(st, t, h, limit)
	if err != nil {
		return nil, nil, err
	}
	if got := Hash(t, content); got != h {
		return nil, nil, corrupt(h, got)
	}
	return o, content, nil
}

// corrupt is the error of the object h whose content hashes to got.
func corrupt(h, got plumbing.Hash) error {
	return fmt.Errorf("object %s is corrupt: its content hashes to %s", h, got)
}

// readUnchecked is ReadObject without the check of the content's hash,
// for a caller that checks it (ReadTreeShared).
func readUnchecked(st storer.EncodedObjectStorer, t plumbing.ObjectType, h plumbing.Hash, limit int64) (plumbing.EncodedObject, []byte, error) {
	if limit > 0 {
		// From the object's header (Store.EncodedObjectSize): reading
		// the object first would inflate it whole.
		size, err := st.EncodedObjectSize(h)
		if err != nil {
			return nil, nil, err
		}
		if size > limit {
			return nil, nil, fmt.Errorf("%s %s: %w: %d bytes, the limit is %d", t, h, ErrTooLarge, size, limit)
		}
	}
	var o plumbing.EncodedObject
	var err error
	if s, ok := st.(*Store); ok {
		// The hash is checked below.
		o, err = s.encodedObject(t, h, false)
	} else {
		o, err = st.EncodedObject(t, h)
	}
	if err != nil {
		return nil, nil, err
	}
	if limit > 0 && o.Size() > limit {
		return nil, nil, fmt.Errorf("%s %s: %w: %d bytes, the limit is %d", t, h, ErrTooLarge, o.Size(), limit)
	}
	content, err := objectContent(o, h, t)
	if err != nil {
		return nil, nil, err
	}
	return o, content, nil
}

// objectContent returns the content of o, the object h of type t.
func objectContent(o plumbing.EncodedObject, h plumbing.Hash, t plumbing.ObjectType) ([]byte, error) {
	if p, ok := o.(*packedObject); ok {
		// Read for this call alone (a Store never hands out a delta base
		// it keeps): its content is not copied, which at 100,000
		// installs is megabytes for main's installs/ tree.
		return p.content, nil
	}
	r, err := o.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	// Read into a buffer of the size the object says, and no more: the
	// installs/ tree of a fleet of 100,000 is megabytes, which io.ReadAll
	// would copy as it grows.
	var content []byte
	if size := o.Size(); size >= 0 && size <= maxObjectSize {
		content = make([]byte, size)
		if _, err := io.ReadFull(r, content); err != nil {
			return nil, fmt.Errorf("read %s %s: %w", t, h, err)
		}
		if n, _ := r.Read(make([]byte, 1)); n > 0 {
			return nil, fmt.Errorf("object %s is corrupt: longer than its header says", h)
		}
	} else if content, err = io.ReadAll(r); err != nil {
		return nil, err
	}
	return content, nil
}

// ReadCommit reads and decodes the commit h, checking its hash.
func ReadCommit(st storer.EncodedObjectStorer, h plumbing.Hash) (*object.Commit, error) {
	o, _, err := ReadObject(st, plumbing.CommitObject, h, 0)
	if err != nil {
		return nil, err
	}
	return object.DecodeCommit(st, o)
}

// ReadTree reads and decodes the tree h, checking its hash.
func ReadTree(st storer.EncodedObjectStorer, h plumbing.Hash) (*object.Tree, error) {
	o, _, err := ReadObject(st, plumbing.TreeObject, h, 0)
	if err != nil {
		return nil, err
	}
	return object.DecodeTree(st, o)
}

// ReadBlob reads the blob h, checking its hash; a positive limit bounds
// its size as ReadObject does.
func ReadBlob(st storer.EncodedObjectStorer, h plumbing.Hash, limit int64) ([]byte, error) {
	_, content, err := ReadObject(st, plumbing.BlobObject, h, limit)
	return content, err
}

// ReadFiles reads every file under the tree h, by slash-separated path,
// checking every object's hash. A positive limit bounds each file's size.
// Submodules are an error: nothing nuon writes or reads holds one.
func ReadFiles(st storer.EncodedObjectStorer, h plumbing.Hash, limit int64) (map[string][]byte, error) {
	files := map[string][]byte{}
	var walk func(prefix string, h plumbing.Hash) error
	walk = func(prefix string, h plumbing.Hash) error {
		t, err := ReadTree(st, h)
		if err != nil {
			return err
		}
		for _, e := range t.Entries {
			p := path.Join(prefix, e.Name)
			switch {
			case e.Mode == 0o040000:
				if err := walk(p, e.Hash); err != nil {
					return err
				}
			case e.Mode.IsFile():
				data, err := ReadBlob(st, e.Hash, limit)
				if err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
				files[p] = data
			default:
				return fmt.Errorf("%s: unexpected tree entry of mode %s", p, e.Mode)
			}
		}
		return nil
	}
	return files, walk("", h)
}

// ReadCommitFiles reads the files of the commit h's tree.
func ReadCommitFiles(st storer.EncodedObjectStorer, h plumbing.Hash, limit int64) (*object.Commit, map[string][]byte, error) {
	c, err := ReadCommit(st, h)
	if err != nil {
		return nil, nil, err
	}
	files, err := ReadFiles(st, c.TreeHash, limit)
	return c, files, err
}

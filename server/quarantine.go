package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// Bounds of one push, held whole in memory until it is verified: a status
// push is a few kilobytes.
const (
	// maxPushPack bounds the pack a push sends, compressed.
	maxPushPack = 8 << 20
	// maxPushObjects bounds the pack's objects.
	maxPushObjects = 50000
	// maxPushInflated bounds the objects' content once inflated and
	// their deltas resolved, thin-pack bases read from the repository
	// included.
	maxPushInflated = 32 << 20
	// maxPushesHeld bounds the pushes read into memory at once, per
	// core: more wait their turn (at most 16 × 40 MiB on two cores).
	maxPushesHeld = 8
)

// errTooLarge is a push over one of the bounds.
var errTooLarge = errors.New("push too large")

// objectSource is where objects are read: the repository (objectPool),
// or, for a push, only the install's closure of it (closureSource).
type objectSource interface {
	info(h plumbing.Hash) (plumbing.ObjectType, int64, error)
	read(h plumbing.Hash, limit int64) (plumbing.ObjectType, []byte, error)
}

// quarantine holds a push's objects in memory while they are checked:
// nothing reaches the repository before the push is accepted. It is the
// storage go-git's pack parser writes into; the objects the pack's deltas
// are based on and does not hold (a thin pack) are read from repo.
type quarantine struct {
	objs  map[plumbing.Hash]*plumbing.MemoryObject
	order []plumbing.Hash // as parsed
	held  int64           // bytes of content held or read
	repo  objectSource
}

var _ storer.EncodedObjectStorer = (*quarantine)(nil)

func newQuarantine(repo objectSource) *quarantine {
	return &quarantine{objs: map[plumbing.Hash]*plumbing.MemoryObject{}, repo: repo}
}

// readPack parses a push's pack (empty: the push brings no objects) into
// q with go-git's parser, which resolves deltas, thin ones against the
// repository, and checks the pack's checksum. The objects' declared sizes
// and the target sizes of their deltas are bounded first, in one pass of
// go-git's scanner, so that a small pack cannot make the parser allocate
// more than maxPushInflated.
func (q *quarantine) readPack(pack []byte) error {
	if len(pack) == 0 {
		return nil
	}
	if len(pack) > maxPushPack {
		return fmt.Errorf("%w: pack over %d MiB", errTooLarge, maxPushPack>>20)
	}
	if err := boundPack(pack); err != nil {
		return err
	}
	p, err := packfile.NewParserWithStorage(packfile.NewScanner(bytes.NewReader(pack)), q)
	if err != nil {
		return err
	}
	if _, err := p.Parse(); err != nil {
		return fmt.Errorf("read pack: %w", err)
	}
	return nil
}

// boundPack refuses a pack whose objects would hold more than
// maxPushInflated bytes once inflated and resolved.
func boundPack(pack []byte) error {
	sc := packfile.NewScanner(bytes.NewReader(pack))
	_, n, err := sc.Header()
	if err != nil {
		return fmt.Errorf("read pack: %w", err)
	}
	if n > maxPushObjects {
		return fmt.Errorf("%w: %d objects, over %d", errTooLarge, n, maxPushObjects)
	}
	var total int64
	var delta bytes.Buffer
	for range n {
		oh, err := sc.NextObjectHeader()
		if err != nil {
			return fmt.Errorf("read pack: %w", err)
		}
		if oh.Length < 0 || oh.Length > maxPushInflated-total {
			return fmt.Errorf("%w: objects over %d MiB", errTooLarge, maxPushInflated>>20)
		}
		total += oh.Length
		if !oh.Type.IsDelta() {
			continue
		}
		delta.Reset()
		if _, _, err := sc.NextObject(&delta); err != nil {
			return fmt.Errorf("read pack: %w", err)
		}
		target, err := deltaTargetSize(delta.Bytes())
		if err != nil {
			return fmt.Errorf("read pack: %w", err)
		}
		if target > uint64(maxPushInflated-total) {
			return fmt.Errorf("%w: objects over %d MiB", errTooLarge, maxPushInflated>>20)
		}
		total += int64(target)
	}
	return nil
}

// deltaTargetSize reads the size of a delta's result: the second of the
// two sizes (LEB128) that start it.
func deltaTargetSize(d []byte) (uint64, error) {
	var size uint64
	for i := range 2 {
		size = 0
		for shift := uint(0); ; shift += 7 {
			if len(d) == 0 || shift > 56 {
				return 0, errors.New("bad delta header")
			}
			b := d[0]
			d = d[1:]
			size |= uint64(b&0x7f) << shift
			if b&0x80 == 0 {
				break
			}
		}
		_ = i
	}
	return size, nil
}

// NewEncodedObject is a memory object.
func (q *quarantine) NewEncodedObject() plumbing.EncodedObject { return &plumbing.MemoryObject{} }

// SetEncodedObject keeps a parsed object.
func (q *quarantine) SetEncodedObject(o plumbing.EncodedObject) (plumbing.Hash, error) {
	mo, ok := o.(*plumbing.MemoryObject)
	if !ok {
		return plumbing.ZeroHash, errors.New("quarantine: not a memory object")
	}
	h := mo.Hash()
	if _, ok := q.objs[h]; ok {
		return h, nil
	}
	if q.held += mo.Size(); q.held > maxPushInflated {
		return plumbing.ZeroHash, fmt.Errorf("%w: objects over %d MiB", errTooLarge, maxPushInflated>>20)
	}
	q.objs[h] = mo
	q.order = append(q.order, h)
	return h, nil
}

// EncodedObject returns a pushed object, else the repository's (the base
// of a thin pack's delta).
func (q *quarantine) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if o, ok := q.objs[h]; ok {
		if t != plumbing.AnyObject && o.Type() != t {
			return nil, plumbing.ErrObjectNotFound
		}
		return o, nil
	}
	if q.repo == nil {
		return nil, plumbing.ErrObjectNotFound
	}
	typ, data, err := q.repo.read(h, maxPushInflated-q.held)
	if errors.Is(err, errNoObject) {
		return nil, plumbing.ErrObjectNotFound
	}
	if err != nil {
		return nil, err
	}
	if t != plumbing.AnyObject && typ != t {
		return nil, plumbing.ErrObjectNotFound
	}
	q.held += int64(len(data))
	o := &plumbing.MemoryObject{}
	o.SetType(typ)
	o.Write(data)
	return o, nil
}

// HasEncodedObject reports whether a pushed object is held.
func (q *quarantine) HasEncodedObject(h plumbing.Hash) error {
	if _, ok := q.objs[h]; ok {
		return nil
	}
	return plumbing.ErrObjectNotFound
}

// EncodedObjectSize is the size of a pushed object.
func (q *quarantine) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	if o, ok := q.objs[h]; ok {
		return o.Size(), nil
	}
	return 0, plumbing.ErrObjectNotFound
}

// IterEncodedObjects is not needed by the parser.
func (q *quarantine) IterEncodedObjects(plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	return nil, errors.New("quarantine: no iteration")
}

// AddAlternate is not supported.
func (q *quarantine) AddAlternate(string) error { return errors.New("quarantine: no alternates") }

// commit reads and decodes a commit, pushed or already in the repository.
func (q *quarantine) commit(h plumbing.Hash) (*object.Commit, error) {
	o, err := q.EncodedObject(plumbing.AnyObject, h)
	if err != nil {
		return nil, errors.New("object not found")
	}
	if o.Type() != plumbing.CommitObject {
		return nil, fmt.Errorf("is a %s, not a commit", o.Type())
	}
	c := &object.Commit{}
	if err := c.Decode(o); err != nil {
		return nil, err
	}
	return c, nil
}

// connected checks that every object the pushed commits name is there, as
// git receive-pack's connectivity check does: each commit's tree, and
// everything a pushed tree names, is pushed or readable through q.repo
// (for a push, the install's closure) with the type the tree says. What
// it reads is taken to be complete, as git takes the repository. It
// returns the first missing object's error.
func (q *quarantine) connected(commits []*object.Commit) error {
	seen := map[plumbing.Hash]bool{}
	var outside []need
	var walk func(h plumbing.Hash, t plumbing.ObjectType) error
	walk = func(h plumbing.Hash, t plumbing.ObjectType) error {
		if seen[h] {
			return nil
		}
		seen[h] = true
		o, ok := q.objs[h]
		if !ok {
			outside = append(outside, need{h, t})
			return nil
		}
		if o.Type() != t {
			return fmt.Errorf("object %s is a %s, not a %s", h, o.Type(), t)
		}
		if t != plumbing.TreeObject {
			return nil
		}
		tree := &object.Tree{}
		if err := tree.Decode(o); err != nil {
			return fmt.Errorf("tree %s: %w", h, err)
		}
		for _, e := range tree.Entries {
			var et plumbing.ObjectType
			switch e.Mode {
			case filemode.Submodule:
				continue
			case filemode.Dir:
				et = plumbing.TreeObject
			default:
				et = plumbing.BlobObject
			}
			if err := walk(e.Hash, et); err != nil {
				return err
			}
		}
		return nil
	}
	for _, c := range commits {
		if err := walk(c.TreeHash, plumbing.TreeObject); err != nil {
			return err
		}
	}
	for _, n := range outside {
		if q.repo == nil {
			return fmt.Errorf("missing object %s", n.hash)
		}
		t, _, err := q.repo.info(n.hash)
		if errors.Is(err, errNoObject) {
			return fmt.Errorf("missing object %s", n.hash)
		}
		if err != nil {
			return err
		}
		if t != n.typ {
			return fmt.Errorf("object %s is a %s, not a %s", n.hash, t, n.typ)
		}
	}
	return nil
}

// need is an object a pushed tree names and the push did not bring.
type need struct {
	hash plumbing.Hash
	typ  plumbing.ObjectType
}

// content returns a held object's type and content.
func (q *quarantine) content(h plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	o := q.objs[h]
	r, err := o.Reader()
	if err != nil {
		return plumbing.InvalidObject, nil, err
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	return o.Type(), data, err
}

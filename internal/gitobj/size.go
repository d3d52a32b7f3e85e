package gitobj

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// EncodedObjectSize returns the size of object h's content without
// reading the content: from the header of its loose file or pack entry,
// and for a delta entry from the first bytes of the delta, which give the
// size of the object it makes. A reader that must refuse large objects
// (source files have a size cap) asks this first, so that a crafted 50 MB
// blob costs a few hundred bytes of inflating, not 50 MB.
func (s *Store) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	// The packs known, a loose file, then the packs added since they were
	// listed, as encodedObject reads.
	pack, idx, off, ok := s.lookup(h, false)
	if !ok {
		size, err := looseSize(s.Filesystem(), h)
		if err == nil {
			return size, nil
		}
		if !errors.Is(err, errFallback) {
			return 0, err
		}
		pack, idx, off, ok = s.lookup(h, true)
	}
	if ok {
		size, err := packedSize(s.Filesystem(), pack, idx, off)
		if err == nil {
			return size, nil
		}
		if !errors.Is(err, errFallback) {
			return 0, fmt.Errorf("size of object %s in %s: %w", h, pack, err)
		}
	}
	return s.Storage.EncodedObjectSize(h)
}

// looseSize reads the size from the header of the loose object h;
// errFallback when there is no such file.
func looseSize(fsys billy.Filesystem, h plumbing.Hash) (int64, error) {
	hex := h.String()
	f, err := fsys.Open(fsys.Join("objects", hex[:2], hex[2:]))
	if err != nil {
		return 0, errFallback
	}
	defer f.Close()
	zr, err := openInflater(bufio.NewReaderSize(f, 512))
	if err != nil {
		return 0, fmt.Errorf("read loose object %s: %w", h, err)
	}
	defer closeInflater(zr)
	var hdr [32]byte
	n, err := io.ReadFull(zr, hdr[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return 0, fmt.Errorf("read loose object %s: %w", h, err)
	}
	_, size, ok := parseLooseHeader(hdr[:n])
	if !ok {
		return 0, fmt.Errorf("read loose object %s: malformed header", h)
	}
	return size, nil
}

// packedSize reads the size of the object at off of pack base, whose
// index is idx.
func packedSize(fsys billy.Filesystem, base string, idx *packIndexView, off int64) (int64, error) {
	f, err := idx.packFile(fsys, base)
	if err != nil {
		return 0, err
	}
	var hdr [32]byte
	n, err := f.ReadAt(hdr[:], off)
	if n == 0 {
		return 0, fmt.Errorf("entry at %d: %w", off, err)
	}
	t, size, hlen, err := parseEntryHeader(hdr[:n])
	if err != nil {
		return 0, fmt.Errorf("entry at %d: %w", off, err)
	}
	switch t {
	case plumbing.CommitObject, plumbing.TreeObject, plumbing.BlobObject, plumbing.TagObject:
		return size, nil
	case plumbing.OFSDeltaObject:
		_, l, ok := parseOffset(hdr[hlen:n])
		if !ok {
			return 0, fmt.Errorf("entry at %d: malformed delta base offset", off)
		}
		hlen += l
	case plumbing.REFDeltaObject:
		hlen += hashLen
	default:
		return 0, fmt.Errorf("entry at %d: type %d", off, t)
	}
	// A delta opens with the size of its base and of the object it
	// makes, at most 10 bytes each. The inflater is one kept for reuse:
	// a new one allocates its 32 KB window, which for the 100,000 install
	// files a render sizes was half of what loading them allocated.
	zr, err := openInflater(bufio.NewReaderSize(io.NewSectionReader(f, off+int64(hlen), 1<<62), 512))
	if err != nil {
		return 0, fmt.Errorf("entry at %d: %w", off, err)
	}
	defer closeInflater(zr)
	var sizes [20]byte
	m, err := io.ReadFull(zr, sizes[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return 0, fmt.Errorf("entry at %d: %w", off, err)
	}
	_, rest, ok := deltaSize(sizes[:m])
	if !ok {
		return 0, fmt.Errorf("entry at %d: malformed delta", off)
	}
	target, _, ok := deltaSize(rest)
	if !ok || target > 1<<62 {
		return 0, fmt.Errorf("entry at %d: malformed delta", off)
	}
	return int64(target), nil
}

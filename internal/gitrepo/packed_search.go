package gitrepo

import (
	"bytes"
	"errors"
	"io"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
)

// errNoSearch: packed-refs has a line the search does not read (longer
// than searchLine, or not "<id> <name>"); the caller reads the file whole.
var errNoSearch = errors.New("packed-refs cannot be searched")

// searchLine bounds one line of packed-refs the search reads: an id, a
// space, a ref name and the newline.
const searchLine = 1024

// searchWindow is the size of range the search reads and scans whole.
const searchWindow = 4 << 10

// searchPackedRef finds name in packed-refs content that git wrote sorted
// (sortedPackedRefs; the caller checks), of size bytes read through r, by
// binary search on its lines as git searches its mmap: a compare-and-swap
// of one ref packed among a million read 150 MB to find one line. Lines
// starting "^" (an annotated tag's peeled id) or "#" are skipped. window
// is how small the range gets before it is read and scanned whole. It
// returns errNoSearch for a line it cannot read.
func searchPackedRef(r io.ReaderAt, size int64, name string, window int64) (plumbing.Hash, bool, error) {
	got, h, ok, err := searchPackedFrom(r, size, name, window)
	if err != nil || !ok || got != name {
		return plumbing.ZeroHash, false, err
	}
	return h, true, nil
}

// searchPackedPrefix reports whether a ref of packed-refs content that git
// wrote sorted has a name starting with prefix, found as searchPackedRef
// finds a name: the first ref at or after prefix in git's order is the
// one. A new ref's check that no ref lives under its name as a folder
// scanned all 150 MB of a million installs' packed-refs.
func searchPackedPrefix(r io.ReaderAt, size int64, prefix string, window int64) (bool, error) {
	got, _, ok, err := searchPackedFrom(r, size, prefix, window)
	return ok && strings.HasPrefix(got, prefix), err
}

// searchPackedFrom returns the first ref of packed-refs content that git
// wrote sorted whose name is key or after it (bytewise, git's order), and
// its id; ok is false when every name is before key. r, size and window
// are as for searchPackedRef; errNoSearch for a line it cannot read.
func searchPackedFrom(r io.ReaderAt, size int64, key string, window int64) (name string, h plumbing.Hash, ok bool, err error) {
	if len(key)+43 > searchLine {
		return "", plumbing.ZeroHash, false, errNoSearch
	}
	buf := make([]byte, searchLine)
	read := func(off int64) ([]byte, error) {
		n, err := r.ReadAt(buf, off)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return buf[:n], nil
	}
	// nextStart is the first line start at or after off.
	nextStart := func(off int64) (int64, error) {
		if off == 0 {
			return 0, nil
		}
		b, err := read(off - 1)
		if err != nil {
			return 0, err
		}
		i := bytes.IndexByte(b, '\n')
		switch {
		case i >= 0:
			return off + int64(i), nil
		case off-1+int64(len(b)) >= size:
			return size, nil
		}
		return 0, errNoSearch
	}
	// refLine is the first ref line starting at or after start, a line
	// start: its offset (size: none), its name and id, and the next
	// line's start.
	refLine := func(start int64) (at int64, name []byte, h plumbing.Hash, next int64, err error) {
		for start < size {
			b, err := read(start)
			if err != nil {
				return 0, nil, h, 0, err
			}
			line, _, found := bytes.Cut(b, []byte{'\n'})
			if !found && start+int64(len(b)) < size {
				return 0, nil, h, 0, errNoSearch
			}
			next := start + int64(len(line)) + 1
			if len(line) > 0 && (line[0] == '^' || line[0] == '#') {
				start = next
				continue
			}
			line = bytes.TrimSuffix(line, []byte{'\r'})
			if len(line) < 42 || line[40] != ' ' {
				return 0, nil, h, 0, errNoSearch
			}
			if n, err := hexDecode(h[:], string(line[:40])); err != nil || n != len(h) {
				return 0, nil, h, 0, errNoSearch
			}
			return start, line[41:], h, next, nil
		}
		return size, nil, h, size, nil
	}
	// Every ref line starting before lo, a line start, is before key; the
	// first ref line starting at or after hi is the one sought (none at
	// size).
	lo, hi := int64(0), size
	for hi-lo > window {
		mid := lo + (hi-lo)/2
		p, err := nextStart(mid)
		if err != nil {
			return "", plumbing.ZeroHash, false, err
		}
		if p >= hi {
			hi = mid
			continue
		}
		at, got, h, next, err := refLine(p)
		if err != nil {
			return "", plumbing.ZeroHash, false, err
		}
		if at >= hi {
			hi = mid
			continue
		}
		switch c := bytes.Compare(got, []byte(key)); {
		case c == 0:
			return key, h, true, nil
		case c < 0:
			lo = next
		default:
			// No ref line starts in [mid, at): the one at at is the
			// first at or after mid.
			hi = mid
		}
	}
	// Scanned from lo: the first ref line at or after key is in [lo, hi)
	// or the first at or after hi, one line more.
	for lo < size {
		at, got, h, next, err := refLine(lo)
		if err != nil {
			return "", plumbing.ZeroHash, false, err
		}
		if at >= size {
			break
		}
		if bytes.Compare(got, []byte(key)) >= 0 {
			return string(got), h, true, nil
		}
		lo = next
	}
	return "", plumbing.ZeroHash, false, nil
}

package gitrepo

import (
	"bytes"
	"errors"
	"io"

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
	if len(name)+43 > searchLine {
		return plumbing.ZeroHash, false, errNoSearch
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
	// The line of name, if there is one, starts in [lo, hi); lo is a
	// line start.
	lo, hi := int64(0), size
	for hi-lo > window {
		mid := lo + (hi-lo)/2
		p, err := nextStart(mid)
		if err != nil {
			return plumbing.ZeroHash, false, err
		}
		if p >= hi {
			hi = mid
			continue
		}
		at, got, h, next, err := refLine(p)
		if err != nil {
			return plumbing.ZeroHash, false, err
		}
		if at >= hi {
			hi = mid
			continue
		}
		switch c := bytes.Compare(got, []byte(name)); {
		case c == 0:
			return h, true, nil
		case c < 0:
			lo = next
		default:
			// No ref line starts in [mid, at).
			hi = mid
		}
	}
	for lo < hi {
		at, got, h, next, err := refLine(lo)
		if err != nil {
			return plumbing.ZeroHash, false, err
		}
		if at >= hi {
			break
		}
		if string(got) == name {
			return h, true, nil
		}
		lo = next
	}
	return plumbing.ZeroHash, false, nil
}

package gitobj

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
)

// errBadIndex is the error of an index file this package cannot read.
var errBadIndex = errors.New("malformed pack index")

// idxHeader opens a version 2 pack index: a magic number and the version.
var idxHeader = []byte{0xff, 't', 'O', 'c', 0, 0, 0, 2}

// Sizes of the parts of a version 2 pack index.
const (
	fanoutLen   = 256 * 4
	hashLen     = len(plumbing.ZeroHash)
	idxFixedLen = 8 + fanoutLen + 2*hashLen // header, fan-out, the two checksums
)

// packIndexView is a parsed version 2 pack index, read in place: a fan-out
// table counting the objects by first byte of their id, the ids sorted,
// their CRC-32s, their offsets in 32 bits (the high bit sends to the table
// of 64-bit offsets that follows, for packs past 2 GiB), then the pack's
// checksum and the index's own.
type packIndexView struct {
	count   int
	fanout  []byte
	names   []byte
	offsets []byte
	large   []byte

	// pack is the pack file itself, opened by the first read (packFile).
	pack struct {
		once sync.Once
		f    io.ReaderAt
		err  error
	}
}

// parseIndex checks the layout of a version 2 pack index and returns a
// view of it. It does not verify the checksums.
func parseIndex(data []byte) (*packIndexView, error) {
	if len(data) < idxFixedLen || !bytes.Equal(data[:8], idxHeader) {
		return nil, fmt.Errorf("%w: not a version 2 index", errBadIndex)
	}
	fanout := data[8 : 8+fanoutLen]
	prev := uint32(0)
	for i := 0; i < 256; i++ {
		n := binary.BigEndian.Uint32(fanout[i*4:])
		if n < prev {
			return nil, fmt.Errorf("%w: fan-out table decreases", errBadIndex)
		}
		prev = n
	}
	count := int(prev)
	rest := len(data) - idxFixedLen
	if count > rest/(hashLen+8) {
		return nil, fmt.Errorf("%w: %d objects do not fit in %d bytes", errBadIndex, count, len(data))
	}
	p := &packIndexView{count: count, fanout: fanout}
	pos := 8 + fanoutLen
	p.names = data[pos : pos+count*hashLen]
	pos += count*hashLen + count*4 // the names, then the CRC-32s
	p.offsets = data[pos : pos+count*4]
	pos += count * 4
	large := len(data) - 2*hashLen - pos
	if large%8 != 0 {
		return nil, fmt.Errorf("%w: table of 64-bit offsets is %d bytes", errBadIndex, large)
	}
	p.large = data[pos : pos+large]
	return p, nil
}

// find returns the pack offset of the object h.
func (p *packIndexView) find(h plumbing.Hash) (int64, bool) {
	lo := 0
	if h[0] > 0 {
		lo = int(binary.BigEndian.Uint32(p.fanout[(int(h[0])-1)*4:]))
	}
	hi := int(binary.BigEndian.Uint32(p.fanout[int(h[0])*4:]))
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		switch c := bytes.Compare(p.names[mid*hashLen:(mid+1)*hashLen], h[:]); {
		case c == 0:
			return p.offset(mid)
		case c < 0:
			lo = mid + 1
		default:
			hi = mid
		}
	}
	return 0, false
}

// offset returns the offset of the i-th object; false when the index
// sends it outside the table of 64-bit offsets.
func (p *packIndexView) offset(i int) (int64, bool) {
	o := binary.BigEndian.Uint32(p.offsets[i*4:])
	if o&0x80000000 == 0 {
		return int64(o), true
	}
	j := int(o & 0x7fffffff)
	if j >= len(p.large)/8 {
		return 0, false
	}
	off := binary.BigEndian.Uint64(p.large[j*8:])
	if off > 1<<62 {
		return 0, false
	}
	return int64(off), true
}

// name returns the id of the i-th object.
func (p *packIndexView) name(i int) plumbing.Hash {
	var h plumbing.Hash
	copy(h[:], p.names[i*hashLen:])
	return h
}

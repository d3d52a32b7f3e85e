package gitobj

import (
	"encoding/binary"
	"errors"
	"hash/adler32"
)

// errNotStored marks a zlib stream that is not stored blocks alone, for
// the inflater to read.
var errNotStored = errors.New("not a stored zlib stream")

// errStoredCut is a stream of stored blocks cut short, or whose lengths
// disagree.
var errStoredCut = errors.New("zlib stream of stored blocks cut short or malformed")

// unstore returns the content of data, a zlib stream of stored blocks
// (what git writes at core.looseCompression 0, as the tenant server sets
// it), moved in place to the start of data: one copy, where the inflater
// copied each block through its window. It checks the stream's adler32
// only when sum is set: a reader that checks the object's hash (ReadObject)
// has the content checked already, and at a million installs the sum of
// main's 41 MB installs/ tree was some 14 ms of a one-install change.
// errNotStored, with data unchanged, when a block is compressed or the
// stream is not zlib as zlib writes it (a preset dictionary, a header
// that fails its check, bytes after its checksum): the inflater reads it
// then. Any other error when the stream is cut or its lengths disagree.
func unstore(data []byte, sum bool) ([]byte, error) {
	if len(data) < 2 || data[0]&0x0f != 8 || data[0]>>4 > 7 || data[1]&0x20 != 0 || (uint(data[0])<<8|uint(data[1]))%31 != 0 {
		return nil, errNotStored
	}
	// Checked whole before anything is moved.
	end, err := storedEnd(data)
	if err != nil {
		return nil, err
	}
	out := 0
	for in, last := 2, false; !last; {
		last = data[in]&1 != 0
		n := int(binary.LittleEndian.Uint16(data[in+1:]))
		out += copy(data[out:], data[in+5:in+5+n])
		in += 5 + n
	}
	if sum && adler32.Checksum(data[:out]) != binary.BigEndian.Uint32(data[end:]) {
		return nil, errors.New("zlib stream: checksum mismatch")
	}
	return data[:out], nil
}

// storedEnd walks the stored blocks of the zlib stream data, after its
// 2-byte header, and returns where its checksum starts.
func storedEnd(data []byte) (int, error) {
	in := 2
	for {
		if in >= len(data) {
			return 0, errStoredCut
		}
		hdr := data[in]
		if hdr>>1&3 != 0 {
			return 0, errNotStored
		}
		if in+5 > len(data) {
			return 0, errStoredCut
		}
		n := int(binary.LittleEndian.Uint16(data[in+1:]))
		if ^binary.LittleEndian.Uint16(data[in+3:]) != uint16(n) || in+5+n > len(data) {
			return 0, errStoredCut
		}
		in += 5 + n
		if hdr&1 != 0 {
			break
		}
	}
	switch {
	case in+4 > len(data):
		return 0, errStoredCut
	case in+4 < len(data):
		return 0, errNotStored
	}
	return in, nil
}

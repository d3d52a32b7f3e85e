package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// maxPkt is git's largest pkt-line (LARGE_PACKET_MAX).
const maxPkt = 65520

// Special pkt-lines.
const (
	pktFlush = "0000"
	pktDelim = "0001"
)

var errFlush = errors.New("flush packet")
var errDelim = errors.New("delim packet")

// readPkt reads one pkt-line; flush and delim packets are errFlush and
// errDelim. raw is the packet as sent, header included.
func readPkt(r *bufio.Reader) (payload []byte, raw []byte, err error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, nil, err
	}
	n, err := strconv.ParseUint(string(h[:]), 16, 16)
	if err != nil {
		return nil, nil, fmt.Errorf("bad pkt-line length %q", h[:])
	}
	switch {
	case n == 0:
		return nil, h[:], errFlush
	case n == 1:
		return nil, h[:], errDelim
	case n < 4 || n > maxPkt:
		return nil, nil, fmt.Errorf("bad pkt-line length %d", n)
	}
	raw = make([]byte, n)
	copy(raw, h[:])
	if _, err := io.ReadFull(r, raw[4:]); err != nil {
		return nil, nil, err
	}
	return raw[4:], raw, nil
}

// pkt appends s as a pkt-line.
func pkt(b []byte, s string) []byte {
	b = appendPktLen(b, len(s)+4)
	return append(b, s...)
}

// appendPktLen appends n as a pkt-line length: four lower-case hex digits.
// It is on every poll's path, so it does not go through fmt.
func appendPktLen(b []byte, n int) []byte {
	const hex = "0123456789abcdef"
	return append(b, hex[n>>12&0xf], hex[n>>8&0xf], hex[n>>4&0xf], hex[n&0xf])
}

// nextPkt splits the first pkt-line off data, a whole request in memory:
// payload is the line without its length (a subslice of data, not a
// copy), rest what follows. Flush and delim packets are errFlush and
// errDelim.
func nextPkt(data []byte) (payload, rest []byte, err error) {
	if len(data) < 4 {
		if len(data) == 0 {
			return nil, nil, io.EOF
		}
		return nil, nil, io.ErrUnexpectedEOF
	}
	n := 0
	for _, c := range data[:4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return nil, nil, fmt.Errorf("bad pkt-line length %q", data[:4])
		}
		n = n<<4 | int(d)
	}
	switch {
	case n == 0:
		return nil, data[4:], errFlush
	case n == 1:
		return nil, data[4:], errDelim
	case n < 4 || n > maxPkt:
		return nil, nil, fmt.Errorf("bad pkt-line length %d", n)
	case n > len(data):
		return nil, nil, io.ErrUnexpectedEOF
	}
	return data[4:n], data[n:], nil
}

// sideband wraps data on band (1 data, 2 progress, 3 error).
func sideband(b []byte, band byte, data []byte) []byte {
	for len(data) > 0 {
		n := min(len(data), maxPkt-5)
		b = appendPktLen(b, n+5)
		b = append(b, band)
		b = append(b, data[:n]...)
		data = data[n:]
	}
	return b
}

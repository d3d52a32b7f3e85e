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
	b = fmt.Appendf(b, "%04x", len(s)+4)
	return append(b, s...)
}

// sideband wraps data on band (1 data, 2 progress, 3 error).
func sideband(b []byte, band byte, data []byte) []byte {
	for len(data) > 0 {
		n := min(len(data), maxPkt-5)
		b = fmt.Appendf(b, "%04x", n+5)
		b = append(b, band)
		b = append(b, data[:n]...)
		data = data[n:]
	}
	return b
}

package gitproto

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Pkt-line framing (gitprotocol-common): four hex digits give the length of
// the packet, header included; lengths 0, 1 and 2 are the special packets
// below and 3 is invalid.
const (
	// pktMax is git's LARGE_PACKET_MAX, the largest packet, header included.
	pktMax = 65520
	// pktMaxData is the largest payload of one packet.
	pktMaxData = pktMax - 4
)

// pktKind tells data packets from the special ones.
type pktKind uint8

const (
	pktData  pktKind = iota
	pktFlush         // 0000: end of a message
	pktDelim         // 0001: end of a section within a message
	pktEnd           // 0002: end of a response (stateless-connect)
)

func (k pktKind) String() string {
	switch k {
	case pktData:
		return "data packet"
	case pktFlush:
		return "flush packet"
	case pktDelim:
		return "delim packet"
	case pktEnd:
		return "response-end packet"
	}
	return fmt.Sprintf("pktKind(%d)", uint8(k))
}

// pktReader reads pkt-lines from a response.
type pktReader struct {
	r   *bufio.Reader
	hdr [4]byte
	buf [pktMaxData]byte
}

func newPktReader(r io.Reader) *pktReader {
	return &pktReader{r: bufio.NewReaderSize(r, 32<<10)}
}

// next returns the next packet. A data packet's payload is only valid until
// the following call. Every git message ends with a flush packet, so running
// out of input, even between packets, is reported as io.ErrUnexpectedEOF:
// the server hung up mid-response. A malformed header is an ErrProtocol.
func (p *pktReader) next() (pktKind, []byte, error) {
	if _, err := io.ReadFull(p.r, p.hdr[:]); err != nil {
		return 0, nil, eofIsUnexpected(err)
	}
	n, ok := parsePktLen(p.hdr)
	if !ok {
		return 0, nil, protocolErrorf("bad pkt-line length %q", p.hdr[:])
	}
	switch n {
	case 0:
		return pktFlush, nil, nil
	case 1:
		return pktDelim, nil, nil
	case 2:
		return pktEnd, nil, nil
	case 3:
		return 0, nil, protocolErrorf("bad pkt-line length %q", p.hdr[:])
	}
	if n > pktMax {
		return 0, nil, protocolErrorf("pkt-line length %d exceeds %d", n, pktMax)
	}
	data := p.buf[:n-4]
	if _, err := io.ReadFull(p.r, data); err != nil {
		return 0, nil, eofIsUnexpected(err)
	}
	return pktData, data, nil
}

// line is next for text messages: it wants a data packet (kind is returned
// for the special ones), turns an "ERR" packet into a *RemoteError and drops
// the optional trailing newline.
func (p *pktReader) line() (pktKind, string, error) {
	kind, data, err := p.next()
	if err != nil || kind != pktData {
		return kind, "", err
	}
	s := string(data)
	if len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	if msg, ok := strings.CutPrefix(s, "ERR "); ok {
		return pktData, "", &RemoteError{Message: msg}
	}
	return pktData, s, nil
}

func eofIsUnexpected(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("response ends early: %w", io.ErrUnexpectedEOF)
	}
	return err
}

// parsePktLen decodes a four-digit hex length; git accepts both cases.
func parsePktLen(h [4]byte) (int, bool) {
	n := 0
	for _, c := range h {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int(d)
	}
	return n, true
}

// pktWriter writes pkt-lines; the first error sticks and is returned by
// every later call, so a request is built without checking each line.
type pktWriter struct {
	w   io.Writer
	err error
}

const hexDigits = "0123456789abcdef"

// data writes one data packet.
func (p *pktWriter) data(b []byte) error {
	if p.err != nil {
		return p.err
	}
	if len(b) > pktMaxData {
		p.err = fmt.Errorf("pkt-line payload of %d bytes exceeds %d", len(b), pktMaxData)
		return p.err
	}
	n := len(b) + 4
	hdr := [4]byte{hexDigits[n>>12&0xf], hexDigits[n>>8&0xf], hexDigits[n>>4&0xf], hexDigits[n&0xf]}
	if _, p.err = p.w.Write(hdr[:]); p.err == nil {
		_, p.err = p.w.Write(b)
	}
	return p.err
}

// line writes s and a newline as one data packet.
func (p *pktWriter) line(s string) error {
	return p.data(append([]byte(s), '\n'))
}

func (p *pktWriter) special(hdr string) error {
	if p.err == nil {
		_, p.err = io.WriteString(p.w, hdr)
	}
	return p.err
}

func (p *pktWriter) flush() error { return p.special("0000") }
func (p *pktWriter) delim() error { return p.special("0001") }

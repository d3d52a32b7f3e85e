package gitproto

import (
	"io"
	"strings"
)

// Sideband bands (gitprotocol-pack, "side-band-64k"): protocol v2 always
// multiplexes the packfile section this way.
const (
	bandData     = 1
	bandProgress = 2
	bandError    = 3
)

// sidebandReader is the pack data of a packfile section: band 1 payloads up
// to the flush packet that ends the response. Progress (band 2) is dropped;
// band 3 ends the stream with a *RemoteError.
type sidebandReader struct {
	p    *pktReader
	buf  []byte
	err  error // sticky; io.EOF after the flush packet
	data int64 // band 1 bytes read so far
	// progress, if set, gets band 2 payloads (a push keeps the messages
	// of the server's hooks); otherwise they are dropped.
	progress func([]byte)
}

func newSidebandReader(p *pktReader) *sidebandReader {
	return &sidebandReader{p: p}
}

func (s *sidebandReader) Read(b []byte) (int, error) {
	for len(s.buf) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		s.buf, s.err = s.fill()
	}
	n := copy(b, s.buf)
	s.buf = s.buf[n:]
	s.data += int64(n)
	return n, nil
}

// fill reads packets until it finds pack data or the end of the section.
func (s *sidebandReader) fill() ([]byte, error) {
	kind, data, err := s.p.next()
	switch {
	case err != nil:
		return nil, err
	case kind == pktFlush:
		return nil, io.EOF
	case kind != pktData:
		return nil, protocolErrorf("%s in the packfile section", kind)
	case len(data) == 0:
		return nil, protocolErrorf("sideband packet without a band")
	}
	switch data[0] {
	case bandData:
		return data[1:], nil
	case bandProgress:
		if s.progress != nil {
			s.progress(data[1:])
		}
		return nil, nil
	case bandError:
		return nil, &RemoteError{Message: strings.TrimRight(string(data[1:]), "\n")}
	}
	return nil, protocolErrorf("sideband packet on unknown band %d", data[0])
}

// failed is the error that ended the stream, if it was not its end.
func (s *sidebandReader) failed() error {
	if s.err == io.EOF {
		return nil
	}
	return s.err
}

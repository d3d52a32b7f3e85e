package gitproto

import (
	"io"
	"sync/atomic"
)

// Stats counts a Client's conversations, for tests and benchmarks that
// check what a poll costs.
type Stats struct {
	// Exchanges is the number of requests sent: HTTP requests, or SSH
	// sessions (each a git-upload-pack or git-receive-pack run).
	Exchanges int64
	// Sent and Received are git protocol bytes: HTTP bodies, SSH channel
	// data. They leave out HTTP headers and SSH framing and encryption.
	Sent, Received int64
	// Version is the protocol version of the last upload-pack
	// conversation: 2, or 0 when the server has only that.
	Version int
}

type counters struct {
	exchanges, sent, received atomic.Int64
	version                   atomic.Int64
}

// Stats returns the counts since the Client was made or last reset.
func (c *Client) Stats() Stats {
	return Stats{
		Exchanges: c.stats.exchanges.Load(),
		Sent:      c.stats.sent.Load(),
		Received:  c.stats.received.Load(),
		Version:   int(c.stats.version.Load()),
	}
}

// ResetStats zeroes the counts.
func (c *Client) ResetStats() {
	c.stats.exchanges.Store(0)
	c.stats.sent.Store(0)
	c.stats.received.Store(0)
}

// countingReader adds what it reads to n.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	k, err := r.r.Read(p)
	r.n.Add(int64(k))
	return k, err
}

// countingWriter adds what it writes to n.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	k, err := w.w.Write(p)
	w.n.Add(int64(k))
	return k, err
}

// limitReader is io.LimitReader that fails, rather than stops, past n
// bytes: a report larger than that is not a report.
func limitReader(r io.Reader, n int64) io.Reader { return &limited{r: r, n: n} }

type limited struct {
	r io.Reader
	n int64
}

func (l *limited) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, protocolErrorf("response larger than expected")
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	k, err := l.r.Read(p)
	l.n -= int64(k)
	return k, err
}

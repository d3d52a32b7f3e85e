package server

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Default limits of the HTTP server (Limits). Each is a bound on what one
// client, hostile or slow, can hold of the server: a goroutine, a file
// descriptor, buffers, a git process.
const (
	// DefaultReadHeaderTimeout is how long a client has to send a
	// request's headers once it has started; a connection that sends
	// nothing is closed after it too.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout is how long a request's body may take to arrive.
	// The largest a push may be is 8 MiB of pack: it arrives within the
	// bound at 70 KB/s.
	DefaultReadTimeout = 2 * time.Minute
	// DefaultWriteTimeout is how long a response may wait on a client
	// that does not read it: the deadline moves forward with every write,
	// so a large fetch to a client that keeps reading is never cut.
	DefaultWriteTimeout = time.Minute
	// DefaultIdleTimeout is how long a keep-alive connection may wait for
	// its next request. Agents that poll more often keep their
	// connection; under DefaultMaxConns idle connections go first anyway.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxHeaderBytes bounds a request's headers. An agent's are
	// some 600 bytes, its request signature included.
	DefaultMaxHeaderBytes = 16 << 10
	// DefaultMaxConns is the most connections open at once. An idle one
	// holds some 20 KB of the server (measured: doc.go), so 10,000 hold
	// some 200 MB. It is lowered to what the open-files limit allows.
	DefaultMaxConns = 10000
	// DefaultInstallRequests is the most requests one install may have
	// in flight at once: an agent makes one at a time. More are answered
	// 429 before they take any slot, so one install's key cannot take
	// every git process or push slot from the others.
	DefaultInstallRequests = 4
)

// Limits bounds what clients may hold of the server. The zero value of a
// field means its default; Serve and HTTPServer apply them, and a replica
// enforces the same as a writer.
type Limits struct {
	// ReadHeaderTimeout: DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the time a request's body takes to arrive, from
	// when its handler starts: DefaultReadTimeout. It is a deadline of
	// the request, not of the connection, so that a long response after
	// the body has arrived is not cut by it.
	ReadTimeout time.Duration
	// WriteTimeout bounds how long a response waits on its client, moved
	// forward by every write: DefaultWriteTimeout.
	WriteTimeout time.Duration
	// IdleTimeout: DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxHeaderBytes: DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// MaxConns caps the connections open at once: DefaultMaxConns. At
	// the cap a new connection closes an idle keep-alive connection (or
	// one that has not sent a request yet) to take its place, and waits
	// only when every connection is busy with a request.
	MaxConns int
	// InstallRequests caps one install's requests in flight:
	// DefaultInstallRequests.
	InstallRequests int
}

func (l *Limits) defaults() {
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = DefaultReadTimeout
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = DefaultWriteTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	if l.InstallRequests <= 0 {
		l.InstallRequests = DefaultInstallRequests
	}
}

// limitRequest gives each request its own deadlines before next runs: its
// body must arrive within ReadTimeout (the deadline is lifted once the body
// has been read whole, so that it cannot end a long response), and each
// write must go out within WriteTimeout of the one before.
func (s *Server) limitRequest(w http.ResponseWriter, r *http.Request, next http.HandlerFunc) {
	rc := http.NewResponseController(w)
	lw := &deadlineWriter{ResponseWriter: w, rc: rc, timeout: s.cfg.Limits.WriteTimeout}
	lw.extend()
	var body *deadlineBody
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		// A server that is not a net/http one (a test's recorder) has no
		// deadlines to set: then neither is set.
		if err := rc.SetReadDeadline(time.Now().Add(s.cfg.Limits.ReadTimeout)); err == nil {
			body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			r.Body = body
		}
	}
	next(lw, r)
	if body != nil && !body.done.Load() {
		// Refused before its body was read (unsigned, over its install's
		// turns, malformed): net/http would wait for the rest of it, up
		// to ReadTimeout, to keep the connection. It closes it instead,
		// so a client that never sends its body holds nothing.
		_ = rc.SetReadDeadline(time.Now())
	}
}

// deadlineWriter moves the connection's write deadline forward with every
// write and flush.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	last    time.Time // when the deadline was last moved
}

// extend moves the write deadline to timeout from now, at most every
// hundredth of the timeout: a fetch's many small writes do not each
// reset a timer.
func (w *deadlineWriter) extend() {
	now := time.Now()
	if now.Sub(w.last) < w.timeout/100 {
		return
	}
	w.last = now
	_ = w.rc.SetWriteDeadline(now.Add(w.timeout))
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.extend()
	return w.ResponseWriter.Write(p)
}

// Flush sends what is buffered, as http.Flusher.
func (w *deadlineWriter) Flush() {
	w.extend()
	_ = w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// deadlineBody lifts the read deadline once the body has been read whole:
// from then on net/http's own read of the connection (which notices a
// client that went away) must not time out in the middle of a response.
//
// The body may be read on another goroutine than the handler's (a replica's
// proxy sends it to the writer from its transport's), hence the atomic.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done atomic.Bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && b.done.CompareAndSwap(false, true) {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// inflight counts each install's requests in flight. An install has an
// entry only while it has a request in flight, so the map is as large as
// the requests being served, never as the installs ever seen.
type inflight struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

func newInflight(max int) *inflight { return &inflight{max: max, n: map[string]int{}} }

// acquire takes one of install's turns; false when it has max in flight.
func (f *inflight) acquire(install string) (release func(), ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[install] >= f.max {
		return nil, false
	}
	f.n[install]++
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.n[install]--; f.n[install] <= 0 {
			delete(f.n, install)
		}
	}, true
}

// len is how many installs have a request in flight.
func (f *inflight) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.n)
}

// installBusy answers a request over its install's InstallRequests with
// 429: the agent retries with backoff. The connection is closed rather
// than its body read.
func (s *Server) installBusy(w http.ResponseWriter, r *http.Request, install string) {
	s.log.Warn("request refused", "install", install, "path", r.URL.Path, "remote", r.RemoteAddr,
		"reason", fmt.Sprintf("over %d requests of the install in flight", s.cfg.Limits.InstallRequests))
	s.metrics.refused(reasonInstallBusy)
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Connection", "close")
	http.Error(w, "nuon: too many requests of this install at once; try again", http.StatusTooManyRequests)
}

// errBodyTooLarge is a request body past its bound, once inflated.
var errBodyTooLarge = errors.New("request body too large")

// limitBody is r's body bounded at max bytes, gunzipped when the client
// sent it so (git does, for large requests): the bound is on the inflated
// bytes, so a small gzip body that inflates to gigabytes is cut at max.
// Nothing is buffered.
func limitBody(w http.ResponseWriter, r *http.Request, max int64) (io.Reader, error) {
	var rd io.Reader = http.MaxBytesReader(w, r.Body, max)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(rd)
		if err != nil {
			return nil, fmt.Errorf("gzip body: %w", err)
		}
		rd = &boundedReader{r: zr, left: max}
	}
	return rd, nil
}

// boundedReader fails with errBodyTooLarge past its bound, where an
// io.LimitReader would end quietly with a truncated body.
type boundedReader struct {
	r    io.Reader
	left int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly the bound from a longer one.
		var one [1]byte
		n, err := b.r.Read(one[:])
		if n > 0 {
			return 0, errBodyTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

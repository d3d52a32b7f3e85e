package server

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// HTTPServer returns an http.Server that serves s within its Limits, and
// ln wrapped in the cap on open connections: serve the one on the other
// (hs.Serve(l), or hs.ServeTLS(l, cert, key)). A writer and a replica are
// served the same way, and so are tests.
func (s *Server) HTTPServer(ln net.Listener) (*http.Server, net.Listener) {
	lim := s.cfg.Limits
	cl := newConnLimiter(ln, maxConns(lim.MaxConns, s.log), s.metrics)
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		// ReadTimeout and WriteTimeout are the request's own
		// (limitRequest): net/http's would end a long fetch.
		IdleTimeout:    lim.IdleTimeout,
		MaxHeaderBytes: lim.MaxHeaderBytes,
		ConnState:      cl.connState,
		// TLS handshakes that fail and clients that hang up are no news.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	return hs, cl
}

// fdReserve is the file descriptors kept beside the connections: the
// repository's files, git's pipes, the upstream.
const fdReserve = 256

// maxConns is limit, lowered to what the process's open-files limit leaves
// after fdReserve: at the limit, accept would fail instead of shedding
// an idle connection.
func maxConns(limit int, log *slog.Logger) int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return limit
	}
	if room := int(rl.Cur) - fdReserve; room < limit {
		room = max(room, 1)
		log.Warn("connection cap lowered to the open-files limit", "max_conns", room, "nofile", rl.Cur)
		return room
	}
	return limit
}

// newConnGrace is how long a connection may stay without sending its
// first request before it may be shed for a new one.
const newConnGrace = time.Second

// connLimiter caps the connections open at once. At the cap, a connection
// accepted closes an idle keep-alive connection, or failing that one that
// has sent nothing for newConnGrace, to take its place: hostile idle
// connections cannot keep a polling agent out. Only when every connection
// is busy with a request does it wait for one to end (the kernel's
// listen queue holds the new one meanwhile). Which connections are idle
// it learns from the http.Server's ConnState hook.
type connLimiter struct {
	net.Listener
	max     int
	metrics *metrics

	mu    sync.Mutex
	open  int
	idle  map[*limitedConn]struct{} // between requests
	fresh map[*limitedConn]struct{} // accepted, no request yet

	freed chan struct{} // a connection closed
	done  chan struct{} // the listener closed
	once  sync.Once
}

func newConnLimiter(ln net.Listener, max int, m *metrics) *connLimiter {
	return &connLimiter{Listener: ln, max: max, metrics: m,
		idle: map[*limitedConn]struct{}{}, fresh: map[*limitedConn]struct{}{},
		freed: make(chan struct{}, 1), done: make(chan struct{})}
}

// limitedConn is a connection counted by its connLimiter until closed.
type limitedConn struct {
	net.Conn
	l      *connLimiter
	since  time.Time // accepted
	closed sync.Once
}

// Accept waits for a connection and for room for it under the cap.
func (l *connLimiter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for {
		l.mu.Lock()
		if l.open < l.max {
			l.open++
			lc := &limitedConn{Conn: c, l: l, since: time.Now()}
			l.fresh[lc] = struct{}{}
			l.mu.Unlock()
			l.metrics.connsOpen.Inc()
			return lc, nil
		}
		victim, state := l.victimLocked()
		l.mu.Unlock()
		if victim != nil {
			l.metrics.connsShed.WithLabelValues(state).Inc()
			victim.Close()
			continue
		}
		select {
		case <-l.freed:
		case <-l.done:
			c.Close()
			return nil, net.ErrClosed
		}
	}
}

// victimLocked picks the connection to shed: an idle one, or one that has
// sent nothing for newConnGrace. Nil when every one is busy.
func (l *connLimiter) victimLocked() (*limitedConn, string) {
	for c := range l.idle {
		delete(l.idle, c)
		return c, "idle"
	}
	cutoff := time.Now().Add(-newConnGrace)
	for c := range l.fresh {
		if c.since.Before(cutoff) {
			delete(l.fresh, c)
			return c, "new"
		}
	}
	return nil, ""
}

// Close stops accepting; connections open stay so until they end.
func (l *connLimiter) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// connState follows a connection's state (http.Server.ConnState).
func (l *connLimiter) connState(c net.Conn, st http.ConnState) {
	if u, ok := c.(interface{ NetConn() net.Conn }); ok { // TLS
		c = u.NetConn()
	}
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.fresh, lc)
	delete(l.idle, lc)
	switch st {
	case http.StateNew:
		l.fresh[lc] = struct{}{}
	case http.StateIdle:
		l.idle[lc] = struct{}{}
	}
}

// Close closes the connection and gives its place back.
func (c *limitedConn) Close() error {
	c.closed.Do(func() {
		l := c.l
		l.mu.Lock()
		delete(l.fresh, c)
		delete(l.idle, c)
		l.open--
		l.mu.Unlock()
		l.metrics.connsOpen.Dec()
		select {
		case l.freed <- struct{}{}:
		default:
		}
	})
	return c.Conn.Close()
}

package gitproto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"

	"golang.org/x/crypto/ssh"
)

// userAgent names this client in the User-Agent header and the agent
// capability.
const userAgent = "nuon-gitproto/1"

// maxErrorBody is how much of a failed response's body, or of an SSH
// command's standard error, an error keeps.
const maxErrorBody = 512

// maxDrain is how much of a response's unread tail is read before closing
// it, so that the connection can be reused by the next poll.
const maxDrain = 64 << 10

// Client speaks git's wire protocol to one repository, over smart HTTP or
// SSH. Its methods may be called concurrently. A Client must not be copied
// after first use: it caches the server's capabilities and, for SSH, its
// connection. Call Close when done with an SSH Client.
type Client struct {
	// URL is the repository: http:// or https://, ssh://[user@]host[:port]/path
	// or the scp-like [user@]host:path, as for git clone. Credentials in an
	// HTTP URL are sent as basic auth and never printed.
	URL string
	// HTTP sends every HTTP request (ls-refs, fetch and push); nil means
	// http.DefaultClient. Set it to sign or authenticate each request in
	// its Transport.
	HTTP *http.Client
	// Auth, if set, is called on every HTTP request before it is sent, e.g.
	// to set basic auth or a bearer token.
	Auth func(*http.Request)
	// SSH is how to log in to an SSH URL; required for one.
	SSH *SSHAuth
	// Discover makes the client fetch and check the capability
	// advertisement over HTTP (a GET of info/refs) before its first
	// command, as gitprotocol-v2 describes for HTTP. Without it, which is
	// the default, commands are posted directly: git's http-backend runs
	// them without a prior GET, so every poll is one request. The
	// advertisement is then fetched only to explain a failed command (a
	// server without protocol version 2, a SHA-256 repository). Over SSH
	// the server always sends it first.
	Discover bool
	// Log gets the one warning a Client logs: that the server speaks only
	// protocol version 0. Nil discards it.
	Log *slog.Logger

	caps   atomic.Pointer[Capabilities]
	warned atomic.Bool
	stats  counters

	sshMu   sync.Mutex
	sshConn *ssh.Client
}

// Close closes the Client's SSH connection, if it has one. The Client
// reconnects if used again.
func (c *Client) Close() error {
	c.sshMu.Lock()
	defer c.sshMu.Unlock()
	if c.sshConn == nil {
		return nil
	}
	err := c.sshConn.Close()
	c.sshConn = nil
	return err
}

// transport carries the conversations of one repository's URL.
type transport interface {
	// uploadPack runs one command on git-upload-pack.
	uploadPack(ctx context.Context, call *uploadCall) error
	// receivePack runs one push on git-receive-pack.
	receivePack(ctx context.Context, call *pushCall) error
	// host names the server in the version 0 warning.
	host() string
}

// uploadCall is one command on git-upload-pack.
type uploadCall struct {
	// request encodes the protocol version 2 command; it is called once
	// the capabilities are known, if they are.
	request func() ([]byte, error)
	// read parses the version 2 response.
	read func(*pktReader) error
	// v0 does the same work in protocol version 0 when the server speaks
	// only that: adv is the server's ref advertisement, rt sends one
	// request on the same conversation.
	v0 func(ctx context.Context, adv *v0Advertisement, rt roundTripper) error
}

// pushCall is one push on git-receive-pack, which has only protocol
// version 0.
type pushCall struct {
	// request encodes the commands and the pack; adv is the server's ref
	// advertisement, nil when the transport did not ask for it (HTTP).
	request func(adv *v0Advertisement) ([]byte, error)
	// read parses the response.
	read func(*pktReader) error
}

// roundTripper sends one request of a version 0 conversation and hands
// its response to read.
type roundTripper interface {
	roundTrip(ctx context.Context, body []byte, read func(*pktReader) error) error
}

// transport picks the transport for c.URL.
func (c *Client) transport() (transport, error) {
	if ep, ok, err := ParseSSH(c.URL); ok {
		if err != nil {
			return nil, err
		}
		return &sshTransport{c: c, ep: ep}, nil
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return nil, fmt.Errorf("repository URL %s: not a URL", Redact(c.URL))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("repository URL %s: scheme is not http, https or ssh", Redact(c.URL))
	}
	return &httpTransport{c: c}, nil
}

// command runs one protocol version 2 command on git-upload-pack, in
// version 0 through call.v0 if the server has only that.
func (c *Client) command(ctx context.Context, call *uploadCall) error {
	t, err := c.transport()
	if err != nil {
		return err
	}
	return t.uploadPack(ctx, call)
}

// fallback warns, once per Client, that the server at host speaks only
// protocol version 0, and records it.
func (c *Client) fallback(host string) {
	c.stats.version.Store(0)
	if c.warned.CompareAndSwap(false, true) && c.Log != nil {
		c.Log.Warn("git server speaks only protocol version 0: every poll downloads all its refs; enable protocol version 2 on it (for sshd: AcceptEnv GIT_PROTOCOL)",
			"host", host)
	}
}

// explainable says whether err may come from a server that lacks protocol
// version 2: such a server answers a v2 command with an empty body (git),
// garbage or a 4xx status other than for credentials.
func explainable(err error) bool {
	if he, ok := errors.AsType[*HTTPError](err); ok {
		switch he.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusProxyAuthRequired:
			return false
		}
		return he.StatusCode >= 400 && he.StatusCode < 500 && !he.Temporary()
	}
	return errors.Is(err, ErrProtocol) || errors.Is(err, io.ErrUnexpectedEOF)
}

// redacted is the URL for error messages, without credentials.
func (c *Client) redacted() string { return Redact(c.URL) }

// Redact returns a repository location fit for logs and error messages: a
// URL without its user information (user name, password or token), an
// scp-like location without its user.
func Redact(location string) string {
	if ep, ok, err := ParseSSH(location); ok && err == nil {
		return ep.String()
	}
	u, err := url.Parse(location)
	if err != nil {
		if i := lastAt(location); i >= 0 {
			return "(unparsable URL with user information)"
		}
		return location
	}
	u.User = nil
	return u.String()
}

func lastAt(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '@' {
			return i
		}
	}
	return -1
}

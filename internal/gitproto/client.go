package gitproto

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
)

// Content types of smart HTTP (gitprotocol-http).
const (
	typeAdvertisement = "application/x-git-upload-pack-advertisement"
	typeRequest       = "application/x-git-upload-pack-request"
	typeResult        = "application/x-git-upload-pack-result"
)

// userAgent names this client in the User-Agent header.
const userAgent = "nuon-gitproto/1"

// maxErrorBody is how much of a failed response's body an HTTPError keeps.
const maxErrorBody = 512

// maxDrain is how much of a response's unread tail is read before closing
// it, so that the connection can be reused by the next poll.
const maxDrain = 64 << 10

// Client speaks git protocol version 2 to one repository over smart HTTP.
// Its methods may be called concurrently. A Client must not be copied after
// first use: it caches the server's capabilities.
type Client struct {
	// URL is the repository, http:// or https://, as for git clone.
	// Credentials in it are sent as basic auth and never printed.
	URL string
	// HTTP sends the requests; nil means http.DefaultClient.
	HTTP *http.Client
	// Auth, if set, is called on every request before it is sent, e.g. to
	// set basic auth or a bearer token.
	Auth func(*http.Request)
	// Discover makes the client fetch and check the capability
	// advertisement (a GET of info/refs) before its first command, as
	// gitprotocol-v2 describes for HTTP. Without it, which is the default,
	// commands are posted directly: git's http-backend runs them without a
	// prior GET, so every poll is one request. The advertisement is then
	// fetched only to explain a failed command (a server without protocol
	// version 2, a SHA-256 repository).
	Discover bool

	caps atomic.Pointer[Capabilities]
}

// Capabilities is a protocol v2 capability advertisement: each
// capability's name and its value, "" when it has none. git 2.39 advertises
// agent=git/2.39.5, ls-refs=unborn, fetch=shallow wait-for-done,
// server-option, object-format=sha1 and object-info.
type Capabilities map[string]string

// Supports reports whether the server advertises capability name and lists
// each of features in its space-separated value (fetch=shallow filter).
func (c Capabilities) Supports(name string, features ...string) bool {
	v, ok := c[name]
	if !ok {
		return false
	}
	have := strings.Fields(v)
	for _, f := range features {
		found := false
		for _, h := range have {
			found = found || h == f
		}
		if !found {
			return false
		}
	}
	return true
}

// Capabilities returns the server's capability advertisement, asking for it
// the first time: a GET of info/refs?service=git-upload-pack with
// Git-Protocol: version=2. It fails with ErrUnsupported unless the server
// answers with version 2, offers ls-refs and fetch, and uses SHA-1 object
// names. Once it succeeds the answer is cached for the Client's lifetime.
func (c *Client) Capabilities(ctx context.Context) (Capabilities, error) {
	caps, err := c.discover(ctx)
	if err != nil {
		return nil, fmt.Errorf("capabilities %s: %w", c.redacted(), err)
	}
	return clone(caps), nil
}

// discover is Capabilities without the copy and the URL in errors.
func (c *Client) discover(ctx context.Context) (Capabilities, error) {
	if caps := c.caps.Load(); caps != nil {
		return *caps, nil
	}
	u, err := c.endpoint("/info/refs")
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"?service=git-upload-pack", nil)
	if err != nil {
		return nil, err
	}
	var caps Capabilities
	err = c.do(req, typeAdvertisement, func(p *pktReader) error {
		caps, err = readAdvertisement(p)
		return err
	})
	if err == nil {
		err = checkCapabilities(caps)
	}
	if err != nil {
		return nil, err
	}
	c.caps.Store(&caps)
	return caps, nil
}

func clone(c Capabilities) Capabilities {
	out := make(Capabilities, len(c))
	for k, v := range c {
		out[k] = v
	}
	return out
}

// checkCapabilities fails unless the server offers what this package uses.
func checkCapabilities(caps Capabilities) error {
	for _, cmd := range []string{"ls-refs", "fetch"} {
		if !caps.Supports(cmd) {
			return fmt.Errorf("%w: no %s command", ErrUnsupported, cmd)
		}
	}
	if f, ok := caps["object-format"]; ok && f != "sha1" {
		return fmt.Errorf("%w: object format %s", ErrUnsupported, f)
	}
	return nil
}

// readAdvertisement parses the answer to the info/refs GET. Servers may
// start it with the "# service=git-upload-pack" packet and a flush, as in
// protocol version 0; git's http-backend leaves them out for version 2.
func readAdvertisement(p *pktReader) (Capabilities, error) {
	kind, line, err := p.line()
	if err != nil {
		return nil, err
	}
	if kind == pktData && strings.HasPrefix(line, "# service=") {
		if line != "# service=git-upload-pack" {
			return nil, protocolErrorf("advertisement for %q", strings.TrimPrefix(line, "# service="))
		}
		if kind, _, err = p.line(); err != nil {
			return nil, err
		}
		if kind != pktFlush {
			return nil, protocolErrorf("%s after the service line", kind)
		}
		if kind, line, err = p.line(); err != nil {
			return nil, err
		}
	}
	switch {
	case kind != pktData:
		return nil, protocolErrorf("advertisement starts with a %s", kind)
	case line == "version 1" || isRefLine(line):
		return nil, fmt.Errorf("%w: server answered with protocol version 0 or 1", ErrUnsupported)
	case line != "version 2":
		return nil, protocolErrorf("advertisement starts with %q", truncate(line))
	}
	caps := Capabilities{}
	for {
		kind, line, err := p.line()
		switch {
		case err != nil:
			return nil, err
		case kind == pktFlush:
			return caps, nil
		case kind != pktData:
			return nil, protocolErrorf("%s in the capability advertisement", kind)
		}
		name, value, _ := strings.Cut(line, "=")
		if name == "" {
			return nil, protocolErrorf("empty capability in %q", truncate(line))
		}
		caps[name] = value
	}
}

// isRefLine says whether line starts like a protocol version 0 ref
// advertisement: an object name and a space.
func isRefLine(line string) bool {
	oid, _, ok := strings.Cut(line, " ")
	return ok && isHex(oid) && (len(oid) == 40 || len(oid) == 64)
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return s != ""
}

// truncate keeps error messages about garbage short.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// command posts one protocol v2 command and hands the response to read.
// When the command fails in a way an unsupported server would cause and the
// capabilities are not known yet, it asks for them to explain the failure.
func (c *Client) command(ctx context.Context, body []byte, read func(*pktReader) error) error {
	if c.Discover {
		if _, err := c.discover(ctx); err != nil {
			return fmt.Errorf("capabilities: %w", err)
		}
	}
	u, err := c.endpoint("/git-upload-pack")
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", typeRequest)
	err = c.do(req, typeResult, read)
	if err != nil && c.caps.Load() == nil && explainable(err) && ctx.Err() == nil {
		if _, cerr := c.discover(ctx); errors.Is(cerr, ErrUnsupported) {
			return fmt.Errorf("capabilities: %w", cerr)
		}
	}
	return err
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

// do sends req with the protocol headers, checks the status and content
// type, and hands the body to read. It drains what read leaves so the
// connection can be reused.
func (c *Client) do(req *http.Request, contentType string, read func(*pktReader) error) error {
	req.Header.Set("Accept", contentType)
	req.Header.Set("Git-Protocol", "version=2")
	req.Header.Set("User-Agent", userAgent)
	if c.Auth != nil {
		c.Auth(req)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return &HTTPError{
			StatusCode: resp.StatusCode,
			Status:     resp.Status,
			Body:       strings.TrimSpace(strings.ToValidUTF8(string(body), "?")),
		}
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != contentType {
		if contentType == typeAdvertisement {
			return fmt.Errorf("%w: content type %q: not a smart HTTP server", ErrUnsupported, mt)
		}
		return protocolErrorf("content type %q, want %q", mt, contentType)
	}
	if err := read(newPktReader(resp.Body)); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	return nil
}

// endpoint is the URL of a service below the repository.
func (c *Client) endpoint(path string) (string, error) {
	u, err := url.Parse(c.URL)
	if err != nil {
		return "", fmt.Errorf("repository URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("repository URL %s: scheme is not http or https", u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("repository URL %s: has a query or fragment", u.Redacted())
	}
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawPath = ""
	return u.String(), nil
}

// redacted is the URL for error messages, without a password.
func (c *Client) redacted() string {
	u, err := url.Parse(c.URL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

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
		return &transportError{err}
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
			return fmt.Errorf("%w: content type %q is not smart HTTP", ErrUnsupported, mt)
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
		return "", fmt.Errorf("repository URL: %v", err)
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

package gitproto

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
)

// ErrProtocol is wrapped by every error that says the server broke the
// protocol: a malformed pkt-line, an unexpected section, a response that is
// not smart HTTP at all. Asking again will not help.
var ErrProtocol = errors.New("git protocol violation")

// ErrUnsupported is wrapped by errors from servers that do not offer what
// this package needs: protocol version 2 with ls-refs and fetch over smart
// HTTP, and SHA-1 object names. It wraps ErrProtocol, so callers that only
// check ErrProtocol treat it as permanent too; callers that can fall back to
// protocol version 0 check it first.
var ErrUnsupported = fmt.Errorf("%w: server lacks protocol version 2 over smart HTTP", ErrProtocol)

// HTTPError is an answer other than 200 OK.
type HTTPError struct {
	// StatusCode is the HTTP status code, e.g. 503.
	StatusCode int
	// Status is the status line, e.g. "503 Service Unavailable".
	Status string
	// Body is the start of the response body, for the message a server
	// puts there.
	Body string
}

func (e *HTTPError) Error() string {
	if e.Body == "" {
		return "http " + e.Status
	}
	return fmt.Sprintf("http %s: %s", e.Status, e.Body)
}

// Temporary reports whether the same request may succeed later: the server
// is overloaded, restarting or behind a failing proxy (408, 429 and 5xx but
// 501 and 505, which say the request itself is not understood). Missing
// repositories and refused credentials are not temporary.
func (e *HTTPError) Temporary() bool {
	switch {
	case e.StatusCode == http.StatusRequestTimeout, e.StatusCode == http.StatusTooManyRequests:
		return true
	case e.StatusCode == http.StatusNotImplemented, e.StatusCode == http.StatusHTTPVersionNotSupported:
		return false
	default:
		return e.StatusCode >= 500 && e.StatusCode <= 599
	}
}

// RemoteError is an error message the server sent in the protocol: an "ERR"
// packet or sideband band 3. Git sends them for requests it refuses, such as
// a want of an object it does not have ("upload-pack: not our ref"), so they
// are not temporary.
type RemoteError struct {
	Message string
}

func (e *RemoteError) Error() string { return "remote error: " + e.Message }

// Temporary reports whether err is worth retrying as it is: the connection
// failed or broke off mid-response, or the server answered with a temporary
// HTTP status. Protocol violations, unsupported servers, remote errors,
// untrusted certificates and the caller's own cancellation are not
// temporary.
func Temporary(err error) bool {
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	case errors.Is(err, ErrProtocol):
		return false
	}
	if he, ok := errors.AsType[*HTTPError](err); ok {
		return he.Temporary()
	}
	if _, ok := errors.AsType[*RemoteError](err); ok {
		return false
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return false
	}
	if _, ok := errors.AsType[*transportError](err); ok {
		return true
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return true
	}
	return errors.Is(err, io.ErrUnexpectedEOF)
}

// transportError is a request that got no response: the connection was
// refused or broke, DNS failed, the server timed out.
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

func protocolErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}

// truncate keeps error messages about garbage short.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

package sync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"nuon.dev/nuon/internal/oci"
)

// Reasons an artifact is refused. They are final: the vendor registry
// holds what it holds, and asking again gives the same answer. Nothing of
// a refused artifact reaches the install registry.
var (
	// ErrUnsigned: the artifact has no cosign signature.
	ErrUnsigned = oci.ErrUnsigned
	// ErrBadSignature: no signature of the artifact verifies with the
	// vendor key (signed by another key, or tampered with).
	ErrBadSignature = oci.ErrBadSignature
	// ErrDigestMismatch: content does not hash to the digest that names it,
	// or the signature names another artifact.
	ErrDigestMismatch = oci.ErrDigestMismatch
)

// Error is the failure of one artifact's sync.
type Error struct {
	// Artifact is the artifact's name; Source its vendor reference.
	Artifact, Source string
	// Refused is set for ErrUnsigned, ErrBadSignature and
	// ErrDigestMismatch: the artifact must not be deployed, and retrying
	// will not change that.
	Refused bool
	// Temporary is set when the registry failed in a way that may pass
	// (network, 5xx, 429): retrying later may succeed.
	Temporary bool
	Err       error
}

func (e *Error) Error() string {
	verb := "sync"
	if e.Refused {
		verb = "refused"
	}
	return fmt.Sprintf("%s artifact %s (%s): %v", verb, e.Artifact, e.Source, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// IsRefusal reports whether err refuses an artifact for good.
func IsRefusal(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Refused
}

// classify wraps err of artifact a.
func classify(name, source string, err error) *Error {
	e := &Error{Artifact: name, Source: source, Err: err}
	switch {
	case errors.Is(err, oci.ErrUnsigned), errors.Is(err, oci.ErrBadSignature), errors.Is(err, oci.ErrDigestMismatch), errors.Is(err, ErrProvenance):
		e.Refused = true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
	default:
		e.Temporary = temporary(err)
	}
	return e
}

// temporary reports whether a failure may pass: the network failed, or
// the registry answered that it is overloaded or broken (408, 429, 5xx).
// Any other answer says the request itself is wrong, and a malformed
// reference stays malformed.
func temporary(err error) bool {
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch terr.StatusCode {
		case http.StatusRequestTimeout, http.StatusTooManyRequests:
			return true
		}
		return terr.StatusCode >= 500
	}
	var nerr net.Error
	var uerr *url.Error
	return errors.As(err, &nerr) || errors.As(err, &uerr) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

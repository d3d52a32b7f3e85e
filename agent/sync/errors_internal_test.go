package sync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"nuon.dev/nuon/internal/oci"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name               string
		err                error
		refused, temporary bool
	}{
		{"unsigned", fmt.Errorf("x: %w", oci.ErrUnsigned), true, false},
		{"wrong key", oci.ErrBadSignature, true, false},
		{"digest mismatch", &url.Error{Op: "Patch", URL: "u", Err: oci.ErrDigestMismatch}, true, false},
		{"503", &transport.Error{StatusCode: http.StatusServiceUnavailable}, false, true},
		{"429", &transport.Error{StatusCode: http.StatusTooManyRequests}, false, true},
		{"404", &transport.Error{StatusCode: http.StatusNotFound}, false, false},
		{"401", fmt.Errorf("install registry: %w", &transport.Error{StatusCode: http.StatusUnauthorized}), false, false},
		{"connection dropped", &url.Error{Op: "Get", URL: "u", Err: io.EOF}, false, true},
		{"body cut short", io.ErrUnexpectedEOF, false, true},
		{"malformed reference", errors.New(`local reference "x": could not parse`), false, false},
		{"cancelled", context.Canceled, false, false},
	} {
		e := classify("module", "r/x@sha256:0", tc.err)
		if e.Refused != tc.refused || e.Temporary != tc.temporary {
			t.Errorf("%s: refused %v temporary %v, want %v %v", tc.name, e.Refused, e.Temporary, tc.refused, tc.temporary)
		}
		if !errors.Is(e, tc.err) {
			t.Errorf("%s: %v does not wrap %v", tc.name, e, tc.err)
		}
	}
}

package debugcmd

import (
	"bytes"
	"errors"
	"strings"
	"sync"

	"nuon.dev/nuon/schemas"
)

// TruncatedMarker ends an answer that Limit cut off.
const TruncatedMarker = "\n[output truncated by nuon: the answer exceeded the request's maxBytes]\n"

// ErrLimit is returned by Limit's Write once the output is past its
// bound, so that a reader copying a stream stops early.
var ErrLimit = errors.New("debug output limit reached")

// Limit is a writer that keeps the first Max bytes written to it and
// counts the rest. Its Write returns ErrLimit once it holds more than
// Max, so io.Copy from a log stream stops; the bytes were still counted.
type Limit struct {
	Max int

	mu    sync.Mutex
	buf   bytes.Buffer
	total int
}

// NewLimit returns a Limit of max bytes.
func NewLimit(max int) *Limit { return &Limit{Max: max} }

func (l *Limit) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total += len(p)
	if room := l.Max - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(room, len(p))])
	}
	if l.total > l.Max {
		return len(p), ErrLimit
	}
	return len(p), nil
}

// Truncated tells whether more than Max bytes were written.
func (l *Limit) Truncated() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total > l.Max
}

// Redactor removes secrets from an answer before it leaves the job.
type Redactor func(string) string

// Answer is the bounded answer of c: the output kept, redacted with
// redact (when not nil), with TruncatedMarker when it was cut off.
func (l *Limit) Answer(c Command, redact Redactor) *schemas.Answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	// A cut may split a character; the answer is text.
	out := strings.ToValidUTF8(l.buf.String(), "")
	if redact != nil {
		out = redact(out)
	}
	truncated := l.total > l.Max
	if truncated {
		out += TruncatedMarker
	}
	return &schemas.Answer{Command: c.Words(), Output: out, Truncated: truncated, Bytes: l.total}
}

package terraform

import (
	"cmp"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"sync"
)

// Redacted replaces a secret's value in terraform's output and errors.
const Redacted = "(redacted)"

// redactor is the writer terraform's stdout and stderr go to. It replaces
// the values of the job's secrets, which terraform prints whenever a module
// does not mark a variable sensitive, and serialises the two streams.
// terraform-exec writes whole lines, so a value is never split between two
// writes.
//
// A failing log never fails the job: Write always reports success, or
// terraform would block on a full pipe.
type redactor struct {
	mu  sync.Mutex
	w   io.Writer
	rep *strings.Replacer // nil until there are secrets
}

func newRedactor(w io.Writer) *redactor {
	return &redactor{w: w}
}

// secrets sets the values to redact, as given and as they appear inside a
// JSON or HCL string.
func (r *redactor) secrets(values []string) {
	var all []string
	for _, v := range values {
		if v == "" {
			continue
		}
		all = append(all, v)
		if b, err := json.Marshal(v); err == nil {
			if q := string(b[1 : len(b)-1]); q != v {
				all = append(all, q)
			}
		}
	}
	// The longest first, so that a secret that contains another is
	// replaced whole.
	slices.SortFunc(all, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	var rep *strings.Replacer
	if len(all) > 0 {
		pairs := make([]string, 0, 2*len(all))
		for _, v := range all {
			pairs = append(pairs, v, Redacted)
		}
		rep = strings.NewReplacer(pairs...)
	}
	r.mu.Lock()
	r.rep = rep
	r.mu.Unlock()
}

func (r *redactor) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rep == nil {
		_, _ = r.w.Write(p)
	} else {
		_, _ = io.WriteString(r.w, r.rep.Replace(string(p)))
	}
	return len(p), nil
}

func (r *redactor) redact(s string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rep == nil {
		return s
	}
	return r.rep.Replace(s)
}

// redactError hides secrets in err's message (terraform's stderr is part of
// it) and keeps err's chain for errors.Is.
func (r *redactor) redactError(err error) error {
	msg := err.Error()
	if red := r.redact(msg); red != msg {
		return &redactedError{msg: red, err: err}
	}
	return err
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

package helm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"nuon.dev/nuon/reconciler"
)

// Redacted replaces a secret's value in the log and in errors.
const Redacted = "(redacted)"

// chartValues returns the job's inputs as Helm values: a copy normalised to
// what JSON holds (numbers as int64 or float64), with every
// ${secrets.NAME} resolved (see reconciler.ResolveSecrets). It also
// returns the secret values it used, for redaction.
func chartValues(inputs map[string]any, lookup func(string) (string, bool)) (map[string]any, []string, error) {
	b, err := json.Marshal(inputs)
	if err != nil {
		return nil, nil, fmt.Errorf("values: %w", err)
	}
	var vals map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&vals); err != nil {
		return nil, nil, fmt.Errorf("values: %w", err)
	}
	vals, secrets, err := reconciler.ResolveSecrets(vals, lookup)
	if err != nil {
		return nil, nil, err
	}
	return reconciler.TypedNumbers(vals).(map[string]any), secrets, nil
}

// specHash identifies what a release was made from: the chart's digest and
// the values, secrets included (only the hash leaves the job). It fits a
// label value.
func specHash(chartDigest string, vals map[string]any) string {
	b, _ := json.Marshal(vals) // map keys are sorted
	h := sha256.New()
	io.WriteString(h, chartDigest)
	h.Write([]byte{0})
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))[:40]
}

// redactor replaces secret values in what passes through it, line by
// line so that a value split across writes is still found.
type redactor struct {
	mu  sync.Mutex
	w   io.Writer
	r   *strings.Replacer
	buf []byte
}

func newRedactor(w io.Writer, secrets []string) *redactor {
	var pairs []string
	// Longest first, so that a secret containing another is replaced whole.
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, s := range secrets {
		pairs = append(pairs, s, Redacted)
	}
	return &redactor{w: w, r: strings.NewReplacer(pairs...)}
}

func (r *redactor) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, p...)
	i := bytes.LastIndexByte(r.buf, '\n')
	if i < 0 {
		return len(p), nil
	}
	if _, err := io.WriteString(r.w, r.r.Replace(string(r.buf[:i+1]))); err != nil {
		return 0, err
	}
	r.buf = append(r.buf[:0], r.buf[i+1:]...)
	return len(p), nil
}

// flush writes what is left of an unfinished line.
func (r *redactor) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.buf) > 0 {
		io.WriteString(r.w, r.r.Replace(string(r.buf)))
		r.buf = r.buf[:0]
	}
}

// redactError returns err with secret values replaced, keeping errors.Is
// working on the original.
func (r *redactor) redactError(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if red := r.r.Replace(msg); red != msg {
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

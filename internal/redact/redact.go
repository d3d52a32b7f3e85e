package redact

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// Marker replaces every redacted run of text.
const Marker = "[redacted]"

// MinLen is the fewest bytes a secret must have, not counting whitespace,
// to be redacted safely. Shorter values would be found everywhere (and
// so redact ordinary text) or, worse, pass for ordinary text; a run of
// MinLen+1 bytes of a secret is what the redactor treats as the secret.
const MinLen = 8

// EnvPrefix starts the names of the environment variables that hold an
// install's secrets, in the agent and in every job:
// ${secrets.db-password} comes from NUON_SECRET_DB_PASSWORD.
const EnvPrefix = "NUON_SECRET_"

// Errors Check wraps: retrying does not help, the secret must change.
var (
	// ErrTooShort: the secret has fewer than MinLen bytes besides
	// whitespace.
	ErrTooShort = errors.New("too short to redact")
	// ErrNotText: the secret is not valid UTF-8.
	ErrNotText = errors.New("not UTF-8 text")
)

// Check reports whether value can be redacted safely as secret name. The
// error names the secret, never its value. An empty value is allowed: it
// has nothing to leak.
func Check(name, value string) error {
	if value == "" {
		return nil
	}
	if !utf8.ValidString(value) {
		return fmt.Errorf("secret %s: %w", name, ErrNotText)
	}
	if n := len(normalizeString(value)); n < MinLen {
		return fmt.Errorf("secret %s: %w: %d bytes besides whitespace, the minimum is %d", name, ErrTooShort, n, MinLen)
	}
	return nil
}

// Redactor replaces secrets in text with Marker. It is safe for
// concurrent use. A nil *Redactor redacts nothing.
type Redactor struct {
	names  []string
	tables []*table // by pattern length, longest first
	maxLen int
}

// FromValues returns a Redactor for secret values that have no names of
// their own (the secrets a job's inputs resolved to): each is named
// input<i> in what New reports.
func FromValues(values []string) (*Redactor, error) {
	secrets := make(map[string]string, len(values))
	for i, v := range values {
		secrets[fmt.Sprintf("input%d", i)] = v
	}
	return New(secrets)
}

// New returns a Redactor for secrets, name → value. Every value must
// pass Check; the error joins one error per value that does not. Empty
// values are skipped.
func New(secrets map[string]string) (*Redactor, error) {
	var errs []error
	var usable []string
	for _, name := range slices.Sorted(maps.Keys(secrets)) {
		v := secrets[name]
		if err := Check(name, v); err != nil {
			errs = append(errs, err)
			continue
		}
		if v != "" {
			usable = append(usable, name)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return build(usable, secrets), nil
}

// FromEnviron returns a Redactor for the secrets of environ ("KEY=value"
// entries, as os.Environ gives): the values of the EnvPrefix variables.
// Values that fail Check are left out and named in the error; the
// Redactor covers the others and is not nil, so a caller may warn and go
// on (reconciler.ResolveSecrets refuses to resolve those values).
func FromEnviron(environ []string) (*Redactor, error) {
	secrets := map[string]string{}
	var errs []error
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, EnvPrefix) || v == "" {
			continue
		}
		if err := Check(k, v); err != nil {
			errs = append(errs, err)
			continue
		}
		secrets[k] = v
	}
	return build(slices.Sorted(maps.Keys(secrets)), secrets), errors.Join(errs...)
}

// Names are the names of the secrets r redacts, sorted.
func (r *Redactor) Names() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.names)
}

func build(names []string, secrets map[string]string) *Redactor {
	r := &Redactor{names: names}
	byLen := map[int]*table{}
	frag := MinLen + 1
	for _, name := range names {
		for _, f := range forms(secrets[name]) {
			if len(f) <= frag {
				addPattern(byLen, f)
				continue
			}
			for i := 0; i+frag <= len(f); i++ {
				addPattern(byLen, f[i:i+frag])
			}
		}
	}
	for _, t := range byLen {
		r.tables = append(r.tables, t)
		r.maxLen = max(r.maxLen, t.n)
	}
	slices.SortFunc(r.tables, func(a, b *table) int { return b.n - a.n })
	return r
}

func (r *Redactor) empty() bool { return r == nil || len(r.tables) == 0 }

// String returns s with every secret, in every form it knows, replaced
// by Marker.
func (r *Redactor) String(s string) string {
	if r.empty() {
		return s
	}
	spans := r.find([]byte(s))
	if len(spans) == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	pos := 0
	for _, sp := range spans {
		b.WriteString(s[pos:sp.start])
		b.WriteString(Marker)
		pos = sp.end
	}
	b.WriteString(s[pos:])
	return b.String()
}

// Bytes returns b with every secret replaced by Marker. It returns b
// itself when there is nothing to replace.
func (r *Redactor) Bytes(b []byte) []byte {
	if r.empty() {
		return b
	}
	spans := r.find(b)
	if len(spans) == 0 {
		return b
	}
	out := make([]byte, 0, len(b))
	pos := 0
	for _, sp := range spans {
		out = append(out, b[pos:sp.start]...)
		out = append(out, Marker...)
		pos = sp.end
	}
	return append(out, b[pos:]...)
}

// Error returns err with its message redacted; errors.Is and errors.As
// still see err's chain. It returns err itself when nothing changed.
func (r *Redactor) Error(err error) error {
	if err == nil || r.empty() {
		return err
	}
	msg := err.Error()
	if red := r.String(msg); red != msg {
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

// span is a run of the original text to replace, [start, end).
type span struct{ start, end int }

// find returns the runs of text to replace, sorted and disjoint, each on
// rune boundaries.
func (r *Redactor) find(text []byte) []span {
	norm := normalize(make([]byte, 0, len(text)), text)
	return locate(text, r.match(norm))
}

// match returns the runs of norm that hold a pattern, sorted and merged
// (runs that touch are one).
func (r *Redactor) match(norm []byte) []span {
	var spans []span
	for _, t := range r.tables {
		spans = t.scan(norm, spans)
	}
	if len(spans) == 0 {
		return nil
	}
	if len(r.tables) > 1 {
		sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	}
	return merge(spans)
}

func merge(spans []span) []span {
	out := spans[:1]
	for _, s := range spans[1:] {
		last := &out[len(out)-1]
		if s.start <= last.end {
			last.end = max(last.end, s.end)
			continue
		}
		out = append(out, s)
	}
	return out
}

// locate maps runs of the normalized text back to the original: from the
// first byte of the rune holding a run's first byte to the last byte of
// the rune holding its last byte. Runs that come to touch are merged.
func locate(text []byte, spans []span) []span {
	if len(spans) == 0 {
		return nil
	}
	// Positions to find, in normalized offsets: each start, and each
	// end-1 (the last byte).
	out := make([]span, len(spans))
	k := 0 // normalized offset of text[i]
	si := 0
	wantEnd := false
	for i := 0; i < len(text) && si < len(spans); {
		c := text[i]
		n := 1
		keep := true
		if c >= utf8.RuneSelf {
			var ru rune
			ru, n = utf8.DecodeRune(text[i:])
			keep = !dropped(ru)
		} else {
			keep = !(c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r')
		}
		if !keep {
			i += n
			continue
		}
		// This rune covers normalized bytes [k, k+n).
		for si < len(spans) {
			if !wantEnd {
				if spans[si].start >= k+n {
					break
				}
				out[si].start = i
				wantEnd = true
			}
			if spans[si].end-1 >= k+n {
				break
			}
			out[si].end = i + n
			wantEnd = false
			si++
		}
		k += n
		i += n
	}
	return merge(out)
}

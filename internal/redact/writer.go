package redact

import (
	"io"
	"sync"
	"unicode/utf8"
)

// Writer redacts what is written to it and passes the rest on. A secret
// split between two writes is still found: Writer holds back the last
// bytes of what it was given, as many as the longest pattern less one
// (plus the whitespace among them), until the next write or Close. It is
// safe for concurrent use, so a process's stdout and stderr can share one.
type Writer struct {
	r  *Redactor
	w  io.Writer
	mu sync.Mutex
	// held is what was written and not yet passed on; its first carry
	// bytes belong to a run already replaced by Marker.
	held  []byte
	carry int
	err   error
}

// Writer returns a Writer that writes to w. Close it to pass on what it
// holds back; it does not close w.
func (r *Redactor) Writer(w io.Writer) *Writer {
	return &Writer{r: r, w: w}
}

// Write redacts p and writes what is certain to w. It reports len(p)
// unless w failed; after a failure every call returns that error.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return 0, w.err
	}
	if w.r.empty() {
		if _, err := w.w.Write(p); err != nil {
			w.err = err
			return 0, err
		}
		return len(p), nil
	}
	w.held = append(w.held, p...)
	if err := w.emit(false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close writes what Write held back.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if w.r.empty() || len(w.held) == 0 {
		return nil
	}
	return w.emit(true)
}

// emit writes the part of held that no later write can change: all of it
// when final, else up to the first byte a pattern that ends in future
// text could start at.
func (w *Writer) emit(final bool) error {
	buf := w.held
	if !final {
		// A rune split between writes waits for its other bytes.
		buf = buf[:len(buf)-incomplete(buf)]
	}
	norm := normalize(make([]byte, 0, len(buf)), buf)
	spans := locate(buf, w.r.match(norm))
	if w.carry > 0 {
		spans = merge(append([]span{{0, w.carry}}, spans...))
	}
	cut := len(buf)
	if !final {
		cut = offsetOf(buf, len(norm)-(w.r.maxLen-1))
		if cut == 0 {
			return nil // nothing certain yet
		}
	}
	out := make([]byte, 0, cut+len(Marker))
	pos, carry := 0, 0
	for _, sp := range spans {
		if sp.start >= cut {
			break
		}
		out = append(out, buf[pos:sp.start]...)
		if sp.start != 0 || w.carry == 0 {
			out = append(out, Marker...)
		}
		if sp.end > cut {
			carry, pos = sp.end-cut, cut
			break
		}
		pos = sp.end
	}
	if pos < cut {
		out = append(out, buf[pos:cut]...)
	}
	n := copy(w.held, w.held[cut:])
	w.held, w.carry = w.held[:n], carry
	if len(out) > 0 {
		if _, err := w.w.Write(out); err != nil {
			w.err = err
			return err
		}
	}
	return nil
}

// offsetOf returns the offset in text of the rune that holds byte k of
// its normalized form (byte 0 when k < 0), or len(text) past the end: what
// comes before it, whitespace included, can be written.
func offsetOf(text []byte, k int) int {
	k = max(k, 0)
	seen := 0
	for i := 0; i < len(text); {
		r, n := rune(text[i]), 1
		if text[i] >= utf8.RuneSelf {
			r, n = utf8.DecodeRune(text[i:])
		}
		if !dropped(r) {
			if seen+n > k {
				return i
			}
			seen += n
		}
		i += n
	}
	return len(text)
}

// incomplete returns how many bytes at the end of b start a UTF-8
// sequence that is not complete yet.
func incomplete(b []byte) int {
	for i := 1; i <= utf8.UTFMax-1 && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < utf8.RuneSelf {
			return 0
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(b[len(b)-i:]) {
				return 0
			}
			return i
		}
	}
	return 0
}

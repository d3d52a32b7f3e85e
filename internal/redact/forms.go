package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// forms returns every spelling of v that a tool may print, each with the
// characters normalize drops removed: raw; Go's %q and %+q; JSON with and
// without HTML-safe escaping; HCL's string escaping; shell single and
// double quoting; each of those quoted once more by Go or JSON (an error
// that quotes the value, inside status.json or a log line); and base64 (standard and URL alphabets) of the raw and
// JSON spellings at each of the three byte alignments a value can have
// inside a longer stream, of the whole value padded, and once more
// base64 of those (a password inside a dockerconfigjson's auth field,
// inside a Secret's data).
func forms(v string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		s = string(normalizeString(s))
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	goQ := strconv.Quote(v)
	asciiQ := strconv.QuoteToASCII(v)
	jsonHTML := jsonInner(v, true)
	jsonPlain := jsonInner(v, false)
	texts := []string{
		v,
		goQ[1 : len(goQ)-1],
		asciiQ[1 : len(asciiQ)-1],
		jsonHTML,
		jsonPlain,
		hclEscape(v),
		strings.ReplaceAll(v, `'`, `'\''`),
		strings.ReplaceAll(v, `'`, `'"'"'`),
		shellDouble(v),
	}
	for _, s := range texts {
		add(s)
		// Quoted once more: an error that quotes the value, in a JSON
		// document or a quoted log attribute.
		q := strconv.Quote(s)
		add(q[1 : len(q)-1])
		add(jsonInner(s, true))
		add(jsonInner(s, false))
	}
	var inner []string
	for _, s := range []string{v, jsonPlain, jsonHTML} {
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			for a := range 3 {
				b := aligned(enc, s, a)
				add(b)
				if enc == base64.RawStdEncoding && s == v {
					inner = append(inner, b)
				}
			}
		}
		add(base64.StdEncoding.EncodeToString([]byte(s)))
		add(base64.URLEncoding.EncodeToString([]byte(s)))
	}
	for _, s := range inner {
		for a := range 3 {
			add(aligned(base64.RawStdEncoding, s, a))
		}
	}
	return out
}

// aligned is the part of the base64 encoding of s that does not depend on
// its neighbours when s starts a bytes into a 3-byte group of a longer
// stream.
func aligned(enc *base64.Encoding, s string, a int) string {
	buf := make([]byte, a+len(s))
	copy(buf[a:], s)
	e := enc.EncodeToString(buf)
	start := [3]int{0, 2, 3}[a]
	end := len(e)
	if len(buf)%3 != 0 {
		end-- // the last character also holds bits of the next byte
	}
	if start >= end {
		return ""
	}
	return e[start:end]
}

// jsonInner is v as encoding/json writes it inside quotes.
func jsonInner(v string, html bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	_ = enc.Encode(v)
	s := strings.TrimSuffix(b.String(), "\n")
	return s[1 : len(s)-1]
}

// hclEscape is v as terraform writes it inside an HCL string literal.
func hclEscape(v string) string {
	var b strings.Builder
	for i, r := range v {
		switch {
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case (r == '$' || r == '%') && strings.HasPrefix(v[i+1:], "{"):
			b.WriteRune(r)
			b.WriteRune(r)
		case !unicode.IsPrint(r):
			if r > 0xffff {
				fmt.Fprintf(&b, `\U%08x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// shellDouble is v inside a POSIX shell's double quotes.
func shellDouble(v string) string {
	var b strings.Builder
	for _, r := range v {
		if strings.ContainsRune("\\\"$`", r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// dropped reports whether normalize removes r: whitespace, which word
// wrapping inserts and moves, and box-drawing characters, which frame
// terraform's diagnostics.
func dropped(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x2500 && r <= 0x257f)
}

// normalize appends to dst the bytes of text that are not dropped.
func normalize(dst, text []byte) []byte {
	for i := 0; i < len(text); {
		c := text[i]
		if c < utf8.RuneSelf {
			switch c {
			case ' ', '\t', '\n', '\v', '\f', '\r':
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(text[i:])
		if !dropped(r) {
			dst = append(dst, text[i:i+n]...)
		}
		i += n
	}
	return dst
}

func normalizeString(s string) []byte { return normalize(nil, []byte(s)) }

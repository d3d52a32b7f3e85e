// Package redacttest checks text for leaked secrets, for tests of
// everything that must redact. Its encoders are written apart from
// package redact's, with the standard library's own where there is one,
// so a test does not check the redactor against itself.
package redacttest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"nuon.dev/nuon/internal/redact"
)

// Encoding is one way a tool may print a value: Encode returns the text a
// tool prints for it, and Stable the part of that text that depends on
// the value alone (what a leak check looks for).
type Encoding struct {
	Name   string
	Encode func(string) string
	Stable func(string) string
	// escaping is true for an encoding that escapes each character on its
	// own between quotes (all but base64).
	escaping bool
}

func same(f func(string) string) func(string) string { return f }

// Encodings are the ways of printing a value that the redactor must see
// through.
var Encodings = []Encoding{
	{Name: "raw", Encode: func(s string) string { return s }},
	{Name: "go %q", Encode: strconv.Quote},
	{Name: "go %+q", Encode: strconv.QuoteToASCII},
	{Name: "json", Encode: func(s string) string { b, _ := json.Marshal(s); return string(b) }},
	{Name: "json no html escape", Encode: func(s string) string {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s)
		return strings.TrimSuffix(b.String(), "\n")
	}},
	{Name: "go %q in json", Encode: func(s string) string { b, _ := json.Marshal(strconv.Quote(s)); return string(b) }},
	{Name: "go %q in go %q", Encode: func(s string) string { return strconv.Quote(strconv.Quote(s)) }},
	{Name: "hcl in json", Encode: func(s string) string { b, _ := json.Marshal(HCL(s)); return string(b) }},
	{Name: "hcl", Encode: func(s string) string { return `"` + HCL(s) + `"` }},
	{Name: "shell single", Encode: func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }},
	{Name: "shell double", Encode: func(s string) string {
		var b strings.Builder
		b.WriteByte('"')
		for _, r := range s {
			if strings.ContainsRune("\\\"$`", r) {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
		return b.String()
	}},
	{Name: "base64", Encode: func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }},
	{Name: "base64 url raw", Encode: func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }},
	{Name: "base64 offset 1", Encode: func(s string) string { return base64.StdEncoding.EncodeToString([]byte("k" + s + "xyz")) }, Stable: func(s string) string { return stable(base64.StdEncoding, s, 1) }},
	{Name: "base64 offset 2", Encode: func(s string) string { return base64.StdEncoding.EncodeToString([]byte("ke" + s + "xyz")) }, Stable: func(s string) string { return stable(base64.StdEncoding, s, 2) }},
	{Name: "base64 of json in a stream", Encode: func(s string) string {
		b, _ := json.Marshal(map[string]string{"password": s})
		return base64.StdEncoding.EncodeToString(b)
	}, Stable: func(s string) string {
		b, _ := json.Marshal(s)
		inner := string(b[1 : len(b)-1])
		return stable(base64.StdEncoding, inner, len(`{"password":"`)%3)
	}},
}

func init() {
	for i := range Encodings {
		if Encodings[i].Stable == nil {
			Encodings[i].Stable = same(Encodings[i].Encode)
			Encodings[i].escaping = !strings.HasPrefix(Encodings[i].Name, "base64")
		}
	}
}

// stable is the part of the base64 of a stream that holds s at byte
// offset a of a 3-byte group and depends on s alone.
func stable(enc *base64.Encoding, s string, a int) string {
	pre := strings.Repeat("\x00", a)
	e := enc.EncodeToString([]byte(pre + s))
	e = strings.TrimRight(e, "=")
	start := (a*4 + 2) / 3 // characters that hold bits of the prefix
	end := len(pre+s) * 8 / 6
	if start > end {
		return ""
	}
	return e[start:end]
}

// HCL is s escaped as terraform writes it inside a string literal.
func HCL(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i, r := range rs {
		next := rune(0)
		if i+1 < len(rs) {
			next = rs[i+1]
		}
		switch {
		case r == '"' || r == '\\':
			b.WriteRune('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case (r == '$' || r == '%') && next == '{':
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

// Leaks returns what text holds of secret: for every encoding, the
// encoded form of each whitespace-free fragment of the value longer than
// redact.MinLen bytes (the property the redactor promises), whitespace and
// box-drawing characters removed on both sides. An escaping encoding is
// checked fragment by fragment of the value, so its quotes and the
// escapes it adds do not count towards a fragment's length; a base64 one,
// whose characters mix neighbouring bytes, over windows of its stable
// form. A run of redact.Marker is a boundary, not text. Nil means no leak.
func Leaks(text, secret string) []string {
	hay := squeeze(strings.ReplaceAll(text, redact.Marker, "\x00"))
	var out []string
	for _, e := range Encodings {
		if e.escaping {
			if f, ok := leakedFragment(hay, secret, e); ok {
				out = append(out, fmt.Sprintf("%s: %q", e.Name, f))
			}
			continue
		}
		f := squeeze(e.Stable(secret))
		n := redact.MinLen + 1
		if len(f) < n {
			if f != "" && len(f) >= redact.MinLen && strings.Contains(hay, f) {
				out = append(out, fmt.Sprintf("%s: %q", e.Name, f))
			}
			continue
		}
		for i := 0; i+n <= len(f); i++ {
			if strings.Contains(hay, f[i:i+n]) {
				out = append(out, fmt.Sprintf("%s: %q", e.Name, f[i:i+n]))
				break
			}
		}
	}
	return out
}

// leakedFragment looks for the encoding e of every shortest run of
// secret's whitespace-free fragments that is longer than redact.MinLen
// bytes, and returns the first found.
func leakedFragment(hay, secret string, e Encoding) (string, bool) {
	delims := e.Encode("")
	pre, suf := len(delims)/2, len(delims)-len(delims)/2
	for _, frag := range strings.FieldsFunc(secret, func(r rune) bool { return unicode.IsSpace(r) }) {
		if len(frag) < redact.MinLen {
			continue
		}
		for i := range frag {
			// The shortest run from i of more than MinLen bytes, ending on
			// a rune boundary.
			j := i + redact.MinLen + 1
			for j < len(frag) && !utf8.RuneStart(frag[j]) {
				j++
			}
			if j > len(frag) {
				if i > 0 {
					break
				}
				j = len(frag) // a fragment of exactly MinLen bytes: whole
			}
			enc := e.Encode(frag[i:j])
			enc = squeeze(enc[pre : len(enc)-suf])
			if enc != "" && strings.Contains(hay, enc) {
				return enc, true
			}
		}
	}
	return "", false
}

// squeeze drops whitespace and box-drawing characters.
func squeeze(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || (r >= 0x2500 && r <= 0x257f) {
			return -1
		}
		return r
	}, s)
}

// GitObjects returns the content of every object in the git repository
// at dir (all refs, all history, unreachable objects too): blobs, trees,
// commits with their messages, and tags.
func GitObjects(t testing.TB, dir string) map[string]string {
	t.Helper()
	cmd := exec.Command("git", "-C", dir, "cat-file", "--batch-all-objects", "--batch", "--unordered")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git cat-file in %s: %v", dir, err)
	}
	objs := map[string]string{}
	for len(out) > 0 {
		// "<oid> <type> <size>\n<content>\n"
		nl := bytes.IndexByte(out, '\n')
		if nl < 0 {
			t.Fatalf("git cat-file: truncated header")
		}
		f := strings.Fields(string(out[:nl]))
		if len(f) != 3 {
			t.Fatalf("git cat-file: header %q", out[:nl])
		}
		size, err := strconv.Atoi(f[2])
		if err != nil || nl+1+size+1 > len(out) {
			t.Fatalf("git cat-file: header %q", out[:nl])
		}
		objs[f[0]+" "+f[1]] = string(out[nl+1 : nl+1+size])
		out = out[nl+1+size+1:]
	}
	return objs
}

// NoLeaks fails t for every text that leaks secret, naming it by its key.
func NoLeaks(t testing.TB, secret string, texts map[string]string) {
	t.Helper()
	for name, text := range texts {
		if leaks := Leaks(text, secret); leaks != nil {
			t.Errorf("%s leaks the secret %q: %v\n%s", name, secret, leaks, text)
		}
	}
}

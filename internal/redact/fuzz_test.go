package redact_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/internal/redact/redacttest"
)

// FuzzRedact: a random secret in a random encoding, in random text,
// wrapped or not, never survives redaction in any encoding; redaction only
// replaces runs of the text with the marker; and text that holds no
// secret is unchanged.
func FuzzRedact(f *testing.F) {
	f.Add(`pa"ss<&>wo\rd`, "before ", " after", uint8(0), uint8(0))
	f.Add("the quick brown fox jumps over", "│ Error: ", " the lazy dog", uint8(0), uint8(20))
	f.Add("a${b}%{c}\"d and more", "+ v = ", "", uint8(5), uint8(0))
	f.Add("it's a secret, isn't it", "echo ", "", uint8(6), uint8(0))
	f.Add("日本語のパスワードです", "x", "y", uint8(10), uint8(7))
	f.Fuzz(func(t *testing.T, secret, prefix, suffix string, enc, width uint8) {
		if redact.Check("S", secret) != nil || secret == "" || !utf8.ValidString(prefix+suffix) ||
			strings.Contains(prefix+suffix, redact.Marker) {
			return
		}
		r, err := redact.New(map[string]string{"S": secret})
		if err != nil {
			t.Fatal(err)
		}
		e := redacttest.Encodings[int(enc)%len(redacttest.Encodings)]
		text := prefix + e.Encode(secret) + suffix
		if width > 0 {
			text = wrap(text, int(width), width%2 == 0)
		}
		got := r.String(text)
		if leaks := redacttest.Leaks(got, secret); leaks != nil {
			t.Fatalf("%s of %q leaks %v:\n%s", e.Name, secret, leaks, got)
		}
		if !onlyReplaced(text, got) {
			t.Fatalf("redaction changed more than runs of the text:\n%q\n%q", text, got)
		}
		// The same text through a Writer, split in three writes.
		var b strings.Builder
		w := r.Writer(&b)
		i := int(width) * 7 % (len(text) + 1)
		j := i + (len(text)-i)/2
		w.Write([]byte(text[:i]))
		w.Write([]byte(text[i:j]))
		w.Write([]byte(text[j:]))
		w.Close()
		if leaks := redacttest.Leaks(b.String(), secret); leaks != nil {
			t.Fatalf("Writer, split at %d and %d: %s of %q leaks %v:\n%s", i, j, e.Name, secret, leaks, b.String())
		}
		if !onlyReplaced(text, b.String()) {
			t.Fatalf("Writer changed more than runs of the text:\n%q\n%q", text, b.String())
		}
		// A secret of runes no ASCII text holds leaves ASCII text alone.
		var other strings.Builder
		for i := 0; i < len(secret); i++ {
			other.WriteRune(0x4e00 + rune(secret[i]))
		}
		r2, err := redact.New(map[string]string{"S": other.String()})
		if err != nil {
			t.Fatal(err)
		}
		ascii := strings.Map(func(r rune) rune {
			if r >= utf8.RuneSelf {
				return -1
			}
			return r
		}, prefix+suffix)
		if got := r2.String(ascii); got != ascii {
			t.Fatalf("text without the secret changed: %q → %q", ascii, got)
		}
	})
}

// onlyReplaced reports whether out is in with some runs replaced by the
// marker.
func onlyReplaced(in, out string) bool {
	parts := strings.Split(out, redact.Marker)
	if !strings.HasPrefix(in, parts[0]) || !strings.HasSuffix(in, parts[len(parts)-1]) {
		return false
	}
	rest := in[len(parts[0]):]
	for _, p := range parts[1:] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

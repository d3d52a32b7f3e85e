package redact_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/internal/redact/redacttest"
)

func mustNew(t testing.TB, secrets ...string) *redact.Redactor {
	t.Helper()
	m := map[string]string{}
	for i, s := range secrets {
		m[fmt.Sprintf("S%d", i)] = s
	}
	r, err := redact.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestString(t *testing.T) {
	const quoted = `pa"ss<&>wo\rd`
	tests := []struct {
		name    string
		secrets []string
		in      string
		want    string
	}{
		{"no secret in the text", []string{"hunter2hunter2"}, "nothing to see\n", "nothing to see\n"},
		{"raw, twice", []string{"hunter2hunter2"}, "a hunter2hunter2 b hunter2hunter2\n", "a [redacted] b [redacted]\n"},
		{"go %q", []string{quoted}, fmt.Sprintf("value %q ok", quoted), `value "[redacted]" ok`},
		{"json, html-safe", []string{quoted}, `{"v":"pa\"ss\u003c\u0026\u003ewo\\rd"}`, `{"v":"[redacted]"}`},
		{"json, plain", []string{quoted}, `{"v":"pa\"ss<&>wo\\rd"}`, `{"v":"[redacted]"}`},
		{"hcl", []string{"a${b}%{c}\"d"}, `+ v = "a$${b}%%{c}\"d"`, `+ v = "[redacted]"`},
		{"shell single", []string{"it's a secret"}, `echo 'it'\''s a secret'`, `echo '[redacted]'`},
		{"shell double", []string{"cost $5 `x`"}, "echo \"cost \\$5 \\`x\\`\"", `echo "[redacted]"`},
		{"base64", []string{"hunter2hunter2"}, "data: " + base64.StdEncoding.EncodeToString([]byte("hunter2hunter2")), "data: [redacted]"},
		{"base64 inside a stream", []string{"hunter2hunter2"}, "data: " + base64.StdEncoding.EncodeToString([]byte(`{"p":"hunter2hunter2"}`)),
			"data: eyJwIjoi[redacted]ifQ=="},
		{"wrapped by terraform", []string{"the quick brown fox jumps over"},
			"│ Error: bad value the quick brown\n│ fox jumps over the lazy dog\n",
			"│ Error: bad value [redacted] the lazy dog\n"},
		{"truncated copy", []string{"0123456789abcdefghij"}, "value 0123456789abc...", "value [redacted]..."},
		{"a fragment of the minimum is left", []string{"0123456789abcdefghij"}, "zip 01234567 zap", "zip 01234567 zap"},
		{"non-ASCII kept whole", []string{"héllo wörld ünïcode"}, "x héllo wörld ünïcode y", "x [redacted] y"},
		{"longest of two overlapping", []string{"abcdefghij", "abcdefghijklmnop"}, "abcdefghijklmnop!", "[redacted]!"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustNew(t, tt.secrets...)
			got := r.String(tt.in)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("String (-want +got):\n%s", diff)
			}
			if b := r.Bytes([]byte(tt.in)); string(b) != got {
				t.Errorf("Bytes = %q, String = %q", b, got)
			}
		})
	}
}

func TestNil(t *testing.T) {
	var r *redact.Redactor
	if got := r.String("anything"); got != "anything" {
		t.Errorf("nil String = %q", got)
	}
	var b bytes.Buffer
	w := r.Writer(&b)
	io.WriteString(w, "text")
	w.Close()
	if b.String() != "text" {
		t.Errorf("nil Writer wrote %q", b.String())
	}
	if err := r.Error(io.EOF); err != io.EOF {
		t.Errorf("nil Error = %v", err)
	}
}

func TestNew(t *testing.T) {
	_, err := redact.New(map[string]string{"TOKEN": "abc", "OK": "long enough", "SPACED": "a b c d e f g", "EMPTY": ""})
	if err == nil {
		t.Fatal("New accepted a 3-byte secret")
	}
	for _, want := range []string{"secret TOKEN: too short to redact: 3 bytes besides whitespace, the minimum is 8", "secret SPACED: too short"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "abc") || !errors.Is(err, redact.ErrTooShort) {
		t.Errorf("error = %v: want ErrTooShort, without the value", err)
	}
	if _, err := redact.New(map[string]string{"BIN": "\xff\xfe0123456789"}); !errors.Is(err, redact.ErrNotText) {
		t.Errorf("New of invalid UTF-8 = %v, want ErrNotText", err)
	}
}

func TestFromEnviron(t *testing.T) {
	r, err := redact.FromEnviron([]string{"HOME=/root", "NUON_SECRET_A=long-enough-1", "NUON_SECRET_B=abc", "NUON_SECRET_C=", "PASSWORD=not-a-secret-here"})
	if err == nil || !strings.Contains(err.Error(), "NUON_SECRET_B") {
		t.Errorf("error = %v, want one naming NUON_SECRET_B", err)
	}
	if diff := cmp.Diff([]string{"NUON_SECRET_A"}, r.Names()); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
	if got := r.String("x long-enough-1 not-a-secret-here"); got != "x [redacted] not-a-secret-here" {
		t.Errorf("String = %q", got)
	}
}

func TestError(t *testing.T) {
	r := mustNew(t, "hunter2hunter2")
	err := r.Error(fmt.Errorf("apply: value hunter2hunter2: %w", context.Canceled))
	if got, want := err.Error(), "apply: value [redacted]: context canceled"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, context.Canceled) {
		t.Error("redacted error lost its chain")
	}
	plain := errors.New("nothing")
	if r.Error(plain) != plain {
		t.Error("Error changed an error without secrets")
	}
}

// TestWriterSplit writes a text in every split into two writes, and in
// single bytes, and gets what String gives for the whole.
func TestWriterSplit(t *testing.T) {
	r := mustNew(t, "the quick brown fox", `q"uote<d>`)
	in := "start the quick\n│ brown fox and \"q\\\"uote\\u003cd\\u003e\" end the quick brown"
	want := r.String(in)
	for i := 0; i <= len(in); i++ {
		var b bytes.Buffer
		w := r.Writer(&b)
		io.WriteString(w, in[:i])
		io.WriteString(w, in[i:])
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if b.String() != want {
			t.Fatalf("split at %d: %q, want %q", i, b.String(), want)
		}
	}
	var b bytes.Buffer
	w := r.Writer(&b)
	for i := range len(in) {
		w.Write([]byte{in[i]})
	}
	w.Close()
	if got := b.String(); redacttest.Leaks(got, "the quick brown fox") != nil || redacttest.Leaks(got, `q"uote<d>`) != nil {
		t.Errorf("byte by byte: %q leaks", got)
	}
}

// TestWriterHoldsLittle: what is certain is written at once.
func TestWriterHoldsLittle(t *testing.T) {
	r := mustNew(t, "hunter2hunter2")
	var b bytes.Buffer
	w := r.Writer(&b)
	io.WriteString(w, "line one hunter2hunter2 done\nline two\n")
	held := strings.TrimPrefix("line one [redacted] done\nline two\n", b.String())
	if got := b.String(); !strings.HasPrefix(got, "line one [redacted] do") || len(strings.Join(strings.Fields(held), "")) > redact.MinLen {
		t.Errorf("written before Close: %q", got)
	}
	w.Close()
	if got := b.String(); got != "line one [redacted] done\nline two\n" {
		t.Errorf("after Close: %q", got)
	}
}

func TestHandler(t *testing.T) {
	r := mustNew(t, "hunter2hunter2")
	var b bytes.Buffer
	log := slog.New(r.Handler(slog.NewJSONHandler(&b, nil))).With("pre", "x hunter2hunter2")
	log.Info("saw hunter2hunter2", "s", "hunter2hunter2", "err", errors.New("bad hunter2hunter2"),
		slog.Group("g", "inner", "hunter2hunter2"), "n", 3, "any", []string{"hunter2hunter2"})
	if strings.Contains(b.String(), "hunter2") {
		t.Errorf("log holds the secret: %s", b.String())
	}
	var rec map[string]any
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["msg"] != "saw [redacted]" || rec["n"] != 3.0 || rec["pre"] != "x [redacted]" {
		t.Errorf("record = %v", rec)
	}
}

// TestRandomSecrets puts random secrets in every encoding, wrapped at
// random widths, into random text.
func TestRandomSecrets(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		secret := randomSecret(rng)
		r := mustNew(t, secret)
		for _, e := range redacttest.Encodings {
			text := "prefix " + randomText(rng, 40) + " " + e.Encode(secret) + " " + randomText(rng, 40) + " suffix"
			text = wrap(text, 10+rng.IntN(70), rng.IntN(2) == 0)
			got := r.String(text)
			if leaks := redacttest.Leaks(got, secret); leaks != nil {
				t.Fatalf("case %d, %s: secret %q leaks %v in\n%s\nfrom\n%s", i, e.Name, secret, leaks, got, text)
			}
		}
	}
}

const printable = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

func randomSecret(rng *rand.Rand) string {
	n := redact.MinLen + rng.IntN(300)
	var b strings.Builder
	for b.Len() < n {
		switch rng.IntN(20) {
		case 0:
			b.WriteString("é")
		case 1:
			b.WriteString("日本")
		case 2:
			b.WriteString("${")
		default:
			b.WriteByte(printable[rng.IntN(len(printable))])
		}
	}
	s := strings.TrimSpace(b.String())
	for len(strings.Join(strings.Fields(s), "")) < redact.MinLen {
		s += "x"
	}
	return s
}

func randomText(rng *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteByte(printable[rng.IntN(len(printable))])
	}
	return b.String()
}

// wrap breaks text into lines of at most width bytes at spaces, as
// terraform does, optionally framing them as a diagnostic.
func wrap(text string, width int, box bool) string {
	var lines []string
	var line strings.Builder
	for _, w := range strings.Split(text, " ") {
		if line.Len() > 0 && line.Len()+1+len(w) > width {
			lines = append(lines, line.String())
			line.Reset()
		}
		if line.Len() > 0 {
			line.WriteByte(' ')
		}
		line.WriteString(w)
	}
	lines = append(lines, line.String())
	if box {
		return "╷\n│ " + strings.Join(lines, "\n│ ") + "\n╵\n"
	}
	return strings.Join(lines, "\n")
}

// TestWriterWhitespace: a long run of whitespace is passed on, not held.
func TestWriterWhitespace(t *testing.T) {
	r := mustNew(t, "hunter2hunter2")
	var b bytes.Buffer
	w := r.Writer(&b)
	for range 1000 {
		io.WriteString(w, " \n")
	}
	if b.Len() != 2000 {
		t.Errorf("held back %d bytes of whitespace", 2000-b.Len())
	}
	io.WriteString(w, "hunter2")
	io.WriteString(w, "hunter2 x")
	w.Close()
	if !strings.HasSuffix(b.String(), " \n[redacted] x") {
		t.Errorf("got %q", b.String()[1990:])
	}
}

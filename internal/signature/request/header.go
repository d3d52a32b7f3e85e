package request

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// Label is the one signature label this package writes and reads: the
// member name in Signature-Input and Signature.
const Label = "nuon"

// Tag is the RFC 9421 tag parameter of every request signature: it names
// what the signature is for, so that a nuon request signature is not
// taken for another application's, and it is part of what is signed.
const Tag = "nuon-request"

// Alg is the one signature algorithm: Ed25519 over the signature base
// (RFC 9421 §3.3.6), with the install's SSH ed25519 key.
const Alg = "ed25519"

// Components are the covered components of a request signature, in the
// order the signer lists them. A verifier accepts them in any order, but
// every one exactly once and nothing else.
var Components = []string{"@method", "@path", "@query", "content-digest"}

// Header names.
const (
	headerInput     = "Signature-Input"
	headerSignature = "Signature"
	headerDigest    = "Content-Digest"
)

// Limits of what a verifier parses.
const (
	maxHeader   = 1024 // one Signature-Input, Signature or Content-Digest value
	minNonce    = 16   // characters of a nonce
	maxNonce    = 64
	sizeSig     = 64 // bytes of an Ed25519 signature
	sizeSHA256  = 32
	maxParamLen = 64 // characters of a parameter's string value
)

// Input is the parsed value of a request's Signature-Input member: the
// covered components and the signature parameters (RFC 9421 §2.3). Its
// String is the member's value, which is also the last line of the
// signature base.
type Input struct {
	// Components are the covered components, as listed.
	Components []string
	// Created is when the signature was made, in Unix seconds.
	Created int64
	// KeyID is the install whose key signed.
	KeyID string
	// Nonce is random per signature: two identical requests in one
	// second have different signatures, and a replay is a signature
	// seen twice.
	Nonce string
	// Alg is the algorithm; only Alg is accepted.
	Alg string
	// Tag is the application; only Tag is accepted.
	Tag string

	// order is the order of the parameters as they were parsed; nil
	// means the signer's order (created, keyid, nonce, alg, tag). The
	// signature base must serialize them as they came.
	order []string
}

// params is the signer's order of the parameters.
var params = []string{"created", "keyid", "nonce", "alg", "tag"}

// String serializes the input as an RFC 8941 inner list with parameters,
// in the order the parameters were parsed (or the signer's order).
func (in Input) String() string {
	var b strings.Builder
	b.WriteByte('(')
	for i, c := range in.Components {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Quote(c))
	}
	b.WriteByte(')')
	order := in.order
	if order == nil {
		order = params
	}
	for _, p := range order {
		b.WriteByte(';')
		b.WriteString(p)
		b.WriteByte('=')
		switch p {
		case "created":
			b.WriteString(strconv.FormatInt(in.Created, 10))
		case "keyid":
			b.WriteString(strconv.Quote(in.KeyID))
		case "nonce":
			b.WriteString(strconv.Quote(in.Nonce))
		case "alg":
			b.WriteString(strconv.Quote(in.Alg))
		case "tag":
			b.WriteString(strconv.Quote(in.Tag))
		}
	}
	return b.String()
}

// ParseInput parses a Signature-Input header value: exactly one member,
// labelled Label, whose inner list names components as RFC 8941 strings
// and whose parameters are created (an integer) and keyid, nonce, alg and
// tag (strings), each exactly once, in any order. It is a strict subset of
// RFC 8941: no other members or parameters, no escapes in strings (none of
// the accepted values has a quote or backslash). Which components and
// values are acceptable is the verifier's business, not the parser's.
func ParseInput(h string) (Input, error) {
	var in Input
	if len(h) > maxHeader {
		return in, fmt.Errorf("%w: %s longer than %d bytes", ErrMalformed, headerInput, maxHeader)
	}
	v, ok := strings.CutPrefix(h, Label+"=")
	if !ok {
		return in, fmt.Errorf("%w: %s has no member %s", ErrMalformed, headerInput, Label)
	}
	if !strings.HasPrefix(v, "(") {
		return in, fmt.Errorf("%w: %s is not an inner list", ErrMalformed, headerInput)
	}
	end := strings.IndexByte(v, ')')
	if end < 0 {
		return in, fmt.Errorf("%w: %s: inner list not closed", ErrMalformed, headerInput)
	}
	for _, item := range strings.Split(v[1:end], " ") {
		if item == "" {
			continue // RFC 8941 allows any number of spaces
		}
		c, err := sfString(item)
		if err != nil {
			return in, fmt.Errorf("%w: %s component: %v", ErrMalformed, headerInput, err)
		}
		if len(in.Components) == len(Components) {
			return in, fmt.Errorf("%w: %s covers more than %d components", ErrMalformed, headerInput, len(Components))
		}
		in.Components = append(in.Components, c)
	}
	rest := v[end+1:]
	if rest != "" && rest[0] != ';' {
		return in, fmt.Errorf("%w: %s: %q after the inner list", ErrMalformed, headerInput, truncate(rest))
	}
	seen := map[string]bool{}
	for i, p := range strings.Split(rest, ";") {
		if i == 0 {
			continue // before the first ";": empty
		}
		p = strings.TrimLeft(p, " ")
		name, val, ok := strings.Cut(p, "=")
		if !ok {
			return in, fmt.Errorf("%w: %s parameter %q has no value", ErrMalformed, headerInput, truncate(p))
		}
		if seen[name] {
			return in, fmt.Errorf("%w: %s parameter %s twice", ErrMalformed, headerInput, truncate(name))
		}
		seen[name] = true
		var err error
		switch name {
		case "created":
			in.Created, err = sfInteger(val)
		case "keyid":
			in.KeyID, err = sfString(val)
		case "nonce":
			in.Nonce, err = sfString(val)
		case "alg":
			in.Alg, err = sfString(val)
		case "tag":
			in.Tag, err = sfString(val)
		default:
			return in, fmt.Errorf("%w: %s: unknown parameter %q", ErrMalformed, headerInput, truncate(name))
		}
		if err != nil {
			return in, fmt.Errorf("%w: %s parameter %s: %v", ErrMalformed, headerInput, name, err)
		}
		in.order = append(in.order, name)
	}
	for _, p := range params {
		if !seen[p] {
			return in, fmt.Errorf("%w: %s has no %s", ErrMalformed, headerInput, p)
		}
	}
	return in, nil
}

// sfString parses an RFC 8941 string without escapes: printable ASCII
// between double quotes.
func sfString(s string) (string, error) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", fmt.Errorf("%q is not a quoted string", truncate(s))
	}
	s = s[1 : len(s)-1]
	if len(s) > maxParamLen {
		return "", fmt.Errorf("string longer than %d", maxParamLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return "", fmt.Errorf("string %q has a character outside the accepted set", truncate(s))
		}
	}
	return s, nil
}

// sfInteger parses a non-negative RFC 8941 integer.
func sfInteger(s string) (int64, error) {
	if s == "" || len(s) > 15 {
		return 0, fmt.Errorf("%q is not an integer", truncate(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not an integer", truncate(s))
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// FormatSignature is the Signature header value for sig.
func FormatSignature(sig []byte) string {
	return Label + "=:" + base64.StdEncoding.EncodeToString(sig) + ":"
}

// ParseSignature parses a Signature header value: exactly one member,
// labelled Label, an RFC 8941 byte sequence of an Ed25519 signature.
func ParseSignature(h string) ([]byte, error) {
	if len(h) > maxHeader {
		return nil, fmt.Errorf("%w: %s longer than %d bytes", ErrMalformed, headerSignature, maxHeader)
	}
	v, ok := strings.CutPrefix(h, Label+"=")
	if !ok {
		return nil, fmt.Errorf("%w: %s has no member %s", ErrMalformed, headerSignature, Label)
	}
	b, err := sfBytes(v, sizeSig)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, headerSignature, err)
	}
	return b, nil
}

// FormatContentDigest is the Content-Digest header value (RFC 9530) of a
// SHA-256 digest.
func FormatContentDigest(sum [sizeSHA256]byte) string {
	return "sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":"
}

// ParseContentDigest parses a Content-Digest header value: exactly one
// member, sha-256, an RFC 8941 byte sequence of 32 bytes. Other
// algorithms (sha-512, or the deprecated md5 and sha) are refused rather
// than skipped, so that the one digest the server checks is the one the
// signature covers.
func ParseContentDigest(h string) ([sizeSHA256]byte, error) {
	var sum [sizeSHA256]byte
	if len(h) > maxHeader {
		return sum, fmt.Errorf("%w: %s longer than %d bytes", ErrMalformed, headerDigest, maxHeader)
	}
	v, ok := strings.CutPrefix(h, "sha-256=")
	if !ok {
		return sum, fmt.Errorf("%w: %s is not one sha-256 digest", ErrMalformed, headerDigest)
	}
	b, err := sfBytes(v, sizeSHA256)
	if err != nil {
		return sum, fmt.Errorf("%w: %s: %v", ErrMalformed, headerDigest, err)
	}
	copy(sum[:], b)
	return sum, nil
}

// sfBytes parses an RFC 8941 byte sequence (":" base64 ":") of size
// bytes. Base64 must be canonical and padded, so one value has one
// spelling.
func sfBytes(v string, size int) ([]byte, error) {
	if len(v) < 2 || v[0] != ':' || v[len(v)-1] != ':' {
		return nil, fmt.Errorf("not a byte sequence")
	}
	b, err := base64.StdEncoding.Strict().DecodeString(v[1 : len(v)-1])
	if err != nil {
		return nil, fmt.Errorf("not base64")
	}
	if len(b) != size {
		return nil, fmt.Errorf("%d bytes, want %d", len(b), size)
	}
	return b, nil
}

// signatureBase is what a request signature signs (RFC 9421 §2.5): one
// line per covered component, in the order listed, "name": value, then
// the "@signature-params" line with the Signature-Input member value; no
// newline after the last line. The components it knows are those of
// Components; it fails on any other.
func signatureBase(method, path, rawQuery, contentDigest string, in Input) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(256)
	for _, c := range in.Components {
		var v string
		switch c {
		case "@method":
			v = method
		case "@path":
			v = path
			if v == "" {
				v = "/"
			}
		case "@query":
			v = "?" + rawQuery
		case "content-digest":
			v = contentDigest
		default:
			return nil, fmt.Errorf("%w: covered component %q is not one of %q", ErrMalformed, truncate(c), Components)
		}
		if strings.ContainsAny(v, "\r\n") {
			return nil, fmt.Errorf("%w: component %s has a line break", ErrMalformed, c)
		}
		b.WriteString(strconv.Quote(c))
		b.WriteString(": ")
		b.WriteString(v)
		b.WriteByte('\n')
	}
	b.WriteString(`"@signature-params": `)
	b.WriteString(in.String())
	return b.Bytes(), nil
}

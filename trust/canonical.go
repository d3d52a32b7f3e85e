package trust

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds the nesting of a root file: the format needs five
// levels, and a hostile file must not exhaust the stack.
const maxDepth = 32

// Canonical returns the RFC 8785 (JSON Canonicalization Scheme) form of a
// JSON text: no whitespace, object members sorted by the UTF-16 code units
// of their names, strings with only the escapes JSON requires. The root
// format holds no fractions, so numbers must be integers of at most 2^53-1
// in magnitude, for which RFC 8785's number form is plain decimal. Text
// that is not UTF-8, has a member named twice in one object, or nests
// deeper than the format ever needs is refused: each would let two readers
// see different content under one signature.
func Canonical(data []byte) ([]byte, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("canonical form: not UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var b bytes.Buffer
	if err := canonValue(dec, &b, 0); err != nil {
		return nil, fmt.Errorf("canonical form: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("canonical form: text after the value")
	}
	return b.Bytes(), nil
}

func canonValue(dec *json.Decoder, b *bytes.Buffer, depth int) error {
	if depth > maxDepth {
		return errors.New("nested too deep")
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return canonObject(dec, b, depth)
		case '[':
			b.WriteByte('[')
			for n := 0; dec.More(); n++ {
				if n > 0 {
					b.WriteByte(',')
				}
				if err := canonValue(dec, b, depth+1); err != nil {
					return err
				}
			}
			_, err := dec.Token()
			b.WriteByte(']')
			return err
		}
		return fmt.Errorf("unexpected %v", t)
	case string:
		canonString(b, t)
	case json.Number:
		n, err := strconv.ParseInt(t.String(), 10, 64)
		if err != nil || n > 1<<53-1 || n < -(1<<53-1) {
			return fmt.Errorf("number %s is not an integer within ±2^53-1", t)
		}
		b.WriteString(strconv.FormatInt(n, 10))
	case bool:
		b.WriteString(strconv.FormatBool(t))
	case nil:
		b.WriteString("null")
	}
	return nil
}

func canonObject(dec *json.Decoder, b *bytes.Buffer, depth int) error {
	type member struct {
		name  string
		key   []uint16
		value []byte
	}
	var ms []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := tok.(string)
		if seen[name] {
			return fmt.Errorf("member %q named twice", name)
		}
		seen[name] = true
		var v bytes.Buffer
		if err := canonValue(dec, &v, depth+1); err != nil {
			return err
		}
		ms = append(ms, member{name: name, key: utf16.Encode([]rune(name)), value: v.Bytes()})
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	slices.SortFunc(ms, func(a, b member) int { return slices.Compare(a.key, b.key) })
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		canonString(b, m.name)
		b.WriteByte(':')
		b.Write(m.value)
	}
	b.WriteByte('}')
	return nil
}

// canonString writes s as RFC 8785 does (ECMAScript's JSON.stringify):
// the two-letter escapes where JSON has them, \u00xx for the other control
// characters, everything else as itself.
func canonString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

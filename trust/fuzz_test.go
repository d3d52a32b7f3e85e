package trust

import (
	"bytes"
	"testing"

	"nuon.dev/nuon/schemas"
)

// FuzzParse: no input makes Parse panic, and a root it accepts has a
// canonical form that is a fixed point and survives re-encoding.
func FuzzParse(f *testing.F) {
	small, err := signedRoot(f, content(f, 1, 1, "A"), "A").Encoded()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(small)
	withRules := content(f, 1, 1, "A")
	withRules.Roles.Builders = &schemas.TrustRole{Threshold: 1, Keys: []schemas.TrustKey{{Name: "ci", Key: authorized(testKey(f, "ci"))}}}
	withRules.Provenance = &schemas.TrustProvenance{
		Sources:  []schemas.TrustSource{{Component: "web-*", Repository: "git+https://x/web", Ref: "refs/tags/v*"}},
		Builders: []schemas.TrustBuilderRule{{Channels: []string{"stable"}, Builders: 1}},
	}
	rules, err := signedRoot(f, withRules, "A").Encoded()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(rules)
	f.Add([]byte(`{"signed":{},"signatures":[]}`))
	f.Add([]byte(`{"signed":{"version":1,"version":2},"signatures":[]}`))
	f.Add([]byte("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse("root.json", data)
		if err != nil {
			return
		}
		again, err := Canonical(r.Signed())
		if err != nil || !bytes.Equal(again, r.Signed()) {
			t.Fatalf("canonical form is not a fixed point: %v\n%s\n%s", err, r.Signed(), again)
		}
		b, err := r.Encoded()
		if err != nil {
			t.Fatal(err)
		}
		r2, err := Parse("root.json", b)
		if err != nil {
			t.Fatalf("re-encoded root does not parse: %v\n%s", err, b)
		}
		if !bytes.Equal(r2.Signed(), r.Signed()) || len(r2.Signatures) != len(r.Signatures) {
			t.Fatalf("re-encoding changed the root")
		}
	})
}

// FuzzVerify: a valid version 2 changed anywhere, in one byte or by
// inserting or deleting bytes, never verifies unless its signed content is
// still the same (whitespace, member order or escapes may change; the
// meaning signed may not).
func FuzzVerify(f *testing.F) {
	prev := signedRoot(f, content(f, 1, 2, "A", "B", "C"), "A", "B")
	next := signedRoot(f, content(f, 2, 2, "A", "B", "D"), "A", "B", "D")
	file, err := next.Encoded()
	if err != nil {
		f.Fatal(err)
	}
	if err := Verify(prev, next, t0); err != nil {
		f.Fatal(err)
	}
	f.Add(uint16(0), byte('x'), uint8(0))
	f.Add(uint16(40), byte('2'), uint8(1))
	f.Add(uint16(200), byte(' '), uint8(2))
	f.Add(uint16(1500), byte('A'), uint8(0))
	f.Add(uint16(3000), byte('"'), uint8(1))
	f.Fuzz(func(t *testing.T, pos uint16, b byte, op uint8) {
		data := bytes.Clone(file)
		i := int(pos) % len(data)
		switch op % 3 {
		case 0:
			data[i] = b
		case 1:
			data = append(data[:i], append([]byte{b}, data[i:]...)...)
		case 2:
			data = append(data[:i], data[i+1:]...)
		}
		r, err := Parse("2.json", data)
		if err != nil {
			return
		}
		if err := Verify(prev, r, t0); err == nil && !bytes.Equal(r.Signed(), next.Signed()) {
			t.Fatalf("a changed root verified:\n%s", data)
		}
	})
}

// FuzzCanonical: the canonical form of any JSON text Canonical accepts is
// a fixed point.
func FuzzCanonical(f *testing.F) {
	f.Add([]byte(`{"b":1,"a":[true,null,"\u00e9\n"]}`))
	f.Add([]byte(`{"\ud83d\ude00":1,"\uff5e":2}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Canonical(data)
		if err != nil {
			return
		}
		again, err := Canonical(c)
		if err != nil || !bytes.Equal(c, again) {
			t.Fatalf("not a fixed point: %v\n%s\n%s", err, c, again)
		}
	})
}

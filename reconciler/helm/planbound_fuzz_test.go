package helm

import (
	"bytes"
	"testing"

	"nuon.dev/nuon/reconciler"
)

// FuzzDecodeSavedRelease feeds arbitrary bytes as a saved helm plan:
// decodeSaved never panics, and what it accepts has values and hooks and
// keeps its meaning through the canonical form the hash is taken over.
func FuzzDecodeSavedRelease(f *testing.F) {
	f.Add([]byte(`{"component":"api","release":"api","namespace":"x","chart":"sha256:c","values":{"n":1,"f":1.5,"s":"x"},"manifest":"---\nkind: ConfigMap\n","hooks":[],"base":{"deployed":1,"last":2}}`))
	f.Add([]byte(`{"values":null,"hooks":null}`))
	f.Add([]byte(`{"values":{},"hooks":[{"path":"p","events":["pre-upgrade"],"weight":-5}],"extra":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := decodeSaved(data)
		if err != nil {
			return
		}
		if s.Values == nil || s.Hooks == nil {
			t.Fatal("accepted a saved plan without values or hooks")
		}
		a, err := reconciler.Canonical(s)
		if err != nil {
			return // values JSON cannot hold (NaN never decodes; kept for safety)
		}
		s2, err := decodeSaved(a)
		if err != nil {
			t.Fatalf("the canonical form of an accepted plan does not decode: %v\n%s", err, a)
		}
		b, err := reconciler.Canonical(s2)
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("the canonical form is not stable:\n%s\n%s", a, b)
		}
	})
}

package request_test

import (
	"bytes"
	"encoding/base64"
	"net/http/httptest"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/signature/request"
)

// FuzzParseInput parses fuzzed Signature-Input values: never a panic, and
// whatever it accepts serializes to a value that parses to the same input.
func FuzzParseInput(f *testing.F) {
	good := `nuon=("@method" "@path" "@query" "content-digest");created=1800000000;keyid="acme";nonce="q1XqCt6JS0Pw9m4b5C1jVQ";alg="ed25519";tag="nuon-request"`
	for _, seed := range []string{
		"",
		good,
		`nuon=("@method"   "@path");created=1;keyid="a";nonce="n";alg="x";tag="y"`,
		`nuon=();tag="y";  alg="x";nonce="n";keyid="a";created=1`,
		`nuon=("@method");created=1;created=2;keyid="a";nonce="n";alg="x";tag="y"`,
		`nuon=("@method");created=-1;keyid="a";nonce="n";alg="x";tag="y"`,
		`nuon=("@method");created=1;keyid="a\"b";nonce="n";alg="x";tag="y"`,
		`nuon=("@method");created=1;keyid="a";nonce="n";alg="x";tag="y";expires=2`,
		`sig1=("@method");created=1`,
		`nuon=("@method" "@path" "@query" "content-digest" "@authority");created=1;keyid="a";nonce="n";alg="x";tag="y"`,
		`nuon=("@me;thod");created=1;keyid="a";nonce="n";alg="x";tag="y"`,
		`nuon=(`,
		`nuon=("@method")x`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, h string) {
		in, err := request.ParseInput(h)
		if err != nil {
			return
		}
		again, err := request.ParseInput(request.Label + "=" + in.String())
		if err != nil {
			t.Fatalf("reparse of %q: %v", in.String(), err)
		}
		if again.String() != in.String() {
			t.Fatalf("round trip: %q != %q", again.String(), in.String())
		}
	})
}

// FuzzParseSignature parses fuzzed Signature values: never a panic, and
// whatever it accepts is 64 bytes that print back to the same value.
func FuzzParseSignature(f *testing.F) {
	f.Add(request.FormatSignature(make([]byte, 64)))
	f.Add("nuon=:" + base64.StdEncoding.EncodeToString(make([]byte, 63)) + ":")
	f.Add("nuon=:AAAA")
	f.Add("sig1=:AAAA:")
	f.Add("")
	f.Fuzz(func(t *testing.T, h string) {
		sig, err := request.ParseSignature(h)
		if err != nil {
			return
		}
		if len(sig) != 64 || request.FormatSignature(sig) != h {
			t.Fatalf("%q parsed to %d bytes that print as %q", h, len(sig), request.FormatSignature(sig))
		}
	})
}

// FuzzParseContentDigest parses fuzzed Content-Digest values: never a
// panic, and whatever it accepts prints back to the same value (one digest
// has one spelling).
func FuzzParseContentDigest(f *testing.F) {
	f.Add("sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:")
	f.Add("sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFV=:")
	f.Add("sha-512=:AAAA:, sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:")
	f.Add("sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU:")
	f.Add("")
	f.Fuzz(func(t *testing.T, h string) {
		sum, err := request.ParseContentDigest(h)
		if err != nil {
			return
		}
		if request.FormatContentDigest(sum) != h {
			t.Fatalf("%q prints back as %q", h, request.FormatContentDigest(sum))
		}
	})
}

// FuzzVerify verifies a signed request whose three signature headers are
// fuzzed: never a panic, and nothing verifies but the headers as signed,
// or another spelling of the same parameters (RFC 8941 allows more spaces;
// the signature base is their serialization, RFC 9421 §2.3).
func FuzzVerify(f *testing.F) {
	acme := signer(f, "acme")
	key := acme.PublicKey()
	// The nonce is fixed: every fuzzing process must make the same
	// signature as the one that wrote the seeds.
	good := httptest.NewRequest("GET", "/x", nil)
	s := &request.Signer{Install: "acme", Key: acme, Now: func() time.Time { return t0 }, Rand: bytes.NewReader(make([]byte, 16))}
	if err := s.Sign(good); err != nil {
		f.Fatal(err)
	}
	input, sig, digest := good.Header.Get("Signature-Input"), good.Header.Get("Signature"), good.Header.Get("Content-Digest")
	f.Add(input, sig, digest)
	f.Add(input, sig[:len(sig)-2]+"A:", digest)
	f.Add(input+`;expires=1`, sig, digest)
	f.Add(input, sig, "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:")
	f.Add("", "", "")
	f.Fuzz(func(t *testing.T, in, s, d string) {
		v := &request.Verifier{Key: func(string) (ssh.PublicKey, bool) { return key, true }, Now: func() time.Time { return t0 }}
		r := httptest.NewRequest("GET", "/x", nil)
		r.Header.Set("Signature-Input", in)
		r.Header.Set("Signature", s)
		r.Header.Set("Content-Digest", d)
		if _, err := v.Verify(r); err != nil {
			return
		}
		a, _ := request.ParseInput(in)
		b, _ := request.ParseInput(input)
		if a.String() != b.String() || s != sig || d != digest {
			t.Fatalf("changed headers verified:\n%s\n%s\n%s", in, s, d)
		}
	})
}

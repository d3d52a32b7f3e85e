package signature_test

import (
	"bytes"
	"errors"
	"testing"

	"nuon.dev/nuon/internal/signature"
)

func FuzzParseAllowedSigners(f *testing.F) {
	key := signer(f, "render").AuthorizedKey()
	for _, seed := range []string{
		"",
		"# comment\n\nnuon-render " + key + "\n",
		`"a b",c namespaces="git,file" ` + key + " comment\n",
		"nuon-render cert-authority " + key,
		"x\n" + key,
		`"unterminated ` + key,
		"a namespaces=\"\" " + key,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		as, err := signature.ParseAllowedSigners(data)
		if err != nil {
			if !bytes.HasPrefix([]byte(err.Error()), []byte(":")) {
				t.Fatalf("error %q does not start with :LINE:", err)
			}
			return
		}
		for _, s := range as.Signers {
			if s.Key == nil || s.Line < 1 || len(s.Principals) == 0 {
				t.Fatalf("signer %+v", s)
			}
		}
	})
}

// FuzzVerify verifies fuzzed messages and signature bytes. It never
// panics, fails only with the package's reasons, and accepts nothing but
// the message that was signed.
func FuzzVerify(f *testing.F) {
	render := signer(f, "render")
	as := trust(f, "nuon-render "+render.AuthorizedKey())
	msg := []byte("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n\nsigned\n")
	sig, err := render.Sign(bytes.NewReader(msg))
	if err != nil {
		f.Fatal(err)
	}
	byAcme, err := signer(f, "acme").Sign(bytes.NewReader(msg))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(msg, sig)
	f.Add(msg, byAcme)
	f.Add([]byte("other"), sig)
	f.Add(msg, bytes.Replace(sig, []byte("U1NIU0lH"), []byte("U1NIU0lI"), 1))
	f.Add(msg, []byte("-----BEGIN SSH SIGNATURE-----\n-----END SSH SIGNATURE-----\n"))
	f.Add(msg, []byte{})
	f.Fuzz(func(t *testing.T, m, armored []byte) {
		_, err := as.Verify(m, armored)
		if err == nil {
			if !bytes.Equal(m, msg) {
				t.Fatalf("accepted a signature over %q", m)
			}
			return
		}
		if !errors.Is(err, signature.ErrInvalid) && !errors.Is(err, signature.ErrUntrusted) {
			t.Fatalf("error %v is neither ErrInvalid nor ErrUntrusted", err)
		}
	})
}

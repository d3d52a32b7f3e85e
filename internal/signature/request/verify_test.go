package request_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/signature/request"
	"nuon.dev/nuon/internal/testenv"
)

// TestVerifyOpenSSH: a request signed by OpenSSH's own ssh-keygen -Y sign
// (namespace nuon-request, its default SHA-512) verifies, so the
// verifier speaks the sshsig format and not only this module's signer;
// the same signature under another namespace, or over another message,
// does not.
func TestVerifyOpenSSH(t *testing.T) {
	keygen, err := exec.LookPath("ssh-keygen")
	if err != nil {
		testenv.Missing(t, "ssh-keygen is not installed: run `make sshd`")
	}
	acme := signer(t, "acme")
	raw, err := os.ReadFile("../../../fixtures/keys/acme")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "acme")
	if err := os.WriteFile(keyFile, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_800_000_000, 0)
	v := &request.Verifier{Key: func(string) (ssh.PublicKey, bool) { return acme.PublicKey(), true }, Now: func() time.Time { return t0 }}
	sign := func(namespace string, msg []byte) []byte {
		cmd := exec.Command(keygen, "-Y", "sign", "-n", namespace, "-f", keyFile)
		cmd.Stdin = bytes.NewReader(msg)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("ssh-keygen -Y sign: %v", err)
		}
		sig, err := sshsig.Unarmor(out)
		if err != nil {
			t.Fatal(err)
		}
		return sig.Marshal()
	}
	req := func(sig []byte) *http.Request {
		r := httptest.NewRequest("POST", "/tenant.git/git-upload-pack", nil)
		r.Header.Set("Authorization", request.Auth{Install: "acme", Time: t0.Unix(), Sig: sig}.String())
		return r
	}
	msg := request.Message("POST", "/tenant.git/git-upload-pack", t0.Unix(), "acme")
	if id, err := v.Verify(req(sign(request.Namespace, msg))); err != nil || id != "acme" {
		t.Fatalf("OpenSSH's signature: %q, %v", id, err)
	}
	if _, err := v.Verify(req(sign("git", msg))); !errors.Is(err, request.ErrBadSignature) {
		t.Errorf("namespace git: %v, want %v", err, request.ErrBadSignature)
	}
	other := request.Message("GET", "/tenant.git/git-upload-pack", t0.Unix(), "acme")
	if _, err := v.Verify(req(sign(request.Namespace, other))); !errors.Is(err, request.ErrBadSignature) {
		t.Errorf("another message: %v, want %v", err, request.ErrBadSignature)
	}
}

// TestVerifyHashAlgorithms: SHA-256 and SHA-512 signatures verify (both
// are allowed by the sshsig format), anything else is refused, and a
// signature whose hash algorithm field was changed does not verify.
func TestVerifyHashAlgorithms(t *testing.T) {
	acme := signer(t, "acme")
	t0 := time.Unix(1_800_000_000, 0)
	v := &request.Verifier{Key: func(string) (ssh.PublicKey, bool) { return acme.PublicKey(), true }, Now: func() time.Time { return t0 }}
	msg := request.Message("GET", "/x", t0.Unix(), "acme")
	req := func(sig []byte) *http.Request {
		r := httptest.NewRequest("GET", "/x", nil)
		r.Header.Set("Authorization", request.Auth{Install: "acme", Time: t0.Unix(), Sig: sig}.String())
		return r
	}
	for _, h := range []sshsig.HashAlgorithm{sshsig.HashSHA256, sshsig.HashSHA512} {
		sig, err := sshsig.Sign(bytes.NewReader(msg), acme.SSH(), h, request.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(req(sig.Marshal())); err != nil {
			t.Errorf("%s: %v", h, err)
		}
		// The same signature claiming the other algorithm.
		swapped := *sig
		swapped.HashAlgorithm = sshsig.HashSHA512
		if h == sshsig.HashSHA512 {
			swapped.HashAlgorithm = sshsig.HashSHA256
		}
		if _, err := v.Verify(req(swapped.Marshal())); !errors.Is(err, request.ErrBadSignature) {
			t.Errorf("%s claiming %s: %v, want %v", h, swapped.HashAlgorithm, err, request.ErrBadSignature)
		}
		md5 := *sig
		md5.HashAlgorithm = "md5"
		if _, err := v.Verify(req(md5.Marshal())); err == nil {
			t.Errorf("%s claiming md5: verified", h)
		}
	}
	// A signature over the SHA-256 digest of the message but with the
	// digest taken as the message (no sshsig envelope) is refused.
	d := sha256.Sum256(msg)
	raw, err := acme.SSH().Sign(nil, d[:])
	if err != nil {
		t.Fatal(err)
	}
	sig, _ := sshsig.Sign(bytes.NewReader(msg), acme.SSH(), sshsig.HashSHA256, request.Namespace)
	sig.Signature = raw
	if _, err := v.Verify(req(sig.Marshal())); !errors.Is(err, request.ErrBadSignature) {
		t.Errorf("bare signature: %v, want %v", err, request.ErrBadSignature)
	}
}

// BenchmarkVerify is the server's cost of checking one signed request:
// header parsing, the key comparison and the signature.
func BenchmarkVerify(b *testing.B) {
	acme := signer(b, "acme")
	key := acme.PublicKey()
	v := &request.Verifier{Key: func(string) (ssh.PublicKey, bool) { return key, true }}
	r := httptest.NewRequest("POST", "/tenant.git/git-upload-pack", nil)
	if err := (&request.Signer{Install: "acme", Key: acme}).Sign(r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(r); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzVerify verifies requests with fuzzed signature bytes: never a panic,
// and nothing but an unchanged signature of the request verifies.
func FuzzVerify(f *testing.F) {
	acme := signer(f, "acme")
	t0 := time.Unix(1_800_000_000, 0)
	v := &request.Verifier{Key: func(string) (ssh.PublicKey, bool) { return acme.PublicKey(), true }, Now: func() time.Time { return t0 }}
	msg := request.Message("GET", "/x", t0.Unix(), "acme")
	good, err := sshsig.Sign(bytes.NewReader(msg), acme.SSH(), sshsig.HashSHA512, request.Namespace)
	if err != nil {
		f.Fatal(err)
	}
	valid := good.Marshal()
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add([]byte("SSHSIG"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, sig []byte) {
		r := httptest.NewRequest("GET", "/x", nil)
		r.Header.Set("Authorization", request.Auth{Install: "acme", Time: t0.Unix(), Sig: sig}.String())
		if _, err := v.Verify(r); err == nil {
			parsed, err := sshsig.ParseSignature(sig)
			if err != nil || !bytes.Equal(parsed.Signature.Blob, good.Signature.Blob) {
				t.Fatalf("a changed signature verified: %x", sig)
			}
		}
	})
}

package request_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
)

var t0 = time.Unix(1_800_000_000, 0)

// verifier checks acme's and globex's keys at t0, a minute of skew.
func verifier(t testing.TB) *request.Verifier {
	acme, globex := signer(t, "acme"), signer(t, "globex")
	keys := map[string]ssh.PublicKey{"acme": acme.PublicKey(), "globex": globex.PublicKey(), "render": signer(t, "render").PublicKey()}
	return &request.Verifier{
		Key:     func(id string) (ssh.PublicKey, bool) { k, ok := keys[id]; return k, ok },
		MaxSkew: time.Minute,
		Now:     func() time.Time { return t0 },
	}
}

// signed is a request signed by install with key at time at.
func signed(t testing.TB, install string, key *signature.Signer, at time.Time, method, target, body string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, target, rd)
	s := &request.Signer{Install: install, Key: key, Now: func() time.Time { return at }}
	if err := s.Sign(r); err != nil {
		t.Fatal(err)
	}
	return r
}

// verifyRead verifies r and reads its body to the end, as a handler must.
func verifyRead(v *request.Verifier, r *http.Request) (string, error) {
	id, err := v.Verify(r)
	if err != nil {
		return id, err
	}
	if _, err := io.ReadAll(r.Body); err != nil {
		return id, err
	}
	return id, nil
}

func TestRequestSignature(t *testing.T) {
	acme, globex := signer(t, "acme"), signer(t, "globex")
	sign := func(install string, key *signature.Signer, at time.Time, method, target string) *http.Request {
		return signed(t, install, key, at, method, target, "")
	}
	set := func(r *http.Request, name, from, to string) *http.Request {
		r.Header.Set(name, strings.Replace(r.Header.Get(name), from, to, 1))
		return r
	}
	for _, tc := range []struct {
		name    string
		req     func() *http.Request
		install string
		err     error
	}{
		{"good", func() *http.Request { return sign("acme", acme, t0, "GET", "/git/info/refs?service=git-upload-pack") }, "acme", nil},
		{"good with a body", func() *http.Request {
			return signed(t, "acme", acme, t0, "POST", "/git/git-upload-pack", "0014command=ls-refs\n0000")
		}, "acme", nil},
		{"skew within bounds", func() *http.Request {
			return sign("acme", acme, t0.Add(-50*time.Second), "POST", "/git/git-upload-pack")
		}, "acme", nil},
		{"expired", func() *http.Request {
			return sign("acme", acme, t0.Add(-2*time.Minute), "POST", "/git/git-upload-pack")
		}, "", request.ErrExpired},
		{"from the future", func() *http.Request { return sign("acme", acme, t0.Add(2*time.Minute), "POST", "/git/git-upload-pack") }, "", request.ErrExpired},
		{"missing", func() *http.Request { return httptest.NewRequest("GET", "/x", nil) }, "", request.ErrNoAuth},
		{"basic auth", func() *http.Request {
			r := httptest.NewRequest("GET", "/x", nil)
			r.SetBasicAuth("acme", "pw")
			return r
		}, "", request.ErrNoAuth},
		{"first format", func() *http.Request { return v1(t, acme, "GET", "/x") }, "", request.ErrMalformed},
		{"another install's key", func() *http.Request { return sign("acme", globex, t0, "GET", "/x") }, "", request.ErrBadSignature},
		{"unknown install", func() *http.Request { return sign("initech", acme, t0, "GET", "/x") }, "", request.ErrUnknownInstall},
		{"other query", func() *http.Request {
			r := sign("acme", acme, t0, "GET", "/git/info/refs?service=git-upload-pack")
			r.URL.RawQuery = "service=git-receive-pack"
			return r
		}, "", request.ErrBadSignature},
		{"other path", func() *http.Request {
			r := sign("acme", acme, t0, "GET", "/a/info/refs")
			r.URL.Path = "/b/info/refs"
			return r
		}, "", request.ErrBadSignature},
		{"other method", func() *http.Request {
			r := sign("acme", acme, t0, "GET", "/x")
			r.Method = "POST"
			return r
		}, "", request.ErrBadSignature},
		{"install renamed", func() *http.Request {
			return set(sign("acme", acme, t0, "GET", "/x"), "Signature-Input", `keyid="acme"`, `keyid="globex"`)
		}, "", request.ErrBadSignature},
		{"time changed", func() *http.Request {
			return set(sign("acme", acme, t0, "GET", "/x"), "Signature-Input", `created=1800000000`, `created=1800000001`)
		}, "", request.ErrBadSignature},
		{"nonce changed", func() *http.Request {
			r := sign("acme", acme, t0, "GET", "/x")
			in, _ := request.ParseInput(r.Header.Get("Signature-Input"))
			return set(r, "Signature-Input", in.Nonce, strings.Repeat("A", len(in.Nonce)))
		}, "", request.ErrBadSignature},
		{"no nonce", func() *http.Request {
			r := sign("acme", acme, t0, "GET", "/x")
			in, _ := request.ParseInput(r.Header.Get("Signature-Input"))
			return set(r, "Signature-Input", `;nonce="`+in.Nonce+`"`, "")
		}, "", request.ErrMalformed},
		{"another tag", func() *http.Request {
			return set(sign("acme", acme, t0, "GET", "/x"), "Signature-Input", `tag="nuon-request"`, `tag="other"`)
		}, "", request.ErrMalformed},
		{"digest not covered", func() *http.Request {
			return set(sign("acme", acme, t0, "GET", "/x"), "Signature-Input", ` "content-digest"`, ``)
		}, "", request.ErrMalformed},
		{"digest stripped", func() *http.Request {
			r := sign("acme", acme, t0, "GET", "/x")
			r.Header.Del("Content-Digest")
			return r
		}, "", request.ErrMalformed},
		{"digest altered", func() *http.Request {
			r := sign("acme", acme, t0, "GET", "/x")
			r.Header.Set("Content-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(make([]byte, 32))+":")
			return r
		}, "", request.ErrBadSignature},
		{"two digests", func() *http.Request {
			r := sign("acme", acme, t0, "GET", "/x")
			r.Header.Add("Content-Digest", r.Header.Get("Content-Digest"))
			return r
		}, "", request.ErrMalformed},
		{"signature truncated", func() *http.Request {
			return set(sign("acme", acme, t0, "GET", "/x"), "Signature", "=:", "=:AAAA")
		}, "", request.ErrMalformed},
		{"garbage", func() *http.Request {
			r := httptest.NewRequest("GET", "/x", nil)
			r.Header.Set("Signature-Input", `nuon=acme`)
			r.Header.Set("Signature", `nuon=:AAAA:`)
			return r
		}, "", request.ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := verifyRead(verifier(t), tc.req())
			if !errors.Is(err, tc.err) {
				t.Fatalf("Verify: %v, want %v", err, tc.err)
			}
			if err == nil && id != tc.install {
				t.Fatalf("install %q, want %q", id, tc.install)
			}
		})
	}
}

// TestRequestAttacks replays a request captured on its way, as someone
// who can read it (a log, a proxy) but not sign would: each way of
// reusing it is refused, and a legitimate agent that sends the same
// request twice in a second is not.
func TestRequestAttacks(t *testing.T) {
	acme := signer(t, "acme")
	const body = "0032want 0123456789012345678901234567890123456789\n0000"
	capture := func() *http.Request {
		return signed(t, "acme", acme, t0, "POST", "/tenant.git/git-receive-pack", body)
	}
	// again is a copy of r's method, target and headers with body.
	again := func(r *http.Request, body string) *http.Request {
		c := httptest.NewRequest(r.Method, r.URL.String(), strings.NewReader(body))
		c.Header = r.Header.Clone()
		return c
	}
	for _, tc := range []struct {
		name   string
		attack func(v *request.Verifier) error
		err    error
	}{
		{"replayed unchanged", func(v *request.Verifier) error {
			r := capture()
			if _, err := verifyRead(v, again(r, body)); err != nil {
				t.Fatalf("the original: %v", err)
			}
			_, err := verifyRead(v, again(r, body))
			return err
		}, request.ErrReplay},
		{"replayed with another body", func(v *request.Verifier) error {
			r := capture()
			if _, err := verifyRead(v, again(r, body)); err != nil {
				t.Fatalf("the original: %v", err)
			}
			_, err := verifyRead(v, again(r, "0000"))
			return err
		}, request.ErrReplay},
		{"body swapped before it arrived", func(v *request.Verifier) error {
			_, err := verifyRead(v, again(capture(), strings.Replace(body, "0123", "3210", 1)))
			return err
		}, request.ErrDigest},
		{"body cut short", func(v *request.Verifier) error {
			_, err := verifyRead(v, again(capture(), body[:len(body)-4]))
			return err
		}, request.ErrDigest},
		{"body swapped and its digest too", func(v *request.Verifier) error {
			r := again(capture(), "0000")
			r.Header.Set("Content-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(sha("0000"))+":")
			_, err := verifyRead(v, r)
			return err
		}, request.ErrBadSignature},
		{"digest stripped", func(v *request.Verifier) error {
			r := capture()
			r.Header.Del("Content-Digest")
			_, err := verifyRead(v, r)
			return err
		}, request.ErrMalformed},
		{"replayed after the skew window", func(v *request.Verifier) error {
			r := capture()
			v.Now = func() time.Time { return t0.Add(61 * time.Second) }
			_, err := verifyRead(v, again(r, body))
			return err
		}, request.ErrExpired},
		{"the same request twice in a second", func(v *request.Verifier) error {
			for range 2 {
				if _, err := verifyRead(v, capture()); err != nil {
					return err
				}
			}
			return nil
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.attack(verifier(t)); !errors.Is(err, tc.err) {
				t.Fatalf("%v, want %v", err, tc.err)
			}
		})
	}
}

// TestSignatureBase signs the signature base as the package doc spells
// it, with crypto/ed25519 and the raw key, not with this package: the
// verifier accepts it, so the wire format is the documented one.
func TestSignatureBase(t *testing.T) {
	raw, err := os.ReadFile("../../../fixtures/keys/acme")
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.ParseRawPrivateKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	var priv ed25519.PrivateKey
	switch k := k.(type) {
	case *ed25519.PrivateKey:
		priv = *k
	case ed25519.PrivateKey:
		priv = k
	default:
		t.Fatalf("acme's key is %T", k)
	}
	const (
		digest = "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:"
		params = `("@method" "@path" "@query" "content-digest");created=1800000000;keyid="acme";nonce="q1XqCt6JS0Pw9m4b5C1jVQ";alg="ed25519";tag="nuon-request"`
		base   = "\"@method\": GET\n" +
			"\"@path\": /tenant.git/info/refs\n" +
			"\"@query\": ?service=git-upload-pack\n" +
			"\"content-digest\": " + digest + "\n" +
			"\"@signature-params\": " + params
	)
	sig := ed25519.Sign(priv, []byte(base))
	r := httptest.NewRequest("GET", "/tenant.git/info/refs?service=git-upload-pack", nil)
	r.Header.Set("Content-Digest", digest)
	r.Header.Set("Signature-Input", "nuon="+params)
	r.Header.Set("Signature", "nuon=:"+base64.StdEncoding.EncodeToString(sig)+":")
	if id, err := verifyRead(verifier(t), r); err != nil || id != "acme" {
		t.Fatalf("Verify: %q, %v", id, err)
	}
	// The parameters in another order are another signature base.
	r.Header.Set("Signature-Input", "nuon="+strings.Replace(params, `;alg="ed25519";tag="nuon-request"`, `;tag="nuon-request";alg="ed25519"`, 1))
	if _, err := verifyRead(verifier(t), r); !errors.Is(err, request.ErrBadSignature) {
		t.Fatalf("parameters reordered: %v, want %v", err, request.ErrBadSignature)
	}
}

// TestSignerBodies: bodies with and without GetBody, and none, are
// digested and still sent whole.
func TestSignerBodies(t *testing.T) {
	acme := signer(t, "acme")
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := verifier(t)
		v.Now = nil
		id, err := verifyRead(v, r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		got = append(got, id)
	}))
	defer srv.Close()
	c := &http.Client{Transport: (&request.Signer{Install: "acme", Key: acme}).Transport(nil)}
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	for _, tc := range []struct {
		name string
		req  func() *http.Request
	}{
		{"no body", func() *http.Request {
			r, _ := http.NewRequest("GET", srv.URL+"/x?service=git-upload-pack", nil)
			return r
		}},
		{"bytes", func() *http.Request {
			r, _ := http.NewRequest("POST", srv.URL+"/x", bytes.NewReader([]byte(big)))
			return r
		}},
		{"a stream without GetBody", func() *http.Request {
			r, _ := http.NewRequest("POST", srv.URL+"/x", io.MultiReader(strings.NewReader(big)))
			return r
		}},
		{"an empty stream", func() *http.Request {
			r, _ := http.NewRequest("POST", srv.URL+"/x", io.MultiReader())
			return r
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got = nil
			resp, err := c.Do(tc.req())
			if err != nil {
				t.Fatal(err)
			}
			msg, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || len(got) != 1 || got[0] != "acme" {
				t.Fatalf("status %d %s, installs %q", resp.StatusCode, msg, got)
			}
		})
	}
	// Through go-git's and gitproto's hook, SetAuth, on a request made
	// with http.NewRequest: the same.
	r, _ := http.NewRequest("POST", srv.URL+"/x", strings.NewReader(big))
	(&request.Signer{Install: "acme", Key: acme}).SetAuth(r)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("SetAuth: status %d", resp.StatusCode)
	}
}

// TestSignerBodyTooLarge: a body without GetBody longer than the bound is
// not read whole into memory; the request is not sent.
func TestSignerBodyTooLarge(t *testing.T) {
	r, _ := http.NewRequest("POST", "http://server.invalid/x", io.LimitReader(zeros{}, request.MaxBufferedBody+1))
	if err := (&request.Signer{Install: "acme", Key: signer(t, "acme")}).Sign(r); err == nil {
		t.Fatal("signed a body over the bound")
	}
}

func sha(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestSignerNonce: two signatures of one request in one second differ.
func TestSignerNonce(t *testing.T) {
	acme := signer(t, "acme")
	a := signed(t, "acme", acme, t0, "GET", "/x", "")
	b := signed(t, "acme", acme, t0, "GET", "/x", "")
	if a.Header.Get("Signature") == b.Header.Get("Signature") || a.Header.Get("Signature-Input") == b.Header.Get("Signature-Input") {
		t.Fatal("two signatures in one second are the same")
	}
}

// v1 is a request signed in the first format (Authorization: Nuon-SSHSIG,
// no digest), made by hand: the format is gone from the package.
func v1(t testing.TB, key *signature.Signer, method, target string) *http.Request {
	msg := "nuon-request v1\n" + method + "\n" + target + "\n1800000000\nacme\n"
	sig, err := key.SSH().Sign(nil, []byte(msg))
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(method, target, nil)
	r.Header.Set("Authorization", `Nuon-SSHSIG install="acme", time="1800000000", sig="`+base64.StdEncoding.EncodeToString(ssh.Marshal(sig))+`"`)
	return r
}

func signer(tb testing.TB, name string) *signature.Signer {
	tb.Helper()
	s, err := signature.LoadSigner(filepath.Join("../../../fixtures/keys", name))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

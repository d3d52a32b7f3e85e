package request_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/internal/signature/request"
)

func TestRequestSignature(t *testing.T) {
	acme, globex := signer(t, "acme"), signer(t, "globex")
	t0 := time.Unix(1_800_000_000, 0)
	keys := map[string]ssh.PublicKey{"acme": acme.PublicKey(), "globex": globex.PublicKey()}
	v := &request.Verifier{
		Key:     func(id string) (ssh.PublicKey, bool) { k, ok := keys[id]; return k, ok },
		MaxSkew: time.Minute,
		Now:     func() time.Time { return t0 },
	}
	sign := func(install string, key *signature.Signer, at time.Time, method, target string) *http.Request {
		r := httptest.NewRequest(method, target, nil)
		s := &request.Signer{Install: install, Key: key, Now: func() time.Time { return at }}
		if err := s.Sign(r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, tc := range []struct {
		name    string
		req     func() *http.Request
		install string
		err     error
	}{
		{"good", func() *http.Request { return sign("acme", acme, t0, "GET", "/git/info/refs?service=git-upload-pack") }, "acme", nil},
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
		{"another install's key", func() *http.Request { return sign("acme", globex, t0, "GET", "/x") }, "", request.ErrBadSignature},
		{"unknown install", func() *http.Request { return sign("initech", acme, t0, "GET", "/x") }, "", request.ErrUnknownInstall},
		{"other path", func() *http.Request {
			r := sign("acme", acme, t0, "GET", "/git/info/refs?service=git-upload-pack")
			r.URL.RawQuery = "service=git-receive-pack"
			return r
		}, "", request.ErrBadSignature},
		{"other method", func() *http.Request {
			r := sign("acme", acme, t0, "GET", "/x")
			r.Method = "POST"
			return r
		}, "", request.ErrBadSignature},
		{"install renamed", func() *http.Request {
			r := sign("acme", acme, t0, "GET", "/x")
			r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), `install="acme"`, `install="globex"`, 1))
			return r
		}, "", request.ErrBadSignature},
		{"garbage", func() *http.Request {
			r := httptest.NewRequest("GET", "/x", nil)
			r.Header.Set("Authorization", request.Scheme+` install=acme`)
			return r
		}, "", request.ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := v.Verify(tc.req())
			if !errors.Is(err, tc.err) {
				t.Fatalf("Verify: %v, want %v", err, tc.err)
			}
			if err == nil && id != tc.install {
				t.Fatalf("install %q, want %q", id, tc.install)
			}
		})
	}
}

func TestRequestSignerTransport(t *testing.T) {
	acme := signer(t, "acme")
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := &request.Verifier{Key: func(string) (ssh.PublicKey, bool) { return acme.PublicKey(), true }}
		id, err := v.Verify(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		got = id
	}))
	defer srv.Close()
	c := &http.Client{Transport: (&request.Signer{Install: "acme", Key: acme}).Transport(nil)}
	resp, err := c.Get(srv.URL + "/git/info/refs?service=git-upload-pack")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || got != "acme" {
		t.Fatalf("status %d, install %q", resp.StatusCode, got)
	}
}

// FuzzParseRequestAuth parses fuzzed Authorization headers: it never
// panics, and whatever it accepts prints back to an equal header.
func FuzzParseRequestAuth(f *testing.F) {
	for _, seed := range []string{
		"",
		request.Auth{Install: "acme", Time: 1800000000, Sig: []byte("sig")}.String(),
		`Nuon-SSHSIG install="acme", time="1", sig="c2ln"`,
		`Nuon-SSHSIG sig="c2ln", time="1", install="a-b"`,
		`Nuon-SSHSIG install="acme", install="acme", time="1", sig="c2ln"`,
		`Nuon-SSHSIG install="ACME", time="-1", sig="!!"`,
		`Basic YWNtZTpwdw==`,
		`Nuon-SSHSIG`,
		`Nuon-SSHSIG install="a\"b", time="1", sig="c2ln"`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, h string) {
		a, err := request.ParseAuth(h)
		if err != nil {
			return
		}
		b, err := request.ParseAuth(a.String())
		if err != nil {
			t.Fatalf("reparse of %q: %v", a.String(), err)
		}
		if b.Install != a.Install || b.Time != a.Time || string(b.Sig) != string(a.Sig) {
			t.Fatalf("round trip: %+v != %+v", a, b)
		}
	})
}

func signer(tb testing.TB, name string) *signature.Signer {
	tb.Helper()
	s, err := signature.LoadSigner(filepath.Join("../../../fixtures/keys", name))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

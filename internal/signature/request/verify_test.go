package request_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/signature/request"
)

// TestVerifyMemory: a verifier that has seen many more distinct signed
// requests than its bounds remembers no more than its bounds, in total and
// per install, and still refuses the latest of them again. (The cache
// alone takes 100,000 in TestReplayCacheBounds.)
func TestVerifyMemory(t *testing.T) {
	acme := signer(t, "acme")
	key := acme.PublicKey()
	now := time.Unix(1_800_000_000, 0)
	v := &request.Verifier{
		Key:               func(string) (ssh.PublicKey, bool) { return key, true },
		Now:               func() time.Time { return now },
		MaxSeen:           200,
		MaxSeenPerInstall: 10,
	}
	s := &request.Signer{Install: "acme", Key: acme, Now: func() time.Time { return now }}
	var last *http.Request
	for i := range 2000 {
		s.Install = fmt.Sprintf("i%d", i%50)
		r := httptest.NewRequest("GET", "/x", nil)
		if err := s.Sign(r); err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(r); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		last = r
	}
	entries, installs := request.Seen(v)
	if entries != 200 || installs != 50 {
		t.Fatalf("remembers %d signatures of %d installs, want 200 of 50 (bound 200, 10 per install)", entries, installs)
	}
	r := httptest.NewRequest("GET", "/x", nil)
	r.Header = last.Header
	if _, err := v.Verify(r); err == nil {
		t.Fatal("the latest signature verified twice")
	}
}

// BenchmarkVerify is the server's cost of checking one signed request:
// header parsing, the key lookup, the signature, the replay cache and the
// digest of a poll's body as it is read. Each request is signed anew
// (outside the timer), as agents do.
func BenchmarkVerify(b *testing.B) {
	acme := signer(b, "acme")
	key := acme.PublicKey()
	v := &request.Verifier{Key: func(string) (ssh.PublicKey, bool) { return key, true }}
	s := &request.Signer{Install: "acme", Key: acme}
	body := "0014command=ls-refs\n0014agent=git/nuon\n0001002brefs/heads/nuon/installs/acme\n0000"
	const batch = 1024
	var reqs []*http.Request
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		if i == len(reqs) {
			b.StopTimer()
			reqs = reqs[:0]
			for range batch {
				r := httptest.NewRequest("POST", "/tenant.git/git-upload-pack", strings.NewReader(body))
				if err := s.Sign(r); err != nil {
					b.Fatal(err)
				}
				r.Body = io.NopCloser(strings.NewReader(body))
				reqs = append(reqs, r)
			}
			i = 0
			b.StartTimer()
		}
		r := reqs[i]
		i++
		if _, err := v.Verify(r); err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			b.Fatal(err)
		}
	}
}

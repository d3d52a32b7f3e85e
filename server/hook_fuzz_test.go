package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzCheckHook: a webhook is accepted only with the signature of its own
// body under the secret, or the secret itself as GitLab's token; whatever
// the headers hold, never a panic.
func FuzzCheckHook(f *testing.F) {
	const secret = "a webhook secret for the fuzzer"
	body := `{"ref":"refs/heads/main"}`
	for _, seed := range [][3]string{
		{body, SignHook(secret, []byte(body)), ""},
		{body, "", secret},
		{body, "sha256=", ""},
		{body, "sha256=zz", "x"},
		{"", SignHook(secret, nil), ""},
		{body, strings.ToUpper(SignHook(secret, []byte(body))), ""},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	s := &Server{cfg: Config{HookSecret: secret}}
	f.Fuzz(func(t *testing.T, body, sig, token string) {
		r := httptest.NewRequest(http.MethodPost, "/hooks/main", strings.NewReader(body))
		if sig != "" {
			r.Header.Set(hookSignatureHeader, sig)
		}
		if token != "" {
			r.Header.Set(hookTokenHeader, token)
		}
		err := s.checkHook(httptest.NewRecorder(), r)
		// Header values are trimmed by net/http as it would receive them.
		sig, token = r.Header.Get(hookSignatureHeader), r.Header.Get(hookTokenHeader)
		want := token == secret || token == "" && strings.HasPrefix(sig, "sha256=") &&
			strings.EqualFold(sig[len("sha256="):], SignHook(secret, []byte(body))[len("sha256="):])
		if (err == nil) != want {
			t.Fatalf("body %q, signature %q, token %q: accepted %v, want %v", body, sig, token, err == nil, want)
		}
	})
}

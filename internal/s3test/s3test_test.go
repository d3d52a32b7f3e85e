package s3test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/google/go-cmp/cmp"
)

var testCreds = aws.Credentials{AccessKeyID: "ASIATEST", SecretAccessKey: "the-secret", SessionToken: "the-token"}

func testKeys(key string) (string, string, bool) {
	if key != testCreds.AccessKeyID {
		return "", "", false
	}
	return testCreds.SecretAccessKey, testCreds.SessionToken, true
}

// signed is a request to the server signed as the SDK signs S3 requests.
func signed(t testing.TB, s *Server, creds aws.Credentials, method, path string, body []byte, header map[string]string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	sum := sha256.Sum256(body)
	payload := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", payload)
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	if err := signer.SignHTTP(context.Background(), creds, req, payload, "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	return req
}

func do(t testing.TB, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// errCode is the Code of an S3 error body.
func errCode(body string) string {
	var e errorXML
	_ = xml.Unmarshal([]byte(body), &e)
	return e.Code
}

func TestObjects(t *testing.T) {
	s := New(t, testKeys, "state")
	lock := map[string]string{"If-None-Match": "*"}
	steps := []struct {
		name       string
		req        *http.Request
		wantStatus int
		wantCode   string
		wantBody   string
	}{
		{"head bucket", signed(t, s, testCreds, http.MethodHead, "/state", nil, nil), 200, "", ""},
		{"no such bucket", signed(t, s, testCreds, http.MethodGet, "/other/k", nil, nil), 404, "NoSuchBucket", ""},
		{"no such key", signed(t, s, testCreds, http.MethodGet, "/state/a/k", nil, nil), 404, "NoSuchKey", ""},
		{"put", signed(t, s, testCreds, http.MethodPut, "/state/a/k", []byte("v1"), nil), 200, "", ""},
		{"get", signed(t, s, testCreds, http.MethodGet, "/state/a/k?x-id=GetObject", nil, nil), 200, "", "v1"},
		{"lock", signed(t, s, testCreds, http.MethodPut, "/state/a/k.tflock", []byte("l1"), lock), 200, "", ""},
		{"lock held", signed(t, s, testCreds, http.MethodPut, "/state/a/k.tflock", []byte("l2"), lock), 412, "PreconditionFailed", ""},
		{"lock kept", signed(t, s, testCreds, http.MethodGet, "/state/a/k.tflock", nil, nil), 200, "", "l1"},
		{"unlock", signed(t, s, testCreds, http.MethodDelete, "/state/a/k.tflock", nil, nil), 204, "", ""},
		{"lock again", signed(t, s, testCreds, http.MethodPut, "/state/a/k.tflock", []byte("l3"), lock), 200, "", ""},
		{"not implemented", signed(t, s, testCreds, http.MethodGet, "/state/a/k?acl", nil, nil), 501, "NotImplemented", ""},
	}
	for _, st := range steps {
		status, body := do(t, st.req)
		if status != st.wantStatus || errCode(body) != st.wantCode || st.wantBody != "" && body != st.wantBody {
			t.Errorf("%s: %d %s, want %d %s %s", st.name, status, body, st.wantStatus, st.wantCode, st.wantBody)
		}
	}
	status, body := do(t, signed(t, s, testCreds, http.MethodGet, "/state?list-type=2&prefix=a%2F&delimiter=%2F", nil, nil))
	var got listResult
	if err := xml.Unmarshal([]byte(body), &got); status != 200 || err != nil {
		t.Fatalf("list: %d %v %s", status, err, body)
	}
	var keys []string
	for _, c := range got.Contents {
		keys = append(keys, c.Key)
	}
	if d := cmp.Diff([]string{"a/k", "a/k.tflock"}, keys); d != "" || got.KeyCount != 2 {
		t.Errorf("list keys (-want +got):\n%s", d)
	}
}

// TestRefused sends requests signed wrongly: each is refused with S3's
// code and stores nothing.
func TestRefused(t *testing.T) {
	s := New(t, testKeys, "state")
	other := testCreds
	other.SecretAccessKey = "another-secret"
	noToken := testCreds
	noToken.SessionToken = ""
	unknown := testCreds
	unknown.AccessKeyID = "ASIAUNKNOWN"
	altered := signed(t, s, testCreds, http.MethodPut, "/state/k", []byte("v1"), nil)
	altered.Body = io.NopCloser(strings.NewReader("v2"))
	retargeted := signed(t, s, testCreds, http.MethodPut, "/state/k", []byte("v1"), nil)
	retargeted.URL.Path = "/state/other"
	unsigned, _ := http.NewRequest(http.MethodPut, s.URL+"/state/k", strings.NewReader("v1"))
	for _, tt := range []struct {
		name string
		req  *http.Request
		want string
	}{
		{"another secret", signed(t, s, other, http.MethodPut, "/state/k", []byte("v1"), nil), "SignatureDoesNotMatch"},
		{"no session token", signed(t, s, noToken, http.MethodPut, "/state/k", []byte("v1"), nil), "InvalidToken"},
		{"unknown key", signed(t, s, unknown, http.MethodPut, "/state/k", []byte("v1"), nil), "InvalidAccessKeyId"},
		{"altered body", altered, "XAmzContentSHA256Mismatch"},
		{"another key", retargeted, "SignatureDoesNotMatch"},
		{"unsigned", unsigned, "AccessDenied"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, body := do(t, tt.req)
			if status != http.StatusForbidden || errCode(body) != tt.want {
				t.Errorf("%d %s, want 403 %s", status, body, tt.want)
			}
		})
	}
	if keys := s.Keys("state"); len(keys) != 0 {
		t.Errorf("stored %v", keys)
	}
}

// FuzzAuthenticate feeds the signature check mutations of a valid
// request's Authorization header and path: it never panics, and what it
// accepts carries the valid signature over the same path.
func FuzzAuthenticate(f *testing.F) {
	s := New(f, testKeys, "state")
	valid := signed(f, s, testCreds, http.MethodGet, "/state/k", nil, nil)
	auth := valid.Header.Get("Authorization")
	sig := auth[strings.LastIndex(auth, "Signature="):]
	f.Add(auth, "/state/k")
	f.Add("AWS4-HMAC-SHA256 Credential=ASIATEST/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature="+strings.Repeat("0", 64), "/state/k")
	f.Fuzz(func(t *testing.T, authorization, path string) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Host = valid.Host
		req.URL.Path = path
		req.Header = valid.Header.Clone()
		req.Header.Set("Authorization", authorization)
		w := httptest.NewRecorder()
		s.serve(w, req)
		if w.Code != http.StatusForbidden && (!strings.HasSuffix(authorization, sig) || path != "/state/k") {
			t.Fatalf("accepted %q on %q: %d", authorization, path, w.Code)
		}
	})
}

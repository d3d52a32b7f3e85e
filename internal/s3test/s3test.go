package s3test

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"nuon.dev/nuon/internal/awstest"
)

// Namespace is the XML namespace of S3 answers.
const Namespace = "http://s3.amazonaws.com/doc/2006-03-01/"

// maxBody bounds an object's size.
const maxBody = 16 << 20

// Keys looks up the secret and session token of an access key; ok is false
// for a key the server does not know. internal/ststest's Server.Secret is
// one, for the credentials it issued.
type Keys func(accessKeyID string) (secret, sessionToken string, ok bool)

// Object is one stored object.
type Object struct {
	Body     []byte
	ETag     string
	Modified time.Time
	// SSE is the server-side encryption the PutObject asked for
	// (x-amz-server-side-encryption), "" for none.
	SSE string
}

// Call is one request the server answered.
type Call struct {
	// Op is the operation: HeadBucket, ListObjectsV2, GetObject,
	// HeadObject, PutObject, DeleteObject, or the method and path of one
	// the server does not know.
	Op          string
	Bucket, Key string
	// AccessKey signed the request ("" when unsigned).
	AccessKey string
	// IfNoneMatch is a PutObject's If-None-Match header.
	IfNoneMatch string
	// Code is the error code answered, "" on success.
	Code string
}

// Server is the stand-in.
type Server struct {
	// URL is the endpoint (plain HTTP on loopback), for path-style
	// requests.
	URL string

	keys Keys

	mu      sync.Mutex
	buckets map[string]map[string]Object
	calls   []Call
}

// New serves the stand-in with the buckets named until the test ends;
// requests must be signed by credentials keys knows.
func New(t testing.TB, keys Keys, buckets ...string) *Server {
	t.Helper()
	s := &Server{keys: keys, buckets: map[string]map[string]Object{}}
	for _, b := range buckets {
		s.buckets[b] = map[string]Object{}
	}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// Object returns the object bucket/key, if it exists.
func (s *Server) Object(bucket, key string) (Object, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.buckets[bucket][key]
	return o, ok
}

// Keys returns the keys of bucket's objects, sorted.
func (s *Server) Keys(bucket string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.buckets[bucket] {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Calls returns the calls answered so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	call := Call{Bucket: bucket, Key: key, Op: op(r, bucket, key), IfNoneMatch: r.Header.Get("If-None-Match")}
	call.Code = s.answer(w, r, &call)
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.mu.Unlock()
}

// op names the operation of a path-style request.
func op(r *http.Request, bucket, key string) string {
	q := r.URL.Query()
	switch {
	case bucket == "":
	case key == "" && r.Method == http.MethodHead:
		return "HeadBucket"
	case key == "" && r.Method == http.MethodGet && q.Get("list-type") == "2":
		return "ListObjectsV2"
	case key == "" || len(q) > 0 && !onlyIgnoredQuery(q):
	case r.Method == http.MethodGet:
		return "GetObject"
	case r.Method == http.MethodHead:
		return "HeadObject"
	case r.Method == http.MethodPut:
		return "PutObject"
	case r.Method == http.MethodDelete:
		return "DeleteObject"
	}
	return r.Method + " " + r.URL.Path + "?" + r.URL.RawQuery
}

// onlyIgnoredQuery tells whether an object request's query holds only
// parameters that do not change the operation (the SDK's x-id).
func onlyIgnoredQuery(q map[string][]string) bool {
	for k := range q {
		if k != "x-id" {
			return false
		}
	}
	return true
}

// answer writes the answer to one call and returns its error code.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, call *Call) string {
	body, code, msg := s.authenticate(r, call)
	if code != "" {
		return writeError(w, r, http.StatusForbidden, code, msg)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	objects, ok := s.buckets[call.Bucket]
	if !ok && call.Bucket != "" {
		return writeError(w, r, http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist")
	}
	switch call.Op {
	case "HeadBucket":
		w.WriteHeader(http.StatusOK)
		return ""
	case "ListObjectsV2":
		return list(w, r, call.Bucket, objects)
	case "GetObject", "HeadObject":
		o, ok := objects[call.Key]
		if !ok {
			return writeError(w, r, http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
		}
		h := w.Header()
		h.Set("ETag", o.ETag)
		h.Set("Last-Modified", o.Modified.Format(http.TimeFormat))
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Length", strconv.Itoa(len(o.Body)))
		if o.SSE != "" {
			h.Set("x-amz-server-side-encryption", o.SSE)
		}
		w.WriteHeader(http.StatusOK)
		if call.Op == "GetObject" {
			_, _ = w.Write(o.Body)
		}
		return ""
	case "PutObject":
		if inm := r.Header.Get("If-None-Match"); inm != "" {
			if inm != "*" {
				return writeError(w, r, http.StatusNotImplemented, "NotImplemented", "If-None-Match takes * only")
			}
			if _, exists := objects[call.Key]; exists {
				return writeError(w, r, http.StatusPreconditionFailed, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
			}
		}
		sum := md5.Sum(body)
		o := Object{Body: body, ETag: `"` + hex.EncodeToString(sum[:]) + `"`, Modified: time.Now().UTC().Truncate(time.Second),
			SSE: r.Header.Get("x-amz-server-side-encryption")}
		objects[call.Key] = o
		w.Header().Set("ETag", o.ETag)
		if o.SSE != "" {
			w.Header().Set("x-amz-server-side-encryption", o.SSE)
		}
		w.WriteHeader(http.StatusOK)
		return ""
	case "DeleteObject":
		delete(objects, call.Key)
		w.WriteHeader(http.StatusNoContent)
		return ""
	}
	return writeError(w, r, http.StatusNotImplemented, "NotImplemented", "the stand-in does not implement "+call.Op)
}

type listResult struct {
	XMLName        xml.Name   `xml:"ListBucketResult"`
	Xmlns          string     `xml:"xmlns,attr"`
	Name           string     `xml:"Name"`
	Prefix         string     `xml:"Prefix"`
	Delimiter      string     `xml:"Delimiter,omitempty"`
	KeyCount       int        `xml:"KeyCount"`
	MaxKeys        int        `xml:"MaxKeys"`
	IsTruncated    bool       `xml:"IsTruncated"`
	Contents       []contents `xml:"Contents"`
	CommonPrefixes []prefix   `xml:"CommonPrefixes"`
}

type contents struct {
	Key          string `xml:"Key"`
	LastModified string `xml:"LastModified"`
	ETag         string `xml:"ETag"`
	Size         int    `xml:"Size"`
	StorageClass string `xml:"StorageClass"`
}

type prefix struct {
	Prefix string `xml:"Prefix"`
}

// list answers ListObjectsV2, in one page.
func list(w http.ResponseWriter, r *http.Request, bucket string, objects map[string]Object) string {
	q := r.URL.Query()
	res := listResult{Xmlns: Namespace, Name: bucket, Prefix: q.Get("prefix"), Delimiter: q.Get("delimiter"), MaxKeys: 1000}
	var keys []string
	for k := range objects {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	seen := map[string]bool{}
	for _, k := range keys {
		if !strings.HasPrefix(k, res.Prefix) {
			continue
		}
		if d := res.Delimiter; d != "" {
			if i := strings.Index(k[len(res.Prefix):], d); i >= 0 {
				p := k[:len(res.Prefix)+i+len(d)]
				if !seen[p] {
					seen[p] = true
					res.CommonPrefixes = append(res.CommonPrefixes, prefix{p})
				}
				continue
			}
		}
		o := objects[k]
		res.Contents = append(res.Contents, contents{Key: k, LastModified: o.Modified.Format(time.RFC3339), ETag: o.ETag, Size: len(o.Body), StorageClass: "STANDARD"})
	}
	res.KeyCount = len(res.Contents) + len(res.CommonPrefixes)
	awstest.WriteXML(w, http.StatusOK, res)
	return ""
}

var authRe = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=([A-Z0-9]+)/([0-9]{8})/([a-z0-9-]+)/s3/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$`)

// Payload hashes that say the body is not covered by the signature.
const (
	unsignedPayload = "UNSIGNED-PAYLOAD"
	streamingPrefix = "STREAMING-"
)

// authenticate checks r's SigV4 signature and reads its body. It returns
// an error code and message when r is refused.
func (s *Server) authenticate(r *http.Request, call *Call) (body []byte, code, msg string) {
	m := authRe.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil {
		return nil, "AccessDenied", "Access Denied"
	}
	call.AccessKey = m[1]
	secret, token, ok := s.keys(m[1])
	if !ok {
		return nil, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."
	}
	if token != "" && r.Header.Get("X-Amz-Security-Token") != token {
		return nil, "InvalidToken", "The provided token is malformed or otherwise invalid."
	}
	signed, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil || signed.Format("20060102") != m[2] {
		return nil, "AccessDenied", "X-Amz-Date is missing or does not match the credential scope"
	}
	if d := time.Since(signed); d > 15*time.Minute || d < -15*time.Minute {
		return nil, "RequestTimeTooSkewed", "The difference between the request time and the current time is too large."
	}
	body, err = io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
	if err != nil {
		return nil, "AccessDenied", "body: " + err.Error()
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	switch {
	case payload == "":
		return nil, "AccessDenied", "x-amz-content-sha256 is missing"
	case payload == unsignedPayload:
	case strings.HasPrefix(payload, streamingPrefix):
		return nil, "NotImplemented", "the stand-in does not take streaming (aws-chunked) payloads"
	default:
		sum := sha256.Sum256(body)
		if hex.EncodeToString(sum[:]) != payload {
			return nil, "XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match what was computed."
		}
	}
	if !validSignature(r, m, aws.Credentials{AccessKeyID: m[1], SecretAccessKey: secret, SessionToken: token}, signed, payload) {
		return nil, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided. Check your key and signing method."
	}
	return body, "", ""
}

// validSignature signs a copy of r (its signed headers only) again with
// creds, as the SDK's signer does for S3, and compares the signatures.
func validSignature(r *http.Request, m []string, creds aws.Credentials, signed time.Time, payload string) bool {
	req, err := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), nil)
	if err != nil {
		return false
	}
	req.Host = r.Host
	for _, h := range strings.Split(m[4], ";") {
		switch h {
		case "host":
		case "content-length":
			req.ContentLength = r.ContentLength
		default:
			req.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	if err := signer.SignHTTP(context.Background(), creds, req, payload, "s3", m[3], signed); err != nil {
		return false
	}
	got := authRe.FindStringSubmatch(req.Header.Get("Authorization"))
	return got != nil && got[4] == m[4] && subtle.ConstantTimeCompare([]byte(got[5]), []byte(m[5])) == 1
}

type errorXML struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	RequestID string   `xml:"RequestId"`
}

// writeError answers an S3 error (no body for HEAD) and returns code.
func writeError(w http.ResponseWriter, r *http.Request, status int, code, msg string) string {
	if r.Method == http.MethodHead {
		w.WriteHeader(status)
		return code
	}
	awstest.WriteXML(w, status, errorXML{Code: code, Message: msg, RequestID: awstest.Random(16)})
	return code
}

// Package awstest holds what the loopback AWS stand-ins for tests share
// (internal/ststest, internal/elbtest): the query protocol aws-sdk-go-v2
// speaks to STS, ELB and ELBv2. A request is POST / with a form body
// (Action=…&Version=…&…, lists as Name.member.N), signed with SigV4: the
// caller is known by the access key of its Authorization header, whose
// credential scope names the service. An answer is XML,
// <ActionResponse xmlns=…><ActionResult>…</ActionResult><ResponseMetadata>
// <RequestId>…; an error is an XML ErrorResponse with an HTTP 4xx status,
// which the SDK turns into its typed errors by Code.
//
// BlackHole gives an endpoint that accepts connections and never answers,
// for deadline tests.
package awstest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Query is one query-protocol request.
type Query struct {
	Action, Version string
	// Form is the whole form, Action and Version included.
	Form url.Values
}

// ParseQuery reads a query-protocol request. When it is not one (another
// method or path, another body type, a bad form) it answers the error in
// namespace and returns nil.
func ParseQuery(w http.ResponseWriter, r *http.Request, namespace string) *Query {
	if r.Method != http.MethodPost || r.URL.Path != "/" {
		WriteError(w, http.StatusBadRequest, namespace, "InvalidAction", "the query protocol takes POST / only")
		return nil
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		WriteError(w, http.StatusBadRequest, namespace, "InvalidParameterValue", "the body must be application/x-www-form-urlencoded")
		return nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, 1<<16)
	if err := r.ParseForm(); err != nil {
		WriteError(w, http.StatusBadRequest, namespace, "MalformedQueryString", err.Error())
		return nil
	}
	return &Query{Action: r.PostForm.Get("Action"), Version: r.PostForm.Get("Version"), Form: r.PostForm}
}

// List returns the list parameter name (name.member.1, name.member.2, …)
// in order.
func (q *Query) List(name string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := q.Form[name+".member."+strconv.Itoa(i)]
		if !ok || len(v) == 0 {
			return out
		}
		out = append(out, v[0])
	}
}

// Get returns one parameter.
func (q *Query) Get(name string) string { return q.Form.Get(name) }

var credentialRe = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=([A-Z0-9]+)/[0-9]{8}/[a-z0-9-]+/([a-z0-9-]+)/aws4_request, SignedHeaders=[^,]+, Signature=[0-9a-f]{64}$`)

// AccessKey returns the access key that signed r for service (the
// credential scope's service, such as "sts" or "elasticloadbalancing"),
// or "" when r is not signed so. Signatures are not verified: the
// stand-ins check who calls, not their cryptography.
func AccessKey(r *http.Request, service string) string {
	m := credentialRe.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil || m[2] != service {
		return ""
	}
	return m[1]
}

type errorResponse struct {
	XMLName   xml.Name `xml:"ErrorResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	Type      string   `xml:"Error>Type"`
	Code      string   `xml:"Error>Code"`
	Message   string   `xml:"Error>Message"`
	RequestID string   `xml:"RequestId"`
}

// WriteError answers an ErrorResponse (a Sender fault) and returns code.
func WriteError(w http.ResponseWriter, status int, namespace, code, msg string) string {
	WriteXML(w, status, errorResponse{Xmlns: namespace, Type: "Sender", Code: code, Message: msg, RequestID: Random(16)})
	return code
}

// WriteXML answers v as XML with status.
func WriteXML(w http.ResponseWriter, status int, v any) {
	b, err := xml.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeBody(w, status, append([]byte(xml.Header), b...))
}

// WriteResult answers action's result: result (a struct of its fields)
// inside <ActionResult> inside <ActionResponse xmlns=namespace>, with a
// request id.
func WriteResult(w http.ResponseWriter, namespace, action string, result any) {
	var buf bytes.Buffer
	buf.WriteString(xml.Header)
	enc := xml.NewEncoder(&buf)
	start := xml.StartElement{Name: xml.Name{Local: action + "Response"}, Attr: []xml.Attr{{Name: xml.Name{Local: "xmlns"}, Value: namespace}}}
	meta := struct {
		RequestID string `xml:"RequestId"`
	}{Random(16)}
	err := enc.EncodeToken(start)
	if err == nil {
		err = enc.EncodeElement(result, xml.StartElement{Name: xml.Name{Local: action + "Result"}})
	}
	if err == nil {
		err = enc.EncodeElement(meta, xml.StartElement{Name: xml.Name{Local: "ResponseMetadata"}})
	}
	if err == nil {
		err = enc.EncodeToken(start.End())
	}
	if err == nil {
		err = enc.Flush()
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeBody(w, http.StatusOK, buf.Bytes())
}

func writeBody(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// Random returns n random hex digits.
func Random(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// BlackHole returns the URL of an endpoint that accepts connections and
// never answers, until the test ends.
func BlackHole(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "http://" + l.Addr().String()
}

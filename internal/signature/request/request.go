package request

import (
	"bytes"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"nuon.dev/nuon/internal/signature"
	"strconv"
	"strings"
	"time"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// Namespace is the SSH signature namespace of request signatures. It
// is not "git", so a request signature can never pass for a commit
// signature, nor a commit signature for a request.
const Namespace = "nuon-request"

// Scheme is the Authorization scheme of a signed request:
//
//	Authorization: Nuon-SSHSIG install="acme", time="1700000000", sig="BASE64"
//
// where sig is the binary SSH signature (sshsig, Namespace, SHA-512)
// of Message.
const Scheme = "Nuon-SSHSIG"

// DefaultMaxSkew is how far a request's time may be from the verifier's
// clock, either way.
const DefaultMaxSkew = 5 * time.Minute

// maxAuthHeader bounds the Authorization header a verifier parses.
const maxAuthHeader = 4096

// Reasons a request is refused. All are final for that request: only a new
// signature helps.
var (
	// ErrNoAuth means the request carries no nuon signature.
	ErrNoAuth = errors.New("request is not signed")
	// ErrMalformed means the Authorization header is not a
	// well-formed nuon signature.
	ErrMalformed = errors.New("request signature is malformed")
	// ErrExpired means the signature's time is outside the allowed
	// clock skew.
	ErrExpired = errors.New("request signature is expired or from the future")
	// ErrUnknownInstall means no key is known for the install the
	// request names.
	ErrUnknownInstall = errors.New("request names an unknown install")
	// ErrBadSignature means the signature was not made by the
	// install's key over this request.
	ErrBadSignature = errors.New("request signature does not match")
)

// Message is what a request signature covers: method, path and query,
// the time in Unix seconds and the install id, one a line. The body is not
// covered: transport security (TLS) protects it, and the server checks
// everything a body asks for against the install the signature proves.
func Message(method, pathQuery string, unix int64, install string) []byte {
	const head = "nuon-request v1\n"
	b := make([]byte, 0, len(head)+len(method)+len(pathQuery)+20+len(install)+4)
	b = append(b, head...)
	b = append(b, method...)
	b = append(b, '\n')
	b = append(b, pathQuery...)
	b = append(b, '\n')
	b = strconv.AppendInt(b, unix, 10)
	b = append(b, '\n')
	b = append(b, install...)
	return append(b, '\n')
}

// Auth is a parsed Authorization header of a signed request.
type Auth struct {
	Install string
	Time    int64
	Sig     []byte
}

// String is the header value.
func (a Auth) String() string {
	return fmt.Sprintf(`%s install=%q, time="%d", sig="%s"`, Scheme, a.Install, a.Time, base64.StdEncoding.EncodeToString(a.Sig))
}

// ParseAuth parses an Authorization header value made by
// Auth.String. Parameters may come in any order; each must appear
// once, quoted; unknown parameters are refused.
func ParseAuth(h string) (Auth, error) {
	var a Auth
	if h == "" {
		return a, ErrNoAuth
	}
	if len(h) > maxAuthHeader {
		return a, fmt.Errorf("%w: header longer than %d bytes", ErrMalformed, maxAuthHeader)
	}
	scheme, rest, ok := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, Scheme) {
		return a, ErrNoAuth
	}
	if !ok {
		return a, fmt.Errorf("%w: no parameters", ErrMalformed)
	}
	seen := map[string]bool{}
	for _, p := range strings.Split(rest, ",") {
		p = strings.TrimSpace(p)
		name, v, ok := strings.Cut(p, "=")
		if !ok || len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
			return a, fmt.Errorf("%w: parameter %q is not name=\"value\"", ErrMalformed, truncate(p))
		}
		v = v[1 : len(v)-1]
		if strings.ContainsAny(v, "\"\\") {
			return a, fmt.Errorf("%w: parameter %s has a quote or backslash", ErrMalformed, name)
		}
		if seen[name] {
			return a, fmt.Errorf("%w: parameter %s twice", ErrMalformed, truncate(name))
		}
		seen[name] = true
		switch name {
		case "install":
			if !validInstall(v) {
				return a, fmt.Errorf("%w: install id %q", ErrMalformed, truncate(v))
			}
			a.Install = v
		case "time":
			t, err := strconv.ParseInt(v, 10, 64)
			if err != nil || t < 0 {
				return a, fmt.Errorf("%w: time %q", ErrMalformed, truncate(v))
			}
			a.Time = t
		case "sig":
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil || len(b) == 0 {
				return a, fmt.Errorf("%w: sig is not base64", ErrMalformed)
			}
			a.Sig = b
		default:
			return a, fmt.Errorf("%w: unknown parameter %q", ErrMalformed, truncate(name))
		}
	}
	for _, n := range []string{"install", "time", "sig"} {
		if !seen[n] {
			return a, fmt.Errorf("%w: no %s", ErrMalformed, n)
		}
	}
	return a, nil
}

// validInstall accepts the install ids schemas allows in a ref name: a
// DNS label.
func validInstall(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Signer signs an install agent's HTTP requests with the install's
// key. It is a go-git HTTP AuthMethod (SetAuth), a gitproto.Client Auth
// function (SetAuth) and an http.RoundTripper wrapper (Transport).
type Signer struct {
	// Install is the install id the requests speak for.
	Install string
	// Key is the install's key, the one whose public half is agentKey in
	// installs/<id>.yaml.
	Key *signature.Signer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Sign sets the Authorization header of req.
func (s *Signer) Sign(req *http.Request) error {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	t := now().Unix()
	msg := Message(req.Method, req.URL.RequestURI(), t, s.Install)
	sig, err := sshsig.Sign(bytes.NewReader(msg), s.Key.SSH(), sshsig.HashSHA512, Namespace)
	if err != nil {
		return fmt.Errorf("sign request: %w", err)
	}
	req.Header.Set("Authorization", Auth{Install: s.Install, Time: t, Sig: sig.Marshal()}.String())
	return nil
}

// SetAuth signs req; a request it cannot sign goes unsigned and the
// server refuses it. It makes Signer a go-git
// transport/http.AuthMethod.
func (s *Signer) SetAuth(req *http.Request) { _ = s.Sign(req) }

// Name names the method for go-git.
func (s *Signer) Name() string { return "nuon-request-signature" }

// String describes the signer without secrets.
func (s *Signer) String() string {
	return fmt.Sprintf("%s install=%s key=%s", s.Name(), s.Install, ssh.FingerprintSHA256(s.Key.PublicKey()))
}

// Transport wraps base (nil: http.DefaultTransport) so that every request
// sent through it is signed.
func (s *Signer) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return signingTransport{s: s, base: base}
}

type signingTransport struct {
	s    *Signer
	base http.RoundTripper
}

func (t signingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	if err := t.s.Sign(r); err != nil {
		return nil, err
	}
	return t.base.RoundTrip(r)
}

var _ http.RoundTripper = signingTransport{}

// Verifier checks signed requests on the server.
type Verifier struct {
	// Key returns the public key of an install, or false when the install
	// is unknown.
	Key func(install string) (ssh.PublicKey, bool)
	// MaxSkew bounds |now - request time|; zero means DefaultMaxSkew.
	MaxSkew time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Verify checks req's signature and returns the install it proves.
func (v *Verifier) Verify(req *http.Request) (string, error) {
	a, err := ParseAuth(req.Header.Get("Authorization"))
	if err != nil {
		return "", err
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	skew := v.MaxSkew
	if skew <= 0 {
		skew = DefaultMaxSkew
	}
	d := now().Sub(time.Unix(a.Time, 0))
	if d > skew || d < -skew {
		return a.Install, fmt.Errorf("%w: %s off the server's clock (allowed %s)", ErrExpired, d.Round(time.Second), skew)
	}
	key, ok := v.Key(a.Install)
	if !ok {
		return a.Install, ErrUnknownInstall
	}
	sig, err := sshsig.ParseSignature(a.Sig)
	if err != nil {
		return a.Install, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if subtle.ConstantTimeCompare(sig.PublicKey.Marshal(), key.Marshal()) != 1 {
		return a.Install, fmt.Errorf("%w: signed by %s, not the install's key", ErrBadSignature, ssh.FingerprintSHA256(sig.PublicKey))
	}
	if sig.Namespace != Namespace {
		return a.Install, fmt.Errorf("%w: namespace %q, not %s", ErrBadSignature, truncate(sig.Namespace), Namespace)
	}
	if err := sig.HashAlgorithm.Available(); err != nil {
		return a.Install, fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	h := sig.HashAlgorithm.Hash()
	h.Write(Message(req.Method, req.URL.RequestURI(), a.Time, a.Install))
	if err := key.Verify(signedData(sig.HashAlgorithm.String(), h.Sum(nil)), sig.Signature); err != nil {
		return a.Install, fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	return a.Install, nil
}

// signedData is what an SSH signature of a message in Namespace signs
// (PROTOCOL.sshsig): the magic preamble, the namespace, an empty reserved
// field, the hash algorithm and the message's digest, the strings each
// with its length. It is what sshsig.Verify builds, without its
// reflection-based encoding and its two key fingerprints on every
// request: the key was compared just before, in constant time. Tests
// check it against signatures made by OpenSSH's ssh-keygen.
func signedData(hashAlgorithm string, digest []byte) []byte {
	b := make([]byte, 0, 6+4+len(Namespace)+4+4+len(hashAlgorithm)+4+len(digest))
	b = append(b, "SSHSIG"...)
	for _, f := range [][]byte{[]byte(Namespace), nil, []byte(hashAlgorithm), digest} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

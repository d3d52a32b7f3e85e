package request

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"time"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/signature"
)

// MaxBufferedBody bounds the body a Signer reads into memory to digest it:
// a body with no GetBody is read whole, once, and handed on from memory.
// (A body with GetBody, as http.NewRequest gives byte readers and buffers,
// is digested from a second copy, streamed, with no bound.) Agents send at
// most a few MiB: a status push is at most 8 MiB of pack.
const MaxBufferedBody = 64 << 20

// Signer signs an install agent's HTTP requests with the install's
// key. It is a go-git HTTP AuthMethod (SetAuth), a gitproto.Client Auth
// function (SetAuth) and an http.RoundTripper wrapper (Transport).
type Signer struct {
	// Install is the install id the requests speak for.
	Install string
	// Key is the install's key, the one whose public half is agentKey in
	// installs/<id>.yaml; it must be an ed25519 key.
	Key *signature.Signer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Rand is where nonces come from; nil means crypto/rand.
	Rand io.Reader
}

// Sign digests req's body into its Content-Digest header and signs the
// request into its Signature-Input and Signature headers. A body read to
// digest it is restored: req can be sent as it is.
func (s *Signer) Sign(req *http.Request) error {
	sum, err := digestBody(req)
	if err != nil {
		return fmt.Errorf("sign request: %w", err)
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	rnd := s.Rand
	if rnd == nil {
		rnd = rand.Reader
	}
	var nonce [16]byte
	if _, err := io.ReadFull(rnd, nonce[:]); err != nil {
		return fmt.Errorf("sign request: nonce: %w", err)
	}
	in := Input{
		Components: Components,
		Created:    now().Unix(),
		KeyID:      s.Install,
		Nonce:      base64.RawURLEncoding.EncodeToString(nonce[:]),
		Alg:        Alg,
		Tag:        Tag,
	}
	digest := FormatContentDigest(sum)
	base, err := signatureBase(req.Method, req.URL.EscapedPath(), req.URL.RawQuery, digest, in)
	if err != nil {
		return fmt.Errorf("sign request: %w", err)
	}
	if t := s.Key.PublicKey().Type(); t != ssh.KeyAlgoED25519 {
		return fmt.Errorf("sign request: key is %s, not ed25519", t)
	}
	sig, err := s.Key.SSH().Sign(rnd, base)
	if err != nil {
		return fmt.Errorf("sign request: %w", err)
	}
	if sig.Format != ssh.KeyAlgoED25519 || len(sig.Blob) != sizeSig {
		return fmt.Errorf("sign request: key made a %s signature, not ed25519", sig.Format)
	}
	req.Header.Set(headerDigest, digest)
	req.Header.Set(headerInput, Label+"="+in.String())
	req.Header.Set(headerSignature, FormatSignature(sig.Blob))
	return nil
}

// digestBody is the SHA-256 of req's body; an absent body is an empty
// one. A body without GetBody is read into memory (at most
// MaxBufferedBody) and put back.
func digestBody(req *http.Request) ([sizeSHA256]byte, error) {
	h := sha256.New()
	var sum [sizeSHA256]byte
	switch {
	case req.Body == nil || req.Body == http.NoBody:
	case req.GetBody != nil:
		body, err := req.GetBody()
		if err != nil {
			return sum, fmt.Errorf("body: %w", err)
		}
		_, err = io.Copy(h, body)
		body.Close()
		if err != nil {
			return sum, fmt.Errorf("body: %w", err)
		}
	default:
		data, err := io.ReadAll(io.LimitReader(req.Body, MaxBufferedBody+1))
		req.Body.Close()
		if err != nil {
			return sum, fmt.Errorf("body: %w", err)
		}
		if len(data) > MaxBufferedBody {
			return sum, fmt.Errorf("body: longer than %d bytes", MaxBufferedBody)
		}
		h.Write(data)
		req.Body = io.NopCloser(bytes.NewReader(data))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
		req.ContentLength = int64(len(data))
		if len(data) == 0 {
			req.Body = http.NoBody
		}
	}
	h.Sum(sum[:0])
	return sum, nil
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
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	return t.base.RoundTrip(r)
}

var _ http.RoundTripper = signingTransport{}

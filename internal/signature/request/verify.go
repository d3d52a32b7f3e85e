package request

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// DefaultMaxSkew is how far a request's time may be from the verifier's
// clock, either way.
const DefaultMaxSkew = 5 * time.Minute

// Scheme is the WWW-Authenticate challenge a server answers an unsigned
// or refused request with. The signature itself is not an Authorization
// header: it is the Signature-Input and Signature headers of RFC 9421.
const Scheme = "Nuon-Signature"

// v1Scheme is the Authorization scheme of the first request signatures,
// which covered no body; they are refused by name.
const v1Scheme = "Nuon-SSHSIG"

// Verifier checks signed requests on the server. It must not be copied
// after first use: it holds the cache of signatures seen.
type Verifier struct {
	// Key returns the public key of an install, or false when the install
	// is unknown.
	Key func(install string) (ssh.PublicKey, bool)
	// MaxSkew bounds |now - request time|; zero means DefaultMaxSkew. A
	// signature is remembered for as long as it could pass this check.
	MaxSkew time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// MaxSeen bounds the signatures remembered, all installs together;
	// zero means DefaultMaxSeen.
	MaxSeen int
	// MaxSeenPerInstall bounds the signatures remembered for one install;
	// zero means DefaultMaxSeenPerInstall.
	MaxSeenPerInstall int

	once sync.Once
	seen *replayCache
}

// Verify checks req's signature and returns the install it proves. It
// refuses a signature it has seen before (ErrReplay). On success it
// replaces req.Body with a reader that hashes the body as it is read and,
// at its end, returns ErrDigest instead of io.EOF if the body is not the
// one the signed Content-Digest names: the handler must read the body to
// its end before it acts on it.
//
// The install is returned with some errors too (a known id whose
// signature failed), for the log; it is proven only when err is nil.
func (v *Verifier) Verify(req *http.Request) (string, error) {
	in, sig, digest, sum, err := parseRequest(req.Header)
	if err != nil {
		return "", err
	}
	if err := checkInput(in); err != nil {
		return "", err
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	skew := v.maxSkew()
	t := now()
	d := t.Sub(time.Unix(in.Created, 0))
	if d > skew || d < -skew {
		return in.KeyID, fmt.Errorf("%w: %s off the server's clock (allowed %s)", ErrExpired, d.Round(time.Second), skew)
	}
	key, ok := v.Key(in.KeyID)
	if !ok {
		return in.KeyID, ErrUnknownInstall
	}
	ck, ok := key.(ssh.CryptoPublicKey)
	if !ok {
		return in.KeyID, fmt.Errorf("%w: the install's key is %s, not ed25519", ErrBadSignature, key.Type())
	}
	pub, ok := ck.CryptoPublicKey().(ed25519.PublicKey)
	if !ok {
		return in.KeyID, fmt.Errorf("%w: the install's key is %s, not ed25519", ErrBadSignature, key.Type())
	}
	base, err := signatureBase(req.Method, req.URL.EscapedPath(), req.URL.RawQuery, digest, in)
	if err != nil {
		return in.KeyID, err
	}
	if !ed25519.Verify(pub, base, sig) {
		return in.KeyID, fmt.Errorf("%w: not made by the install's key over this request", ErrBadSignature)
	}
	v.once.Do(func() { v.seen = newReplayCache(v.MaxSeen, v.MaxSeenPerInstall) })
	if v.seen.seen(in.KeyID, in.Nonce, in.Created+int64(skew/time.Second)+1, t.Unix()) {
		return in.KeyID, ErrReplay
	}
	body := req.Body
	if body == nil {
		body = http.NoBody
	}
	req.Body = &Body{r: body, h: sha256.New(), want: sum}
	return in.KeyID, nil
}

func (v *Verifier) maxSkew() time.Duration {
	if v.MaxSkew <= 0 {
		return DefaultMaxSkew
	}
	return v.MaxSkew
}

// parseRequest reads the three signature headers: each exactly once.
func parseRequest(h http.Header) (in Input, sig []byte, digest string, sum [sizeSHA256]byte, err error) {
	inputs, sigs, digests := h.Values(headerInput), h.Values(headerSignature), h.Values(headerDigest)
	if len(inputs) == 0 && len(sigs) == 0 {
		if a := h.Get("Authorization"); len(a) >= len(v1Scheme) && strings.EqualFold(a[:len(v1Scheme)], v1Scheme) {
			err = fmt.Errorf("%w: the first signature format (%s, no body digest) is no longer accepted", ErrMalformed, v1Scheme)
			return
		}
		err = ErrNoAuth
		return
	}
	for _, hv := range []struct {
		name   string
		values []string
	}{{headerInput, inputs}, {headerSignature, sigs}, {headerDigest, digests}} {
		if len(hv.values) != 1 {
			err = fmt.Errorf("%w: %d %s headers, want one", ErrMalformed, len(hv.values), hv.name)
			return
		}
	}
	if in, err = ParseInput(inputs[0]); err != nil {
		return
	}
	if sig, err = ParseSignature(sigs[0]); err != nil {
		return
	}
	digest = digests[0]
	sum, err = ParseContentDigest(digest)
	return
}

// checkInput refuses a signature that does not cover what a request
// signature must, or that is not this package's kind.
func checkInput(in Input) error {
	if len(in.Components) != len(Components) {
		return fmt.Errorf("%w: covers %q, want %q", ErrMalformed, in.Components, Components)
	}
	for _, want := range Components {
		n := 0
		for _, c := range in.Components {
			if c == want {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("%w: covers %q, want %q", ErrMalformed, in.Components, Components)
		}
	}
	switch {
	case in.Tag != Tag:
		return fmt.Errorf("%w: tag %q, not %s", ErrMalformed, in.Tag, Tag)
	case in.Alg != Alg:
		return fmt.Errorf("%w: alg %q, not %s", ErrMalformed, in.Alg, Alg)
	case !validInstall(in.KeyID):
		return fmt.Errorf("%w: keyid %q is not an install id", ErrMalformed, in.KeyID)
	case !validNonce(in.Nonce):
		return fmt.Errorf("%w: nonce is not %d to %d characters of base64url", ErrMalformed, minNonce, maxNonce)
	}
	return nil
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

// validNonce accepts minNonce to maxNonce characters of the base64url
// alphabet: at least 96 bits however they were encoded.
func validNonce(s string) bool {
	if len(s) < minNonce || len(s) > maxNonce {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
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

// Body is a verified request's body: it hashes what is read, and at the
// end returns ErrDigest rather than io.EOF when the body is not the one
// the signature's Content-Digest names. Every read after that returns the
// same error.
type Body struct {
	r    io.ReadCloser
	h    hash.Hash
	want [sizeSHA256]byte
	err  error // io.EOF or ErrDigest once the end was reached
	n    int64
}

// Read reads from the body.
func (b *Body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	b.h.Write(p[:n])
	b.n += int64(n)
	if err == io.EOF {
		var got [sizeSHA256]byte
		b.h.Sum(got[:0])
		b.err = io.EOF
		if subtle.ConstantTimeCompare(got[:], b.want[:]) != 1 {
			b.err = fmt.Errorf("%w (after %d bytes)", ErrDigest, b.n)
		}
		return n, b.err
	}
	return n, err
}

// Close closes the body.
func (b *Body) Close() error { return b.r.Close() }

// Mismatch says whether the body was read to its end and was not the one
// signed, for the server's log and metrics.
func (b *Body) Mismatch() bool { return b.err != nil && b.err != io.EOF }

package request

import "errors"

// Reasons a request is refused. All are final for that request: only a
// new signature (a new request) helps.
var (
	// ErrNoAuth means the request carries no nuon signature.
	ErrNoAuth = errors.New("request is not signed")
	// ErrMalformed means the signature headers are not well-formed, or
	// the signature does not cover what a request signature must.
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
	// ErrReplay means the signature was seen before: the request is a
	// copy of one already served.
	ErrReplay = errors.New("request signature was already used")
	// ErrDigest means the request's body is not the one its signed
	// Content-Digest names. It is returned by the body's Read at its end,
	// not by Verify, so a handler that reads the body to its end before
	// acting never acts on a body that was not signed.
	ErrDigest = errors.New("request body does not match its signed digest")
)

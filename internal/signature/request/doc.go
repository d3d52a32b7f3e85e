// Package request signs and verifies an install agent's HTTP requests to
// the tenant server with the install's own SSH key (namespace
// nuon-request, never git's): no shared secret, and a signature that can
// pass neither for a commit signature nor for another install's request.
// It is apart from package signature, which checks commits, so that what
// reads commits (the renderer) does not link net/http.
package request

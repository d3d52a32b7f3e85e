// Package gittest runs real git servers for tests: bare repositories made by
// the git CLI and a smart-HTTP server that is git's own http-backend behind
// net/http/cgi. It counts requests and response bytes so tests and benchmarks
// can measure what a client really sends and receives.
package gittest

// Package signature makes and checks the SSH signatures on nuon's commits.
//
// Commits are signed the way `git commit -S` signs them with
// gpg.format=ssh: an armored SSH signature (namespace "git") over the commit
// encoded without its signature, stored in the commit's gpgsig header. Stock
// git verifies them with `git -c gpg.ssh.allowedSignersFile=F
// verify-commit`, and this package verifies them against the same
// allowed_signers file format.
//
// # Requests
//
// An install agent proves who it is to the tenant server (nuon server) with
// the same key that signs its status commits, so there is no shared secret
// to mint, rotate or leak: each HTTP request carries an Authorization header
// (RequestScheme) with an SSH signature in its own namespace,
// RequestNamespace, over the method, path and query, the time and the install
// id (RequestMessage). RequestSigner makes them (as a go-git AuthMethod, a
// gitproto Auth function or an http.RoundTripper); RequestVerifier checks
// them against the install's agentKey from main, within a bounded clock skew
// (DefaultMaxSkew). Within that window a captured header could be replayed
// for the same method and path, so the server must be reached over TLS, and
// the server checks every ref and object a request asks for against the
// proven install.
package signature

// Package requests files, reads and verifies operators' requests to an
// install: the logs of a component, or one allow-listed, read-only debug
// command.
//
// # Filing
//
// A request is a commit on refs/heads/nuon/requests (Ref) whose tree holds
// one file, requests/<install>/<id>.json (schemas.Request), and whose
// message ends with two trailers: Nuon-Request, the file's path, and
// Nuon-Request-Digest, its SHA-256. The commit is signed by an operator's
// key; the keys trusted for requests are the allowed_signers file
// trust/requests on main (TrustFile), reviewed like any other change and
// separate from the render key. File builds such a commit.
//
// # Rendering
//
// The renderer walks the ref's first-parent history (at most MaxWalk
// commits), keeps every request whose commit verifies (Verify) and whose
// deadline has not passed, and puts each install's into
// installs/<id>/requests.json as schemas.SignedRequest entries: the file
// and the raw signed commit. A request that does not verify never reaches
// an agent; Read reports why it was dropped.
//
// # Answering
//
// The agent verifies every entry again against its own request trust
// (defence in depth: a renderer key alone cannot make it run a command),
// refuses requests for another install, past their deadline, or of a kind
// the install's operations settings turned off, runs each once as a
// bounded debug job and answers in its status.
package requests

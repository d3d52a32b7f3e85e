// Package gitproto is a client for git's wire protocol over smart HTTP and
// SSH, just large enough for the install agent: list the few refs it
// watches, fetch the objects they point to into a go-git storer, and push
// its status ref.
//
// # Why
//
// go-git v5 speaks only protocol version 0, in which the server opens every
// ls-remote and fetch by advertising all of its refs. The agent watches one
// ref, refs/heads/nuon/installs/<install>, in a repository with one such ref
// per install, so with version 0 a poll costs in proportion to the number
// of installs, not to what changed: about 84 bytes per ref, 840 KB per poll
// with 10,000 installs, paid by every install on every poll. Protocol
// version 2 lets the client name the refs it wants (ls-refs with
// ref-prefix), so a poll costs one request of under a hundred bytes
// whatever the size of the repository.
//
// # Transports
//
// A command is described once (the request it sends, how its answer is
// read, what to do in protocol version 0) and a transport carries it:
//
//   - Smart HTTP (stateless-rpc): each request is a POST through the
//     Client's *http.Client, so a caller that signs or authenticates every
//     request does it in one RoundTripper.
//   - SSH (golang.org/x/crypto/ssh): one connection per Client, one session
//     per command running git-upload-pack or git-receive-pack on the quoted
//     path. Protocol version 2 is asked for with GIT_PROTOCOL=version=2 on
//     the session (sent without waiting for a reply); the server speaks
//     first. The host key is always checked (ErrHostKey says an unknown or
//     changed key); the client logs in with a private key.
//
// Locations are http(s):// URLs, ssh://[user@]host[:port]/path and the
// scp-like [user@]host:path (ParseSSH). Redact prints any of them without
// user information.
//
// # What it implements
//
//   - pkt-line framing (gitprotocol-common): data, flush (0000), delim
//     (0001) and response-end (0002) packets, git's 65,520-byte limit, and
//     "ERR" packets.
//   - The capability advertisement (Client.Capabilities).
//   - ls-refs with ref-prefix (Client.LsRefs).
//   - fetch (Client.Fetch) in a single round: wants, haves and "done" in one
//     request, ofs-delta, no-progress; the response's acknowledgments,
//     shallow-info, wanted-refs and packfile-uris sections are read, and
//     the packfile section is demultiplexed from the sideband (band 1 data,
//     band 2 progress dropped, band 3 a fatal remote error) into go-git.
//   - Protocol version 0, when the server has nothing newer (sshd without
//     AcceptEnv GIT_PROTOCOL, old HTTP servers): the ref advertisement
//     answers LsRefs, and Fetch sends wants, haves and "done" and reads one
//     ACK or NAK before the pack. It works at version 0's cost (every ref,
//     every poll), and the Client logs one warning naming the host.
//   - push (Client.Push) with git-receive-pack, which has no version 2:
//     commands and a pack that go-git's encoder builds of the objects the
//     server lacks; report-status is read from the sideband and every
//     refused ref comes back in a *PushError with the server's reason and
//     its hooks' messages (errors.Is(err, ErrStale) for a ref that moved).
//     A zero new value deletes a ref (delete-refs; no pack when every
//     command is a deletion), in the same atomic push as the others.
//     Over HTTP the push is one POST: git's http-backend does not need the
//     advertisement GET, which lists every ref.
//
// Not implemented: the git:// transport, shallow and partial fetches,
// downloading packfile URIs, SHA-256 repositories, encrypted SSH keys and
// ssh-agent.
//
// # Requests per poll
//
// gitprotocol-v2 has an HTTP client GET the capability advertisement before
// its first command. git's http-backend does not need it: a POST to
// git-upload-pack with the Git-Protocol header runs the command. So a
// Client posts commands directly and every LsRefs is one request; it asks
// for the advertisement only to explain a failure (a server without
// version 2 answers a version 2 command with an empty body). Client.Discover
// restores the GET, once per Client.
//
// Measured against git 2.39's http-backend by BenchmarkLsRefsPoll (response
// bytes counted at the server, one install's ref asked for):
//
//	install refs   LsRefs              go-git v5 Remote.List
//	1              1 request, 88 B     1 request, 508 B
//	1,000          1 request, 88 B     1 request, 84,424 B
//	10,000         1 request, 88 B     1 request, 840,424 B
//
// With Discover the first poll adds a GET of 147 bytes. The requests are
// as small: an LsRefs body for one of these refs is 82 bytes.
//
// Over SSH, BenchmarkSSHPoll (Debian's sshd on loopback, the connection
// kept open; wire bytes include SSH framing and encryption; a round trip
// is the server answering after the client spoke):
//
//	install refs   version 2 (ls-refs)                version 0 (no AcceptEnv)
//	1,000          235 B in; wire 552 B in, 488 out   84,382 B in; wire 84,810 B in
//	10,000         235 B in; wire 630 B in, 504 out   840,382 B in; wire 842,702 B in
//
// Both take 3 to 4 round trips per poll (open a channel, exec, the command,
// the close); version 0 takes more at 10,000 refs as the client's window
// updates interleave with the advertisement. A status push over HTTP to a
// repository with 1,000 refs (BenchmarkStatusPush): Push makes 1 request
// and receives 62 bytes; go-git's Remote.Push makes 2 and receives 84,400,
// the advertisement of every ref.
//
// # Errors
//
// Callers branch on what to do next. Temporary reports whether an error is
// worth retrying as it is: a refused or broken connection, a response cut
// short, an *HTTPError with a temporary status (5xx, 429). Errors wrapping
// ErrProtocol are not: the server broke the protocol or sent a bad pack.
// ErrUnsupported, which wraps ErrProtocol, says the server lacks what this
// package needs (Capabilities on a version 0 server, a SHA-256
// repository). ErrHostKey and ErrUnauthorized are SSH refusals, never
// temporary. A *RemoteError carries a message the server sent, such as
// "upload-pack: not our ref" or what an SSH command wrote to standard
// error before it hung up; a *PushError lists refused refs.
package gitproto

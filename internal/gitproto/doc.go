// Package gitproto is a client for git's wire protocol version 2 over smart
// HTTP, just large enough for the install agent: list the few refs it
// watches, and fetch the objects they point to into a go-git storer.
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
// # What it implements
//
//   - pkt-line framing (gitprotocol-common): data, flush (0000), delim
//     (0001) and response-end (0002) packets, git's 65,520-byte limit, and
//     "ERR" packets.
//   - The capability advertisement (Client.Capabilities): a GET of
//     info/refs?service=git-upload-pack with Git-Protocol: version=2.
//   - ls-refs with ref-prefix (Client.LsRefs).
//   - fetch (Client.Fetch) in a single round: wants, haves and "done" in one
//     request, ofs-delta, no-progress; the response's acknowledgments,
//     shallow-info, wanted-refs and packfile-uris sections are read, and
//     the packfile section is demultiplexed from the sideband (band 1 data,
//     band 2 progress dropped, band 3 a fatal remote error) into go-git.
//
// Not implemented: push, SSH and the git:// transport, shallow and partial
// fetches, downloading packfile URIs, SHA-256 repositories.
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
// # Errors
//
// Callers branch on what to do next. Temporary reports whether an error is
// worth retrying as it is: a refused or broken connection, a response cut
// short, an *HTTPError with a temporary status (5xx, 429). Errors wrapping
// ErrProtocol are not: the server broke the protocol or sent a bad pack.
// ErrUnsupported, which wraps ErrProtocol, says the server lacks protocol
// version 2; a caller may fall back to go-git and version 0. A *RemoteError carries a
// message the server sent, such as "upload-pack: not our ref".
package gitproto

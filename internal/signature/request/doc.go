// Package request signs and verifies an install agent's HTTP requests to
// the tenant server with the install's own SSH ed25519 key: no shared
// secret, and a signature that binds the whole request, body included,
// and is good for one use.
//
// # The shape: HTTP Message Signatures
//
// A signed request (here the GET of an advertisement, whose body is empty)
// carries three headers, in the shapes of RFC 9530
// (Digest Fields) and RFC 9421 (HTTP Message Signatures):
//
//	Content-Digest: sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:
//	Signature-Input: nuon=("@method" "@path" "@query" "content-digest");created=1800000000;keyid="acme";nonce="q1XqCt6JS0Pw9m4b5C1jVQ";alg="ed25519";tag="nuon-request"
//	Signature: nuon=:BASE64 OF 64 BYTES:
//
// The signature is Ed25519, made with the install's key, over the RFC 9421
// signature base, one line per covered component and the parameters last:
//
//	"@method": GET
//	"@path": /tenant.git/info/refs
//	"@query": ?service=git-upload-pack
//	"content-digest": sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:
//	"@signature-params": ("@method" "@path" "@query" "content-digest");created=1800000000;keyid="acme";nonce="q1XqCt6JS0Pw9m4b5C1jVQ";alg="ed25519";tag="nuon-request"
//
// What each part is for:
//   - "@method", "@path", "@query": the endpoint and service asked for.
//     The authority and scheme are not covered: a replica forwards a
//     push to the writer under another host name, and TLS may end at a
//     load balancer; a signature for one tenant server replayed to
//     another is still caught by that server's replay cache and clock.
//   - "content-digest": the SHA-256 of the body as sent (after any
//     Content-Encoding). Every request covers it; a request without a
//     body (the GET of an advertisement) carries the digest of the empty
//     body, so there is one rule and no request shape without a digest.
//   - created: the clock check (MaxSkew, five minutes either way).
//   - keyid: the install; its key is agentKey in installs/<id>.yaml.
//   - nonce: 16 random bytes. Ed25519 is deterministic, so without it two
//     identical polls in the same second would have the same signature
//     and the second would be taken for a replay.
//   - alg, tag: Ed25519 and "nuon-request", both signed. The tag keeps a
//     nuon request signature apart from any other use of RFC 9421 with
//     the same key. The install's key also signs status commits, as
//     sshsig in git's namespace: what sshsig signs begins with "SSHSIG",
//     what SSH authentication signs with a length, and a signature base
//     here always begins with `"@method"`, so none of the three can pass
//     for another.
//
// The verifier accepts exactly this: one member labelled nuon in each
// header, the four components each once (in any order), the five
// parameters each once (in any order, serialized back as they came),
// sha-256 as the only digest, no escapes in strings. It is a strict subset
// of RFC 8941 structured fields, small enough to fuzz whole
// (fuzz_test.go).
//
// # The body: checked as it is read
//
// Verify checks the signature over the declared Content-Digest, then
// replaces the request's body with a Body that hashes what is read and,
// at the end, returns ErrDigest instead of io.EOF when the body differs.
// A handler that reads the body to its end before acting (the server's
// upload-pack reads the whole request first, its receive-pack reads the
// whole pack before anything is checked or written) therefore never acts
// on a body that was not signed, and bodies still stream: a status push of
// up to 8 MiB is not buffered twice. A handler that acted on part of a
// body before its end would lose that guarantee; the server's tests
// (server/sig_test.go) push a swapped body and check that nothing was
// written.
//
// The signer digests the body before sending: from a second copy when the
// request has GetBody (http.NewRequest over a byte slice or reader, as the
// agent's git client makes them), else by reading it into memory, at most
// MaxBufferedBody, and handing that on.
//
// # Replays
//
// A signature is good once. The Verifier remembers each signature it
// accepted, as (install, nonce), until its created time plus MaxSkew has
// passed (then the clock check refuses it anyway), and refuses it again
// with ErrReplay. The memory is bounded: MaxSeen signatures in total
// (DefaultMaxSeen, 524,288) and MaxSeenPerInstall for one install
// (DefaultMaxSeenPerInstall, 1,024); at a bound the oldest goes first, the
// install's own oldest when that install is at its bound. An entry costs
// about 80 bytes (78 measured in TestReplayCacheMemory: the 64-byte entry,
// its 16-byte key and pointer in the map, and the map's own slack), so the
// cache is at most about 40 MiB, and holds a five-minute window of 1,700
// requests/s in full; below its bounds it holds only the signatures still
// inside their window, as expired ones are dropped as new ones come.
// Past the total bound (a fleet sending more than that, or many installs'
// keys flooding at once) the oldest signatures of the window are
// forgotten and could be replayed until they expire; one install's key
// alone cannot evict another install's signatures.
//
// The cache is per Verifier, so per process. A read replica verifies a
// push with its own cache and forwards it unchanged to the writer, which
// verifies it again with its own: the one request is seen once by each.
//
// # The first format is refused
//
// The first request signatures (Authorization: Nuon-SSHSIG, an sshsig over
// method, path, time and install) covered no body and had no nonce. The
// server refuses them by name (ErrMalformed): accepting both would let
// anyone who saw an old-format request downgrade to it. Agents and the
// server ship in one binary and are upgraded together, so there is no
// transition period.
//
// # Library
//
// No library is used for the RFC 9421 part. github.com/yaronf/httpsign,
// github.com/remitly-oss/httpsig-go and github.com/lestrrat-go/htmsig, the
// well-kept Go implementations with Ed25519, are all refused by the module
// proxy this project builds from; the part needed here (one fixed set of
// components, one algorithm, one label) is small enough to write and fuzz.
// Ed25519 itself is crypto/ed25519, with the key from the install's SSH key
// file (golang.org/x/crypto/ssh).
//
// # Cost
//
// BenchmarkVerify is the verifier's whole cost for one request: 79 to
// 125 µs on the 2-core machine under load (other builds running), nearly
// all of it the Ed25519 check. On the server's poll path
// (BenchmarkPollHandler in package server, `go test ./server -run '^$'
// -bench 'PollHandler' -benchtime 2s`, before and after back to back at
// load average 13) a poll costs 77 and 76 µs of CPU with 1,000 and 100,000
// installs, against 69 and 72 µs with the first format: the body's SHA-256
// and the replay cache add 5 to 8 µs, while the allocations per poll fell
// from 66 to 46 and the bytes from 4,744 to about 4,100.
//
// It is apart from package signature, which checks commits, so that what
// reads commits (the renderer) does not link net/http.
package request

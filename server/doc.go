// Package server is the tenant server (`nuon server`): the one endpoint every
// install agent talks to. It serves the tenant repository over git smart
// HTTP scoped to the install that signs each request, follows main and
// renders every change, and mirrors rendered and status refs upstream.
//
// # Who may do what
//
// Every request carries a signature made with the install's own SSH key
// (request.Signer: RFC 9421 over method, path, query and the body's
// Content-Digest, with a nonce), checked against agentKey in
// installs/<id>.yaml on main (request.Verifier): no shared secret exists.
// A request that is unsigned, badly signed, signed too long ago, by an
// install main does not know, or whose signature was already used is
// answered 401 and logged. A body that is not the one signed fails at its
// end, and every handler reads a body to its end before it acts on it, so
// it is refused and nothing is written (logged and counted as
// body_not_signed). An authenticated install may
//
//   - read refs/heads/nuon/installs/<id> and refs/heads/nuon/status/<id>
//     and the objects reachable from their tips (the install's closure),
//     nothing else: ls-refs lists only these two, and a fetch is answered
//     from the closure alone (see Isolation by construction);
//   - push refs/heads/nuon/status/<id> only, fast-forward only, only
//     commits signed by its own key that name it in their Nuon-Install
//     trailer, one parent each, every object they name pushed or in its
//     closure. All of it is checked in the server before anything is
//     written (see Status pushes).
//
// Everything else is refused with a git error message that names nothing
// of another install, and logged with the install, the ref and the reason.
//
// Beside the installs: the git host may ask for a check of main on
// /hooks/main, proving it is the git host with the webhook secret
// (HookSecret): GitHub's X-Hub-Signature-256, an HMAC-SHA256 of the body,
// or GitLab's X-Gitlab-Token, the secret itself, each compared in constant
// time. A hook without it is answered 401, logged and counted
// (hook_signature); without a secret every hook is, unless HookOpen. A
// burst of hooks makes one check of main at once and at most one more
// each HookInterval. Operators open /fleet with the view token; a login
// goes on only to a path under /fleet, cleaned (safeNext). Replicas read
// /replica/ with the replica token. Operators' keys read and file
// requests under /operator (see Operators).
//
// # URLs
//
// Every URL the server answers; anything else is 404.
//
//	GET  <any path>/info/refs?service=git-upload-pack   an install's poll (its key)
//	POST <any path>/git-upload-pack                     an install's fetch (its key)
//	GET  <any path>/info/refs?service=git-receive-pack  an install's push, advertisement (its key)
//	POST <any path>/git-receive-pack                    an install's status push (its key)
//	GET  /operator/info/refs?service=git-upload-pack    an operator's or approver's read of the branches (operator or approver key)
//	POST /operator/git-upload-pack                      an operator's or approver's fetch (operator or approver key)
//	POST /operator/requests                             an operator files a request (operator key)
//	POST /operator/approvals                            an approver files a signed approval of a saved plan (approver key; operator_approvals.go)
//	GET  /operator/liveness[?install=ID]                every install's last signed contact, for nuon status (operator key)
//	POST /operator/rollouts                             an operator pauses, resumes or aborts a rollout (operator key; server/rollout_control.go)
//	POST /builds/requests                               vendor CI files a build request (key of trust/builds)
//	GET  /builds/requests/{id}?wait=S                   a build request's state and result (either build key)
//	POST /builds/next?wait=S                            a build agent takes a request, long poll (key of trust/build-agents)
//	POST /builds/requests/{id}/lease                    the build agent that took it renews its lease (its key)
//	POST /builds/requests/{id}/result                   the build agent that took it answers (its key)
//	POST /hooks/main                                    the git host's webhook (HookSecret)
//	GET  /healthz, /readyz                              liveness, readiness (open)
//	GET  /metrics                                       Prometheus (open)
//	GET  /fleet, /fleet/installs/{id}, /fleet/static/   the fleet view (ViewToken; only with one)
//	GET  /fleet/rollouts, /fleet/rollouts/{channel}     the fleet view's staged rollouts (ViewToken)
//	GET, POST /fleet/login                              the fleet view's sign-in
//	GET  /replica/version, /replica/changes, /replica/info/refs  a replica's refresh (ReplicaToken; writer only)
//	POST /replica/git-upload-pack
//
// Agents use any path for the repository (e.g. /tenant.git) followed by
// a smart-HTTP endpoint; /operator, /builds, /hooks, /fleet, /replica, /healthz,
// /readyz and /metrics are taken.
//
// # Builds
//
// Vendor CI files build requests (nuon build --remote) and the build
// agent (nuon build-agent, package builder) takes them, both through the
// server, both signing every HTTP request as an operator does under
// buildreq.KeyID of their keys: vendor CI's keys are the trust root's
// build-requesters role, the build agents' its build-agents role (or,
// before the root names them, trust/builds and trust/build-agents,
// deprecated), read through trust.MainKeys again when main moves. A key
// is good for its own role only. The server checks a filed request
// (signed over its bytes by the key that signed the HTTP request, whose
// principal is the requester; not expired; a component of nuon.yaml on
// main; from a source repository and ref main allows for it: the root's
// provenance sources, else trust/build-sources.yaml, see
// buildreq.MainSources; an id not filed before, else 409) and files it on
// its own ref, refs/heads/nuon/builds/<id>: each change of state (filed,
// taken by an agent under a lease, queued again when the lease ran out,
// answered) is a commit signed by the server's key, so a restarted server
// goes on with queued and running requests, and a replica answers a
// request's state from its mirror (a queue write moves the replica
// version). POST /builds/next?lease=S hands the oldest to a build agent,
// which renews the lease (POST /builds/requests/{id}/lease) while it
// builds; a request whose lease ran out goes to another agent, at most 3
// times. The release on main names its request (Nuon-Build-Request), so
// a request is released at most once. Without --render-key the server
// takes no builds (503); a replica refuses every URL but the state (421).

// # Operators
//
// An operator (nuon status, logs, debug and requests with --server) signs
// every request as an agent does (package internal/signature/request),
// with a key that trust/requests on main lists, under the key id
// requests.KeyID gives it ("op" and 40 hex digits of the key's SHA-256).
// The key table is that file on the main the server follows, read again
// when main moves; a request by a key it does not list is answered 401
// (counted as operator_key). Operators' and installs' keys are checked by
// two verifiers on disjoint paths: an operator's key opens nothing under
// an install's path (its key id names no install, or the install's key
// does not verify it), an install's key nothing under /operator.
//
// An operator may
//
//   - read every branch (refs/heads/: main, the rendered, install, status
//     and requests refs) with git upload-pack under /operator; the archive
//     and the server's other refs are hidden (uploadpack.hideRefs). The
//     CLI's code that reads a repository reads the server the same way;
//   - file a request: POST /operator/requests with the request's file and
//     its raw commit (schemas.SignedRequest as JSON), exactly as
//     requests.File made it. The server rebuilds the commit's tree from
//     the file (requests.Rebuild: one file, at the path its trailer names,
//     at most one parent) and checks it as the renderer does
//     (requests.Verify) but with the HTTP request's key alone, so the
//     request is the sender's own and its requester is the key's
//     principal; its deadline must not have passed; with a trust root on
//     main (trust/root/), the key must be one of the operators role's
//     keys and both scopes must match the install's labels and channel and
//     the request's kind (403, ErrOutOfScope); the install must be on main
//     (404). A request whose file path is already on the requests ref
//     (a replay, the same request twice) is answered 409
//     (operator_request_filed), as is one whose parent is not the ref's
//     tip ("file on top": the CLI fetches and files again). The server
//     then pushes it to the Upstream first (--force-with-lease on the tip
//     it checked: the upstream is where the server's next fetch reads the
//     ref from), moves its own ref compare-and-swap, and renders at once
//     (Sync): the answer names the install's new desired commit, and the
//     agent finds the request at its next poll, with no PollInterval on
//     the path. A read replica checks the signature and forwards the
//     request unchanged to the writer, which checks it again and files
//     it, as with a status push (TestOperatorThroughReplica).
//
// # Approvers
//
// An approver (nuon approve, reject and approvals with --server) signs
// every HTTP request the same way with a key that trust/approvals on main
// lists (policy.ParseApprovers), under the same kind of key id. A key
// that trust/requests lists, the server's render key, or a key of the
// trust root's render or operators role never counts as an approver's,
// even when trust/approvals lists it too (policy.Approvers.Exclude): at
// POST /operator/approvals it is answered 401 ("a request key never
// approves"). Approvers read the branches as operators do (the plans
// that wait are in the installs' statuses) and nothing else: the
// request, rollout and liveness endpoints take operator keys only.
//
// POST /operator/approvals takes a schemas.SignedApproval as JSON (the
// approval file and its SSH signature in the approval namespace, as
// policy.SignApproval makes it) and checks what the agent will check
// (policy.Approvers.Verify with the install's channel): the signer is a
// listed key valid now and in scope, named as the approval's approver;
// the approval's approver is the key that signed the HTTP request (one's
// own approval only); the install is on main (404 otherwise); it has not
// expired, was not made in the future and lives at most MaxApprovalLife
// (168 h). With a trust root on main that defines the approvers role, the
// key must be one of its keys and its scope must match the install's
// labels and channel. The plan must be one that waits (or was rejected)
// in the install's status (409 otherwise), and the same signed approval
// must not be on the approvals ref already (a replay, 409). The server
// then commits it onto schemas.ApprovalsRef with ApprovalCommit (the
// function nuon approve --repo commits with: the file added, expired
// approvals dropped; the commit signed by the render key), pushes it to
// the Upstream under a lease and moves its own ref as for a request
// (fileCommit, shared), and renders at once: the answer names the
// install's new desired commit, whose approvals.json holds it. A read
// replica forwards the request to the writer, which checks it again
// (TestOperatorApproveThroughReplica). The renderer and the agent check
// every approval again; the server's checks only refuse early what they
// would refuse, with the reason.
//
// Measured (cmd/nuon BenchmarkLogsThroughServer, the real binaries on
// loopback, the sample tenant, a server that checks main once an hour):
// `nuon logs` through the server, from the command's start to the answer
// printed, took 30.4 s a request (3 requests) with the agent's default
// 30 s interval (±10% jitter): the request waits for the agent's next
// poll and nothing else; with a 2 s interval, 2.2 s
// (TestOperatorCLIThroughServer).
//
// # Limits
//
// No client, hostile or slow, holding one install's key or none, can take
// from the others what they need: each bound is checked before what it
// bounds is read or held (Limits, limits.go; `nuon server --help` names
// the flags).
//
//   - Connections: at most MaxConns (10,000, lowered to the open-files
//     limit) are open. At the cap a new connection closes an idle
//     keep-alive one, or one that has sent no request for a second, to
//     take its place (connLimiter, told each connection's state by the
//     http.Server): idle connections cannot keep a polling agent out,
//     and the server never runs out of descriptors for git or the
//     repository. A connection waits in the kernel's queue only while
//     every open one is busy with a request.
//   - Time: headers within ReadHeaderTimeout (10 s); a body within
//     ReadTimeout (2 min) of its request's start, a deadline of the
//     request, lifted once the body is read, so that a long fetch is not
//     cut; a response within WriteTimeout (1 min) of its last write, so a
//     client that stops reading is dropped and one that reads gets a
//     pack of any size; the next request within IdleTimeout (2 min). A
//     request refused before its body was read closes its connection
//     rather than wait for a body that may never come.
//   - Size: headers MaxHeaderBytes (16 KiB); a push's command list 16
//     commands, ref names of 1 KiB, 32 KiB in all, refused from the
//     pkt-line length that would cross the bound, before its payload is
//     read, and never echoed; a push's pack as in Status pushes; a fetch
//     or ls-refs 8 MiB, gunzipped; a webhook body 25 MiB, streamed
//     through the HMAC, never held. A gzip body is bounded on what it
//     inflates to.
//   - Fairness: after its signature is checked, an install has at most
//     InstallRequests (4) requests in flight; more are answered 429 with
//     Retry-After, logged and counted (install_busy), before they take a
//     git process (MaxGit) or a push slot. The count is kept only for
//     installs with a request in flight.
//
// A replica is served by the same HTTPServer and handler, so it enforces
// the same. Measured with the binary and its defaults on the project's two
// cores, shared with other builds (BenchmarkServerHostile, BENCHMARKS.md),
// 32 workers polling 1,000 installs beside each attack:
//
//	                               server RSS (peak)   poll p99
//	polls alone                    102 MB (121 MB)     23 ms
//	10,000 idle connections        291 MB (400 MB)     28 ms
//	10,000 bodies never sent       191 MB (194 MB)     26 ms
//	249 MiB command lists, 3 at    102 MB (120 MB)     41 ms
//	a time
//
// Before the limits, the 10,000 bodies held 10,000 connections and 632 MB
// at the peak, and each command list 1.4 GB.
//
// # Cost independent of the fleet
//
// The server keeps a table of every install's two ref tips in memory,
// loaded once at start (one git for-each-ref) and updated by its own
// writes: renders and accepted pushes. A poll (protocol v2 ls-refs) and the
// v2 capability advertisement are answered from it without starting a
// process, in a few hundred bytes; the receive-pack advertisement lists
// only the install's own refs. A fetch is planned in-process and packed
// by git pack-objects; a push is read and written in-process. Nothing else
// may move install or status refs in the repository while the server
// runs, but nuon install delete's archive, which the server follows (see
// Archived installs).
//
// # Isolation by construction
//
// Every byte a fetch returns is computed from the install's closure: the
// objects reachable from its two ref tips, found by walking them
// (closure.go) through git cat-file processes the server keeps. git
// upload-pack is not run: it answers from the whole repository, and an
// install holding only its own key got another customer's data out of it
// with request lines no filter in front of it foresaw (a shallow line
// naming main's commit and an endless deepen made it unshallow main and
// send its tree; have lines were acknowledged for any object; deepen-not
// resolved any ref). The fetch is planned in the server (planFetch) and
// only then written:
//
//   - wants (by id or want-ref) must be in the closure; any object of it
//     may be wanted (an older commit, a blob a partial clone lacks), as
//     git's uploadpack.allowReachableSHA1InWant allows;
//   - only haves that are commits of the closure are acknowledged; ready
//     is said as upload-pack says it (every want reaches a common commit);
//   - the client's shallow lines outside the closure are ignored, as git
//     ignores ones it does not hold; deepen, deepen-relative, deepen-since
//     and deepen-not are computed as upload-pack computes them, over the
//     closure's commits only, and deepen-not resolves only the install's
//     two refs;
//   - filters blob:none and blob:limit=N are served, others refused;
//   - the objects to send are walked from the wanted commits down to the
//     common ones (newest first, as git's revision walk), less what the
//     edges' trees hold, and git pack-objects is given exactly that list
//     by id: no revision walk of its own, no thin pack.
//
// So an object outside the closure and one that does not exist get the
// same answer ("not our ref", no ACK, "ambiguous deepen-not"): no
// request line can widen what is read, and none can tell what is there.
// The same closure bounds a push (closureSource): an object it names
// without bringing, or a thin pack's delta base, must be in it, so a
// status cannot copy an object it could not read. TestIsolationProperty
// drives the server with random fetch and push requests signed by one
// install and checks both halves: no object outside its closure in any
// answer, and every answer the same as that of a repository holding that
// install's refs and nothing else.
//
// A closure is found lazily, as far as a question needs: an agent's
// fetch (want its new tip, have the last) reads the two tips, the have,
// and the trees that changed. A question about an object outside it reads
// the install's whole history once, bounded (maxClosureObjects). Planning
// and packing run in-process and in one git pack-objects, where
// upload-pack ran two processes: 3.5 ms of CPU per fetch of an install's
// state, 6.1 ms with upload-pack, on the project's two cores under the
// same load (BenchmarkFetch).
//
// # Status pushes
//
// A push (git receive-pack's protocol, version 0, over smart HTTP) is
// taken without starting a process:
//
//  1. the command list is read and checked against the install and the
//     ref table: its own status ref, no delete, old is the current tip;
//  2. the pack, whole in memory, is read by go-git's pack parser into a
//     quarantine (deltas resolved; a thin pack's bases read from the
//     repository). A pack over 8 MiB, over 50,000 objects or over 32 MiB
//     once inflated is refused ("push too large") before the parser
//     inflates it: declared sizes and delta targets are summed first;
//  3. every new commit, from new back to old, is checked (checkPush):
//     signed by the install's key in force (main's agentKey, or the key
//     the install handed over to: see "Install key rotation"),
//     Nuon-Install trailer, one parent, fast-forward; then git's connectivity check: each commit's tree and
//     everything a pushed tree names is pushed or in the install's
//     closure, with its type (a thin pack's delta bases too: merely
//     present in the repository does not count);
//  4. the objects are written as loose files (temporary file, rename) and
//     the ref with git's lock-file protocol (ref.lock, rename), synced as
//     the repository's core.fsync says, as git would: git's default syncs
//     neither, and an accepted push then survives the server's end; with
//     core.fsync=committed it survives the machine's too;
//  5. the ref table moves and git's report-status answers ("ok", or "ng"
//     with the reason, on the side-band when asked).
//
// One install's pushes run one at a time; different installs' run side by
// side, at most 8 per core holding their pack in memory. The objects a
// push names but does not bring (a thin pack's delta bases, trees it did
// not change) are read through one git cat-file --batch-command that
// lives as long as the server: git finds the packs git gc writes and
// drops, which an in-process reader of the pack folder would have to
// track. A push from the agent brings everything but its parent and
// reads nothing there. git receive-pack is not used: its chain of
// processes (receive-pack, unpack-objects, rev-list, a pre-receive hook
// and its cat-file) cost 30-40 ms of CPU per push.
//
// # Install key rotation
//
// An install rotates its own agent key without anyone reaching into its
// account: the agent makes a new ed25519 key and writes a status commit,
// signed by the key in force, with two trailers (the hand-over record):
//
//	Nuon-Key-Handover: ssh-ed25519 AAAA… (the new key)
//	Nuon-Key-Retired: ssh-ed25519 AAAA… (the key signing this commit)
//
// and signs every commit after it with the new key (the hand-over and the
// first commit of the new key may come in one push). The push check
// (checkPushRotating, handover.go) judges the new commits oldest first,
// each by the key in force after the hand-overs before it, and refuses a
// hand-over whose Retired key is not the key in force, whose new key the
// install used before (a replay, or a rotation back), or whose new key is
// main's agentKey or key in force of another install. Once the push is
// written the server takes the new key for that install's requests and
// pushes, and the old key is refused: a request signed by it gets 401,
// a status signed by it is "not trusted".
//
// Main need not change for the rotation to take effect: the hand-over is
// accepted because the key in force signed it. The key table (keys.go)
// keeps each install's hand-overs beside main's keys; after a restart it
// reads them back from the install's status history (only checked pushes
// reach a status ref), once per install and process. A status history it
// cannot read gives the install no key until it can, never the old one.
// An operator records the rotation on main by committing the new key as
// agentKey in installs/<id>.yaml (a normal reviewed change); the server
// reads main naming any key of the hand-over chain (the old or the new)
// as "the chain stands" and keeps the newest key. Main naming a key
// outside the chain is an operator re-keying the install (after a
// handed-over key leaked, say), and main's key wins over the hand-overs.
//
// Verifiers of status history (nuon status, the fleet) judge each status
// commit by the key in force where it sits: the commits before a
// hand-over by the old key, the hand-over itself by the old key, every
// commit after it by the new key only.
//
// # Archived installs
//
// nuon install delete ends with its archive phase (package lifecycle):
// installs/<id>.yaml leaves main, then one atomic update copies the
// install's desired and status refs under refs/nuon/archive/<id>/
// and deletes them, on the git host the server follows or, without an
// upstream, in the server's own repository. Each deletion of an id is a
// generation of its archive (schemas.ArchiveGenRef): the first at
// refs/nuon/archive/<id>/installs and /status, the n-th, of an install
// created again under the id, at refs/nuon/archive/<id>/<n>/. The server
// reads only the newest generation, the current one (parseArchives), and
// never writes an earlier one. It learns of an archive from the archive
// refs themselves: each check of main fetches refs/nuon/archive/* with
// main, and an install that has archive refs and is no longer on main is
// archived, unless the refs the server holds for it are of an install
// created since the current generation (below). The step before the
// render (followArchives) retires every archived install the server still
// holds refs of, under that install's push lock and the mirror's:
//
//  1. each live ref is compared with the current generation's: when one
//     contains the other, the newer is kept (a status the server accepted before the
//     archive and mirrored after it, or accepted after the archive read the
//     refs, moves the archive forward); when they diverged (the archive
//     rewritten by hand) the ref stays live, here and upstream, and the
//     divergence is logged: folding it in would need a forced update that
//     drops the archive's history;
//  2. with an upstream, one atomic push, every ref leased at the value
//     the upstream has (git ls-remote just before): the archive moves
//     forward where it must, and the live refs go where the archive holds
//     their commits; a live ref upstream that the archive does not hold
//     stays there. Nothing is deleted that the archive lacks, so every
//     status an agent pushed ends up under the archive or still upstream;
//  3. the same moves in the repository, one git update-ref transaction
//     compared with what was read, and the refs leave the ref table and
//     the mirror's queue.
//
// A failed step changes nothing here, is logged and counted
// (nuon_server_archived_installs_retired_total) and runs again at the
// next check of main; meanwhile the mirror holds those refs back (a
// negative refspec on a whole-namespace push). After a restart the whole
// namespace goes upstream only once the archive step has run, so an
// install archived while the server was down is not pushed back. An
// archived install's agent is refused with "install archived" (its key
// left main with it; a push that was authenticated just before is refused
// under its push lock), on replicas too: they fetch the archive refs with
// the rest. An install created again under the same id is on main, so it
// is not archived. When it is deleted again, main lacks it before its
// refs move, and for that moment the newest generation is the earlier
// install's: its refs are then taken for a new install, not archived
// (neither retired into that generation nor refused as archived), when
// its desired ref holds commits the generation's lacks (rendered since)
// and its status is not on the generation's status history (dropRecreated:
// a git merge-base or two, only for such an install). Once the archive
// phase writes their own generation, they are retired into it. Without an upstream, the server sees the archive at its
// next check of main (PollInterval, or at once on /hooks/main); a status
// it accepts before that goes under the archive too. Each check of main
// lists refs/nuon/archive/ once (one git for-each-ref: 10-20 ms of CPU
// with 10,000 archived installs, packed, on the project's machine); the
// rest runs only for an archived install whose refs the server still
// holds, a few git processes once; at every check, and logged each time,
// while one of its refs and the archive have diverged (kept live).
//
// Why the archive refs and not main: the archive phase removes the
// install from main before it moves the refs, in a second push. A server
// that dropped an install's refs (and deleted them upstream) on a render of
// a main without it would race that second push: the archive's compare
// and swap would fail, and a re-run would find no ref left to archive;
// and an install removed from main by hand, not archived, keeps its refs
// as the renderer documents. The archive refs say that the history was
// kept and where, which is what the server must know before it lets go of
// anything. The render itself (publish.Render) is unchanged.
//
// # Measured
//
// On the project's 2-core machine with nothing else running (load average
// 1–3; BENCHMARKS.md has the commands), the load generator or the agents
// sharing the two cores with the server, before issue 18's limits, body
// signatures and closure (BENCHMARKS.md, "Isolation by construction", has
// the figures after, per operation: 12–14 µs more per poll, the same per
// push):
//
//	                          1,000 installs      100,000 installs
//	idle polls/s (p99)        9,163 (10.8 ms)     8,771 (11.8 ms)
//	status updates/s (p99)    942 (1.6 s)         896 (1.8 s)
//	lost, verified            0, all 56,882       0, all 54,198
//
// The figures below were taken while other builds ran, and explain where
// the CPU goes.
//
// On the project's 2-core machine while other builds ran (load average
// about 20, so wall-clock rates are far below what the cores give; CPU
// time per operation is the steadier figure), `make bench-server`:
//
//	                          1,000 installs      100,000 installs
//	poll (ls-refs), wire      704 B in, 312 B out 704 B in, 312 B out
//	fetch of own state        1,004 B, 4.8 ms CPU 1,028 B, 4.5 ms CPU
//	status push, wire         1,298 B in, 219 out 1,297 B in, 223 out
//
// Idle polls are measured against the nuon server binary itself
// (BenchmarkServerPolls in cmd/nuon, part of `make bench-server`,
// NUON_BENCH_POLL_SECONDS=30): 32 workers, each on its own keep-alive
// connection with the agent's client, poll 1,024 installs in turn; the
// server's CPU is read from /proc/<pid>/stat, the generator's apart, both
// on the same two cores. With load average 12–15 from other builds:
//
//	                          1,000 installs      100,000 installs
//	server CPU per poll       99 µs               98 µs
//	generator CPU per poll    107 µs              104 µs
//	wire per poll             704 B in, 312 B out 704 B in, 312 B out
//	polls/s (p99)             3,622 (68 ms)       4,570 (39 ms)
//	server peak RSS           79 MB               153 MB
//
// Server and generator together cost about 205 µs of CPU per poll, about
// 9,500 polls/s on two idle cores; the server alone would answer about
// 20,000. Of the server's 100 µs (perf on the running binary), about 60 %
// is the ed25519 check of the request's signature, which every poll must
// pass (a verifier that keeps each install's key decompressed would save
// only about 3 % of it, measured with filippo.io/edwards25519); net/http
// about 15 µs; the handler itself (BenchmarkPollHandler: the request's
// parsing, the key lookup, the answer from the ref table) about 8 µs and
// 66 allocations. The binary before the handler and the verifier were
// trimmed, in the same conditions: 105 and 110 µs per poll, 102 and 178 MB
// peak. A poll's bytes do not depend on the fleet's size. At the issue's
// 5,000 polls/s (NUON_BENCH_POLL_RATE=5000, 15 s, load average 6.5 from
// other builds) it kept 4,903 and 4,989 polls/s at 1,000 and 100,000
// installs, p99 263 and 539 ms: at that load the two cores are about full.
// Since request signatures cover the body and are remembered against
// replays, BenchmarkPollHandler's poll costs 5 to 8 µs more CPU (the body's
// SHA-256, the replay cache: 77 and 76 µs against 69 and 72 µs, back to
// back at load average 13) in 46 allocations instead of 66.
//
// Idle keep-alive connections cost the server memory (MaxConns bounds
// how many, see Limits): with 8,000 held open
// (NUON_BENCH_POLL_IDLE=8000) about 20 KB each once the garbage collector
// shrank their goroutines' stacks (8 KB of stack, the rest mostly
// net/http's read and write buffers), 23–30 KB just after they were
// opened: a fleet of 100,000 agents that keep their connection between
// polls holds about 2 GB of the server's memory.
//
// Status write-back, BenchmarkStatusWriteBack (1,000 agents, each pushing
// signed status commits one after another for 60 s with the agent's own
// client, in the benchmark's process), load average 11–14 from other
// builds on the two cores:
//
//	                          1,000 installs      100,000 installs
//	updates/s                 204                 135
//	CPU per update            2.05 ms             2.47 ms
//	p50 / p99 latency         4.2 s / 12.1 s      7.3 s / 10.7 s
//	lost, errors              0, 0                0, 0
//	commits verified          12,553 (all)        8,657 (all)
//
// The CPU is the server's and the 1,000 clients' together. The profile
// puts the server's share at about 0.95 ms per update: reading and
// checking 0.3 ms, writing 0.6 ms, of which creating the four files
// (three loose objects, the ref lock) is 0.5 ms, ten times what it costs
// on a quiet disk; the clients' at 0.6 ms; the rest is garbage collection.
// The process got a third to half of one core from the loaded machine, so
// the rates are what that gives; two idle cores give 2 / 2.1 ms, about
// 950 updates/s with the clients, the server alone about 1,800. The
// latency is the queue of a closed loop: 1,000 agents over 200 updates/s
// is 5 s each. The chain of processes it replaced (git receive-pack,
// unpack-objects, rev-list, a pre-receive hook binary and its cat-file)
// cost 30–40 ms of CPU per push: about 10 updates/s on the same machine.
// Nothing of it grows with the fleet (the two columns differ by the load
// of the moment): the ref table answers the old tip, and an agent's push
// reads nothing of the repository.
//
// # Fleet view
//
// With a ViewToken the server serves the vendor's operators HTML pages on
// /fleet (html/template, embedded templates and CSS, no JavaScript). The
// page answers what a release manager asks first, then lists installs:
//
//   - a summary: installs in each state, failing components, which
//     versions of each component run on how many installs, and how many
//     are not in sync, drifted (not corrected), corrected or unverified;
//     every count links to the installs behind it;
//   - a list of at most 100 installs a page (?page=), problems first
//     (failing, Unreachable, Stale, unverified, drifted, Held and
//     Waiting, busy, behind, Unreported, Ready; then by id) or by id
//     (?sort=id), searched by install id prefix or label (?q=acme,
//     ?q=region=eu) and filtered by state, channel, component, the
//     version it runs and its phase (?state= ?channel= ?component=
//     ?version= ?phase=
//     ?is=out-of-sync|drifted|corrected|unverified|awaiting-approval).
//     Every filter is a query parameter, so a list is a link to share;
//   - /fleet/rollouts and /fleet/rollouts/<channel>: each channel's
//     staged rollout (package rollout) — its pins, phase, waves and how
//     the open one stands, the evidence and author of each decision, a
//     halt's failing installs and their errors; lists stop at 50
//     installs and say how many more.
//
// The words are `nuon status`'s (package fleet): STATE is the install's
// phase, Held or Waiting while it defers a change for its customer,
// Stale only while its desired state is past its signed expiry,
// Unreachable once its heartbeat is late (its last signed contact, see
// Liveness), Unreported before its first
// status; each comes with its reason (fleet.Install.Reason). Synced is
// the CLI's SYNCED, with the generation reported of the one rendered.
// Drift reads "drift 2" or "drift 1 corrected". A status older than
// ViewStaleAfter from an agent that announces no heartbeat is marked
// quiet (an agent that announces one turns Unreachable instead): one
// word per meaning.
//
// /fleet/installs/<id> shows one install whole: its reason, labels,
// every component, the plans that wait for approval (hash, summary, the
// redacted diff and the nuon approve command line), the audit log
// (status commits: when, signed by whom, verified or not) and the
// rendered diff of each generation.
//
// What a page costs does not grow with the fleet. The view keeps an
// index: each install read once from its refs (package fleet's rows),
// the summary's counts, and two orders of the installs (by id, problems
// first). When the ref table moves, the view takes from its change log
// the refs set since it last looked and re-reads those installs alone;
// each moves the counts and orders by itself (removed, then added). A
// heartbeat turning late is an event too: a heap of deadlines moves
// those installs to Unreachable as time passes them. A new main
// re-checks the keys and labels of the installs whose file on main it
// added, changed or removed. Only a replica's refresh, or a view further
// behind than the log, walks every ref again, re-reading the installs
// whose refs or key changed. A page then
// copies the counts, takes 100 entries from an order, or walks the order
// comparing interned symbols when it filters (an id prefix walks only
// its run of ids). With 100,000 installs every page is under 100 KB and
// 30 ms, a page after a status push 10 ms (BENCHMARKS.md, "Fleet view at
// 100,000 installs"). The index is built in the background when the
// server starts (58 s at 100,000 installs on a loaded 2-core machine,
// most of it verifying status signatures); until then /fleet answers 503
// with how many installs are read so far and the counts by state. It is
// saved to nuon-fleet-index.gob in Dir, each install keyed by its desired
// and status commits and its key, so a restart reads and verifies again
// only the installs that moved (12 s at 100,000). Like nuon-liveness.json
// the file is the server's own state: whoever can write Dir can already
// change what the server serves.
//
// The rollout controller (rollout.go) assigns waves from each install's
// channel and labels. It reads no install file while no channel declares
// a rollout; once one does, it reads main's install files once, then
// only those whose entry of installs/ changed. What it took of each file
// it accepted is kept by blob in nuon-install-facts.bin in Dir (versioned,
// checksummed, written atomically; a file that fails to decode is
// ignored and rebuilt), so a restart parses only blobs it has not seen:
// 4.6 s instead of 107 s at 1,000,000 installs.
//
// The pages need the operators' token (a bearer token, or the HttpOnly
// session cookie /fleet/login sets); an install's request signature never
// opens them. Status is redacted by the agents before it is committed, so
// no secret reaches the page. Rows clip long errors; the install's page
// shows them whole.
//
// # Observability
//
// /metrics (Prometheus): renders (count, duration, installs changed), main
// polls and agent polls by result, fetches, pushes by result and their
// duration, refusals by a fixed set of reasons (archived among them),
// upstream mirror pushes, archived installs retired,
// installs by state, installs whose status is stale and a histogram of
// status age over the fleet (never a series per install), Go and build
// info. The fleet series come from the fleet view's index, brought up to
// what moved: a scrape reads no install's state from git. A server
// without a view token builds that index in the background on the first
// scrape (never inside one); until it is built the fleet series are left
// out and nuon_server_fleet_index_ready is 0. /healthz answers while the process serves; /readyz answers 200
// once main was checked since start (on a read replica: once its mirror
// was first refreshed from the writer; it stays ready while the writer is
// down, serving its mirror as it is, and
// nuon_server_replica_last_refresh_timestamp_seconds says how old that is).
//
// # Liveness
//
// An install's signed requests are its heartbeat: the server records each
// install's last signed contact (time, and poll or push) in memory, with
// no lock on the poll path (liveness.go), and the fleet view, the metrics
// (nuon_server_contact_age_seconds, nuon_server_installs_unreachable) and
// `nuon status --server` (GET /operator/liveness, the operator's key) judge
// Unreachable from it: not heard from for twice the heartbeat the status
// announces. Agents that talk to the server write no heartbeat commits,
// so an idle install adds nothing to the repository. Replicas send the
// writer what they saw and take back the writer's, every PollInterval
// (POST /replica/liveness, the replica token): the writer holds the
// fleet's liveness, and a replica too, a poll interval behind. The table
// is saved to nuon-liveness.json every minute and at Close, and read at
// start, so a restart does not turn the fleet Unreachable.
//
// # Repository maintenance
//
// Every MaintenanceInterval (1h) the server repacks its repository
// itself, with git's own incremental tools at the lowest priority
// (maintenance.go): geometric repack with a multi-pack index, a split
// commit-graph, packed refs. Polls, fetches and pushes go on beside it.
//
// # Read replicas
//
// One writer (Mode ModeWriter) owns the repository: it renders, accepts
// status pushes and mirrors upstream. With a ReplicaToken it also serves
// its whole repository read-only on /replica/ (git upload-pack) and
// /replica/version (boot id, ref table version, main), to replicas only.
// A replica (ModeReplica) keeps Dir a mirror: every PollInterval, after
// each push it forwarded and on /hooks/main it asks the writer's version
// and, when it moved, asks /replica/changes which refs moved since the
// version it holds (the writer's ref table logs the last 16,384 moves,
// and names main and the few refs outside the table). It fetches only
// those refs' new tips, by id, in one protocol v2 request with main and
// their old tips as haves, so a one-install change brings that install's
// few objects, not main's tree of a million entries; it checks that the
// mirror then holds everything the new tips reach by comparing each new
// tree with the old tip's, descending only where they differ
// (replicaConnected), where git fetch read the commit of every one of the
// mirror's refs before it negotiated and again in its connectivity check
// (about 40 s at 1,000,000 installs for one install's change); and sets
// them, deletions included, in one update-ref transaction checked against
// each old tip, and in its ref table; then it reloads install keys and
// archived installs. A mirror without main (a replica's first start)
// lets git fetch the refs by name instead. At start,
// after a writer restart, or when the log no longer reaches back, it
// compares every ref once. Polls and fetches are answered from the mirror
// exactly as on the writer. A status push is authenticated on the replica
// and then forwarded unchanged to the writer, which checks the install's
// request signature again (it covers method, path and body, not the host),
// with its own cache of signatures seen, and checks the push: a replica holds no key and cannot push what the
// install could not. With the writer down, replicas keep answering
// polls and fetches from their mirror and answer pushes 502; agents keep
// their applied state and retry with backoff.
//
// # Following main
//
// Run checks main every PollInterval and when /hooks/main is posted: with an
// Upstream it first fetches main (with the operators' requests and the
// archive) from it, then retires archived installs (see Archived
// installs). The fetch goes into a staging repository inside Dir
// (nuon-upstream.git) that holds only those refs, and the new objects are
// copied into Dir as one pack before the refs move there: git fetch into
// Dir itself, which holds two refs per install, spent some 2.5 s at
// 100,000 installs negotiating and checking connectivity against all of
// them. From a push to the upstream's main until the agent's desired ref
// moved takes 52 ms with the sample tenant and 0.52 s at 100,000 installs,
// of which the upstream's own git makes its pack some 0.18 s
// (BenchmarkRenderOnChange). A private upstream's credentials
// (UpstreamAuth: a token, a user name and password, or an SSH key with its
// known_hosts; package gitauth, the same flags as every command) reach
// git through its environment only (gitauth.Auth.Env), never its argv; an
// http(s) Upstream with user information in it is refused, and logs name
// the upstream without it. A fetch or push the upstream refuses fails with
// an error that names the upstream and where the credentials came from. A new main is rendered exactly as
// `nuon render` does (package publish), the table is updated, the install
// keys are re-read lazily from the new main (an install added on main can
// authenticate at once), and the refs that moved are pushed upstream
// (atomic, fast-forward only); accepted status refs are pushed upstream in
// batches every MirrorDelay. The renders share one renderer.Cache, and a
// rendering server keeps its repository with core.looseCompression 0
// unless the operator set it (ConfigureRepo, repoConfig): a change to
// main arrives loose, and the render reads main's installs/ tree whole,
// which stored is a copy where zlib took some 10 ms at 100,000 installs.
// A one-install change renders in some 35 ms there (renderer's
// BenchmarkRerender).
package server

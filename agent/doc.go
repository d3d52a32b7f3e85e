// Package agent is the install agent: it serves one install from inside
// the customer's account, with one outbound connection to the tenant's git
// repository.
//
// # The loop
//
// Reconcile runs one pass as an ordered list of steps (loop.go), one file
// each (step_*.go). Each step returns an outcome the loop branches on:
// proceed to the next step, or end the pass's work as settled (nothing
// due), refused (recorded; not tried again until the ref moves) or stale
// (recorded; nothing applied until a fresh commit arrives); an error ends
// it too and Run backs off. Whatever ended the pass, the record is then
// written and pushed.
//
//  1. poll: read refs/heads/nuon/installs/<id> and refs/heads/nuon/status/<id>
//     in one request (git protocol v2 ls-refs over HTTPS or SSH; see Remote).
//  2. status: what was applied is the local status commit. A remote status
//     commit the local history lacks is checked (see Trust in the status
//     ref).
//  3. recover: finish what a killed agent left (see Crash safety).
//  4. expiry: the accepted desired commit's signed expiry has passed: the
//     status turns Stale, once, even though the ref never moves.
//  5. fetch: the desired commit's objects only, unless the ref did not move
//     and nothing is due (settled).
//  6. verify: Check, the one function `nuon verify` calls too. The commit
//     must be signed by a key of the trust file, name this install in its
//     trailers and in install.json, not be older than the generation
//     already accepted, and not be past its Nuon-Expires time. A refusal
//     or an expired commit is recorded in the status; nothing is applied.
//  7. apply: reconciler.NewPlan orders the components; schedule runs each
//     after its dependencies, at most Config.Concurrency at once. A
//     component's inputs are resolved from the outputs of the components it
//     depends on and its resolved spec hashed: an unchanged hash runs no
//     job. Otherwise its artifacts are verified and synced (Config.Sync) and
//     its job runs as its own process (Config.Runner). Without a Syncer
//     artifacts fail closed: the component fails with ErrNoArtifactKey,
//     unless Config.InsecureSkipArtifactVerification, and status.json's
//     artifacts field says which. A failure blocks the component's
//     dependents, not its siblings, and is retried on its own schedule (4
//     intervals, doubling while it keeps failing, up to MaxBackoff).
//  8. write: a commit signed with the install's key on the local status
//     ref: status.json, applied/<component>.json (the resolved spec of each
//     component's last job) and jobs/<id>.json (the manifests of the jobs
//     it records, a recovered one included), when the record changed.
//  9. push: to refs/heads/nuon/status/<id>, the only ref the agent writes,
//     whenever the remote lacks the local status, even on an idle pass.
//
// A new kind of work (a log request, a drift check, a heartbeat) is a new
// step in that list with its own outcome, not a special case in another.
//
// Run repeats Reconcile every Config.Interval, jittered, backing off
// exponentially while a pass fails; the install keeps running its last
// applied state meanwhile.
//
// # Trust in the status ref
//
// The status ref is the agent's memory of what it applied and the
// baseline of the rollback check, so it is trusted only as far as the
// install's own key (Config.Key) signed it. A remote tip signed by that key
// that continues the local history (any, for a fresh workdir) is adopted.
// Anything else is forged: it is logged, kept locally under
// refs/nuon/forged/<id>/<commit>, named in status.json (forged) and in the
// next status commit's message ("Replaced forged status commit X: not
// signed by this install's key"), and replaced by that commit: a merge
// whose first parent is the agent's own last verified status and whose
// second parent is the forged tip. The push is therefore a fast-forward,
// accepted by hosts (and the tenant server) that refuse force pushes, and
// the forged commit stays in the ref's history for audit. A fresh workdir
// continues from the install's own commit with the highest generation
// behind a forged tip (VerifyStatus walks at most 1,000 commits), so the
// rollback check never uses a generation the install did not sign. What
// it cannot know: a fresh workdir shown an older commit of its own (the
// ref reset to it) takes that older generation as its baseline; keep the
// workdir on a persistent volume.
//
// # Freshness
//
// A desired commit may carry Nuon-Expires (schemas.TrailerExpires), under
// its signature. Past it, the agent keeps running what it applied, applies
// nothing expired, and reports stale: true with the expiry in status.json
// (`nuon status` shows the install as Stale). A fresh commit ends it. The
// clock is Config.Now.
//
// # Crash safety
//
// Before a job starts, its manifest and resolved spec are journalled in
// WORKDIR/pending/<job>.json; the entry is removed only once a local status
// commit records the job's outcome. A job process holds a lock on its job
// directory for its whole life, even when the agent that started it is
// gone. After a restart, recover waits for each journalled job's lock, then
// records its result if it finished, or lets the plan run it again if it
// did not. So a killed agent loses no status and never runs a finished job
// twice, and a status committed locally but not pushed is pushed on the
// next pass.
//
// # Secrets
//
// Values of NUON_SECRET_* variables resolve ${secrets.NAME} inside jobs.
// Package internal/redact replaces them, in every spelling a tool prints
// them in, with [redacted] in everything the agent commits (status.json,
// applied specs, job manifests and the commit message: git history is
// permanent), logs, reports and returns; the job process does the same for
// its log and result before they reach the agent.
package agent

// Package agent is the install agent: it serves one install from inside
// the customer's account, with one outbound connection to the tenant's git
// repository.
//
// # The loop
//
// Reconcile runs one pass as ordered steps:
//
//  1. poll: read refs/heads/nuon/installs/<id> and refs/heads/nuon/status/<id>
//     in one request (git protocol v2 ls-refs over HTTP; see Remote). If the
//     desired ref did not move and nothing is due, stop here.
//  2. loadStatus: what was applied is the local status commit (a new
//     workdir adopts the remote one).
//  3. recover: finish what a killed agent left (see Crash safety).
//  4. fetch: the desired commit's objects only.
//  5. verify: the commit must be signed by a key of the trust file, name
//     this install in its trailers and in install.json, and not be older
//     than the generation already accepted. A refusal is recorded in the
//     status; nothing is applied.
//  6. apply: reconciler.NewPlan orders the components; each runs after its
//     dependencies, at most Config.Concurrency at once. A component's inputs
//     are resolved from the outputs of the components it depends on and its
//     resolved spec hashed: an unchanged hash runs no job. Otherwise its
//     artifacts are verified and synced (Config.Sync) and its job runs as
//     its own process (Config.Runner). Without a Syncer artifacts fail
//     closed: the component fails with ErrNoArtifactKey, unless
//     Config.InsecureSkipArtifactVerification, and status.json's artifacts
//     field says which. A failure blocks the component's dependents, not
//     its siblings.
//  7. writeStatus: a commit signed with the install's key on the local status
//     ref: status.json, applied/<component>.json (the resolved spec of each
//     component's last job) and jobs/<id>.json (the manifests this pass ran).
//  8. push: to refs/heads/nuon/status/<id>, the only ref the agent writes,
//     whenever the remote lacks the local status, even on an idle pass.
//
// Run repeats Reconcile every Config.Interval, jittered, backing off
// exponentially while the remote fails; the install keeps running its last
// applied state meanwhile.
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
// Values of NUON_SECRET_* variables resolve ${secrets.NAME} inside jobs and
// are replaced by [redacted] in anything the agent commits: git history is
// permanent.
package agent

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
//  7. customer: the customer's policy (Config.CustomerPolicy, package
//     policy) is read again and asked whether a change may be applied
//     now. Outside its windows or under its hold nothing is applied and
//     the status records the change as deferred (see The customer's
//     rules).
//  8. apply: reconciler.NewPlan orders the components; schedule runs each
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
//  9. write: a commit signed with the install's key on the local status
//     ref: status.json, applied/<component>.json (the resolved spec of each
//     component's last job), jobs/<id>.json (the manifests of the jobs it
//     records, a recovered one included) and answers/<request>.txt, when
//     the record changed, and only then: the status history is what
//     happened. The status announces Config.Heartbeat (HeartbeatEvery);
//     the fleet calls an install not heard from for twice that
//     Unreachable. Through nuon server the agent's signed polls are its
//     heartbeat (HeartbeatPolls: nothing written); on a plain git host a
//     beat replaces the one parentless signed commit of
//     refs/heads/nuon/liveness/<id> (HeartbeatRef). Measured: 424 bytes
//     sent per beat, 0 bytes a day kept (BenchmarkHeartbeat), where a
//     heartbeat status commit kept 1.2 KB, 176 KiB per install per day.
//  10. push: to refs/heads/nuon/status/<id>, the only ref the agent writes
//     but its liveness ref, whenever the remote lacks the local status,
//     even on an idle pass; then a beat that is due (step_heartbeat.go).
//
// Between steps 8 and 9, unless a step failed, the pass operates the
// install between renders, whatever the desired ref did:
//
//   - drift (step_drift.go): every applied component whose drift mode is
//     not off and whose last check or apply (kept in WORKDIR/drift.json) is
//     older than its schedule gets a read-only drift job, at most
//     Config.DriftConcurrency at once. What differs, per resource, and the
//     component's health go into its status; mode correct re-applies the
//     applied spec once and marks the drift corrected. A check that finds
//     what the status already says changes nothing, so it writes no
//     commit. The install's operations: {drift: false} stops every check;
//     status.json's vetoed says the customer did.
//
//   - answer (step_answer.go): operators' requests that came with the
//     desired state (requests.json) run once each; see package requests.
//     The agent checks the requester's signature against
//     Config.RequestTrust itself, then the install, the deadline, the
//     install's operations settings and the plugin's allow-list; a logs
//     request answers with the end of the component's last job log, a
//     debug request runs as a bounded debug job. The answer, redacted, is
//     answers/<id>.txt in the status tree; status.json's requests records
//     each request's state, so nothing runs twice across restarts.
//
// A new kind of work (a log request, a drift check, a heartbeat) is a new
// step in that list with its own outcome, not a special case in another.
//
// Run repeats Reconcile every Config.Interval, jittered, backing off
// exponentially while a pass fails; the install keeps running its last
// applied state meanwhile.
//
// # The customer's rules
//
// The customer, not the vendor, owns a policy inside the install: a file
// (Config.CustomerPolicy, `nuon agent --customer-policy`; in Kubernetes a
// ConfigMap the customer edits, mounted into the agent) with maintenance
// windows, a hold and whether vendor requests are answered (package
// policy documents the format). Nothing on main can override it. The
// agent reads it again on every pass, so an edit takes effect at the next
// poll, and asks policy.Decide about now (Config.Now):
//
//   - Allowed: the pass goes on to apply, as without a policy.
//   - Not allowed: nothing is applied: no component change, no sandbox
//     upgrade, no retry of a failed job and no drift correction (drift
//     checks, which change nothing, still run and report; a correction
//     held back runs at the first pass the policy allows, without waiting
//     for the schedule). status.json says deferred: the reason (hold, or
//     window with until, when the next window opens), a message, since
//     when, and the desired commit held back. It is written in one status
//     commit when the deferred state changes, not on every pass; the
//     install's phase stays what its applied components say. An install
//     with nothing to apply is not deferred.
//   - A file that is missing, too large or does not parse holds the
//     install (reason hold, its problems with file:line in the message)
//     and refuses vendor requests: a broken file is never read as "no
//     rules".
//
// Read-only requests (logs, debug commands) are answered while a change
// is deferred, unless the policy says requests: false. `nuon status` shows
// a deferred install as Held or Waiting for window (opens at …), and the
// rollout controller counts it apart from failures.
//
// The customer's own approval: a change of a component the policy's
// requireApproval names (by its name; the sandbox as "sandbox",
// schemas.SandboxComponent), of a kind it lists under changes (none: any
// kind), is applied only once one of the approvers the policy pins (never
// a key the vendor trusts) signed an approval of its hash, in a file
// NAME.approval.json beside the policy (`nuon approve INSTALL COMPONENT
// --plan HASH --customer-policy FILE --key KEY` writes it). Until then
// the component is AwaitingApproval with the hash in its plan record and
// the install deferred (reason customer-approval); nothing is applied. A
// no-op never waits. What the hash binds, by component type:
//
//   - terraform, helm, manifests, and so the sandbox (terraform): the
//     saved plan (step_approve.go); its kinds are the plan's.
//   - image, which has no plan: its apply is the copy of its artifacts,
//     and the hash is the SHA-256 of the canonical JSON of exactly what
//     is copied (the component's name and each artifact's name, source,
//     local reference, digest and media type). Kinds, against the spec
//     last applied: create, an artifact not listed before (all of them on
//     a first apply); update, an artifact listed with another digest;
//     delete, an artifact no longer listed (its copy stays in the
//     registry); never replace. A spec change that moves no digest has no
//     kind and does not wait. Deleting an image component copies and
//     removes nothing and does not wait.
//
// # The sandbox
//
// When nuon.yaml declares a sandbox, the desired state has a terraform
// component named sandbox (schemas.SandboxComponent) that every other
// component depends on: it is applied first, with the same terraform job
// as any component, and a change of its version on the channel is a new
// generation like any other. Its outputs (the contract of
// sandboxes/README.md) are recorded in its status and resolve
// ${install.sandbox.outputs.OUTPUT[.KEY]} in the other components'
// inputs, and in artifact references when the install names no registry
// (the sandbox's registry output stands for it). Unchanged, it runs no job.
//
//   - State: its jobs keep their state where nuon install create applied
//     it, so the agent's first apply adopts what create made and changes
//     nothing: locally in Config.SandboxDir (the install's directory); on
//     AWS in the S3 object the install's sandbox.state names (the stack's
//     bucket, sandbox/terraform.tfstate), which the job carries as its
//     State and the terraform plugin reaches with its s3 backend and the
//     role's credentials below.
//     Until the agent records its own, the outputs.json create left there
//     says which registry the sandbox's module is copied into.
//   - Credentials: an install that names a role (sandbox.role: the stack's
//     maintenance role and the install's ExternalId, in its rendered
//     install.json, never a secret in git) gets each sandbox job run with
//     that role's temporary credentials, assumed from the agent's own
//     identity (Config.AssumeRole, AssumeRoleFrom: stack.AssumeRole) and
//     handed to the job's environment through jobs.EnvRunner, never its
//     manifest. Locally no role is named and none is assumed.
//   - Deletion: the agent never destroys the sandbox. A deleted install
//     (or an app that no longer declares one) drops it from the status;
//     nuon install delete destroys it with the deprovision role once every
//     component is gone.
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
// # Trust in the desired state
//
// An agent given the trust root (Config.TrustRoot, version 1 from nuon
// install create) judges each desired commit by the render role of the
// version in force: the newest the chain reaches from the version it holds
// through the versions the commit carries (trust.InForce), never older,
// never expired. The key must be inside its window and not revoked at the
// commit's time, but never earlier than the time of the commit applied
// last (trust.SignedAt), so a leaked key cannot backdate under an applied
// state. The newest version verified is kept in the workdir (RootFile) and
// outlives a restart. An agent given only an allowed_signers file
// (Config.Trust, deprecated) trusts its keys forever, and says so in its
// log.
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

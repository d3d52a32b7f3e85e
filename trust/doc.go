// Package trust is the trust root: which keys may sign what, for which
// installs, and when; how the root itself changes hands; and how a
// signature is judged against it. It is pure: files in, decisions out,
// time passed in by the caller.
//
// # The root
//
// The root names the keys of every role that signs something an install
// or the server acts on:
//
//	render            rendered desired state (nuon/rendered, nuon/installs/*)
//	vendor-artifacts  the vendor's artifacts
//	builders          build provenance
//	operators         requests to installs (logs, debug)
//	approvers         approvals of plans
//	server            the tenant server (rollout decisions)
//
// and the root role itself: a set of offline ed25519 keys and a threshold
// of them that must sign every version. Every other role has keys (ed25519
// or ECDSA, hardware-backed sk- variants included), a threshold, and for
// each key a validity window [notBefore, notAfter) and a scope. A list of
// revocations (fingerprint, revokedAt, reason) applies across roles: a
// leaked key is leaked everywhere. Install keys stay in installs/<id>.yaml
// and the customer's approval keys stay inside the install (issue 21): the
// root names neither.
//
// A scope is a small set of fields, each of which must match when given
// and matches anything when absent: installLabels (every label with its
// value), channels (the install's channel is one of them) and requestKinds
// (logs, debug, approval, build). A role's scope and a key's own scope
// must both match. A field the scope names but the caller leaves empty
// does not match: an unknown target is refused, never assumed.
//
// # Files
//
// Each version is its own file on main, trust/root/<version>.json (Dir,
// FileName), never edited once signed. One file a version, rather than
// one trust/root.json rewritten in place, because the chain must be
// verifiable from the files alone: an install pinned at version 1 and
// offline for a year needs versions 2, 3, … each as signed, and a tree
// carries them all without walking git history. TUF lays its roots out
// the same way (N.root.json). Load reads them and refuses a file whose
// name and version differ, or a stray file in the directory.
//
// A file is JSON, checked by trust-root.schema.json:
//
//	{
//	  "signed": {
//	    "apiVersion": "nuon.dev/v1", "kind": "TrustRoot",
//	    "version": 2, "expires": "2027-11-26T12:00:00Z",
//	    "root": {"threshold": 2, "keys": [{"name": "root-alice", "key": "ssh-ed25519 AAAA…"}, …]},
//	    "roles": {
//	      "render": {"threshold": 1, "keys": [{"name": "render-2026", "key": "ssh-ed25519 AAAA…",
//	        "notBefore": "2026-10-26T12:00:00Z", "notAfter": "2027-05-26T12:00:00Z"}]},
//	      "operators": {"threshold": 1, "scope": {"requestKinds": ["logs", "debug"]},
//	        "keys": [{"name": "ops-eu", "key": "ssh-ed25519 AAAA…", "scope": {"installLabels": {"region": "eu"}}}]}
//	    },
//	    "revocations": [{"fingerprint": "SHA256:0NPY…", "revokedAt": "2026-11-19T12:00:00Z", "reason": "retired"}]
//	  },
//	  "signatures": [{"keyid": "SHA256:2vHs…", "sig": "-----BEGIN SSH SIGNATURE-----\n…"}]
//	}
//
// testdata/root-1.json is a complete one. Parse checks, beyond the
// schema, what would make the root mean something other than it seems:
// a key listed twice in a role (by name or by key), a threshold above the
// number of keys, a window that ends before it starts, a root key that is
// not ed25519, a key revoked twice, a keyid that does not name the key
// inside its signature, every render key revoked (no install could accept
// a render again). Each problem names the file, the line, the field,
// the key and the rule.
//
// # Canonical form and signatures
//
// A signature covers the RFC 8785 canonical form of "signed" (Canonical):
// members sorted, no whitespace, strings with only the escapes JSON
// requires, numbers as integers (the format has no fractions). So
// indentation, member order or escaping may change without touching a
// signature; the content may not. JSON with a member named twice, text
// that is not UTF-8 or a number that is not an integer within ±2^53-1 is
// refused, since two readers could see different content under one
// signature.
//
// A signature is an SSH signature (ssh-keygen -Y sign, SHA-512) in the
// namespace "nuon-trust-root" (Namespace). Commits are signed in "git" and
// requests in their own namespace, so a root signature can never pass for
// a commit or a request signature, nor the other way round.
//
// # The chain
//
// Verify(prev, next, now) accepts version next after prev, the version
// already trusted, only when:
//
//   - next.version is exactly prev.version+1 (ErrRollback if it is not
//     newer, ErrSkip if it jumps): each step is verified, as TUF requires,
//     so a change of root keys can never be skipped over;
//   - a threshold of prev's root keys signed it (the keys trusted so far
//     agree to the change) and a threshold of next's own root keys did
//     (the new keys accept the role): TUF's rule, ErrThreshold;
//   - each key counts once, however many signatures it made, and a key
//     listed twice is refused at parse time: a threshold counts people;
//   - a signature by a root key that does not verify (changed content,
//     another namespace) refuses the version (ErrBadSignature) rather than
//     being skipped: it means the file was tampered with; a signature by a
//     key that is not a root key of either version is ignored;
//   - a root key revoked in the version that lists it does not count;
//   - next has not expired at now (ErrExpired).
//
// Chain(pinned, versions, now) walks from pinned (version 1, given to an
// agent at install creation, and checked to be signed by a threshold of
// its own keys) to the newest, step by step, and stops with a *StepError
// at the first refused step: nothing past it is trusted. Two different
// files claiming one version are refused (ErrFork). Expiry is checked on
// the newest version only, as in TUF: an install offline for a year must
// still walk through versions that have expired since.
//
// # Judging a signature
//
// Root.Authorize(role, fingerprint, at, target) says whether a key may
// sign for a role at a time, for a target: it is one of the role's keys,
// at is inside its window (notBefore included, notAfter excluded), no
// revocation of it has revokedAt at or before at, and both scopes match.
// Errors wrap ErrNotAuthorized and one reason (ErrUnknownRole,
// ErrUnknownKey, ErrNotYetValid, ErrKeyExpired, ErrRevoked,
// ErrOutOfScope). Root.Meets counts distinct authorized keys against a
// role's threshold.
//
// # Signatures in git
//
// A signature that lives in git (a rendered commit, a request, an
// approval) is judged by the root in force where it sits in history, and
// at the time of its commit. For a rendered commit, the root in force is
// InForce: the newest version the chain reaches from the verifier's own
// (the agent's kept version, or the one it was given) through the
// versions the commit's tree carries (the renderer copies trust/root from
// main into every install's tree). A version the commit carries counts
// only through the chain, signed by a threshold of root keys, so carrying
// one gives the signer nothing the root keys did not sign; older versions
// it carries are ignored, so dropping or replacing newer ones (a rollback)
// changes nothing for a verifier that has seen them. So a routine rotation
// or a later revocation does not invalidate what was signed and applied
// before it: revokedAt separates the signatures made before (still good)
// from those made at or after (refused everywhere).
//
// A commit's time is chosen by whoever signs it, and a leaked key can
// backdate. SignedAt(claimed, floor) therefore judges a signature at its
// claimed time but never earlier than floor, the latest time the verifier
// has already accepted on that line of history (the commit it applied
// last, or the verified parent the new commit builds on). Together with
// the agent's generation rule this is the compromise drill: in one new
// version, revoke the leaked key (revokedAt at or before the leak) and add
// its successor; re-render every install at a higher generation with the
// successor, and each agent, on its next poll,
// applies a commit made after the revocation; from then on its floor is
// past revokedAt, and anything the leaked key signs, however it is dated,
// is judged at or after its revocation and refused.
//
// # What is protected, and what is not
//
//   - Rollback: versions never go backwards (ErrRollback); an old root,
//     replayed, is refused.
//   - Fast-forward: no step is skipped (ErrSkip); a version far ahead
//     signed by stolen keys still needs every step between.
//   - Freeze: a version past its expiry is refused as the newest
//     (ErrExpired); an attacker who withholds new versions can keep an
//     install on an old root only until that root expires, after which
//     the install refuses to act rather than act on stale trust. Expiry is
//     judged by the caller's clock; a verifier with a wrong clock is not
//     protected.
//   - Root keys below threshold: losing fewer than a threshold of root
//     keys changes nothing; the remaining holders sign a version without
//     the lost key. Losing a threshold of one version's root keys loses
//     the root, as in TUF.
//   - Revocation reaches an install with the root that carries it: between
//     a leak and the install's next poll of a root that revokes the key,
//     the leaked key is as good as any (the drill's window).
//   - Artifact signatures carry no time of their own; how the agent
//     decides their time (the signed release record, or a timestamp) is
//     left to the provenance work.
//
// # What uses it
//
// nuon trust (init, add-key, revoke, sign, verify) edits, signs and
// verifies the files on a checkout of main, printing what each change
// lets or stops. The renderer checks that main's versions chain from
// version 1 (a root that does not chain fails the render), warns of an
// expired newest version or a render key it does not authorize, and
// copies every version into each install's tree: a new version gives each
// install exactly one new commit, an unchanged root none. The agent is
// given version 1 once (nuon install create --trust-root, the agent's
// --trust-root or $NUON_TRUST_ROOT), keeps the newest version it verified
// in its workdir (trust-root.json) and judges each desired commit by the
// render role of the version in force (agent.Checks.Root); nuon verify
// --trust-root judges the same way, walking main's versions too. Agents
// given only --trust keep the allowed_signers behaviour, with a
// deprecation warning. In Kubernetes agent mode the version travels in
// the ConfigMap nuon-agent-trust (trust-root.json) and the agent runs
// with --trust-root.
//
// # One place for trust
//
// Before the root, each kind of key had its own file on main:
// trust/requests (operators), trust/approvals (approvers), trust/builds
// (build requesters) and trust/build-agents (build agents); LegacyFiles
// maps each to its role. MainKeys is the one reader of a role's keys on a
// commit of main, used by the server (operators, builds), the renderer
// (requests, approvals) and the build agent (build requests), each through
// trust/maingit over its git store: when main's root (chained from version
// 1) defines the role, its keys valid at the time asked for are the ones,
// written in the form the role's verifier already reads (allowed_signers
// lines named by the key's name; an Approvers file for approvers, a
// revocation folded into notAfter), and the old file is ignored with a
// warning to remove it. Otherwise the old file is read, marked
// Deprecated. A root that does not chain names no key at all. nuon trust
// migrate moves the old files, and an agent's --trust and --vendor-key,
// into the next version as roles, printing what each key lets or stops
// (a key the root revoked, or of a type the root does not take, is left
// out and stops counting once the version is signed).
//
// # Provenance rules
//
// The signed content may carry provenance: sources, per component glob,
// the repositories and ref globs its artifacts may be built from
// (SourcesFor, Allows); builders, per channel, how many distinct builder
// keys must each have signed a provenance of one digest that passes
// (BuildersFor; two independent reproducible builds, one digest). The
// agent's check (agent/sync) uses the root's sources for the component,
// and its own --provenance-source flags only when the root names none;
// two attestations by one builder count once. A channel may not require
// more builders than the builders role has keys (Parse refuses it).
package trust

// Package fleet reads what every install's agent reported: the status
// commit on refs/heads/nuon/status/<id>, checked against the install's own
// key (agentKey in installs/<id>.yaml on main), beside the install's
// desired ref. `nuon status` prints it as a table or JSON; the tenant
// server's fleet view shows the same rows, in the same words.
//
// A status is trusted only when its commit is signed by that install's
// key: a row whose signature does not verify is shown with Verified false
// and the reason, never silently.
//
// # States
//
// Install.State is one word per meaning, decided by Install.At at a given
// time, and Install.Reason says why in the words `nuon status` prints:
//
//   - the agent's phase (Ready, Degraded, Refused) when nothing below
//     applies; a refusal names the commit refused and why;
//   - Held or Waiting while the install defers a change on purpose (its
//     customer's hold, or until its next maintenance window opens): not a
//     failure;
//   - Stale while the agent reports its desired state past its signed
//     expiry, and only then;
//   - Unreachable once the install was not heard from for twice the
//     heartbeat interval the agent announced (Install.LastSeen): neither a
//     status commit nor a signed contact, which is the tenant server's
//     record of its last signed poll or push (Install.Contact, `nuon status
//     --server`) or, on a plain git host, the verified tip of its liveness
//     ref (ReadLiveness): "no signed contact since …" or "no status commit
//     since …".
//
// InSync says whether the agent has reported on the desired ref the
// install has now (SYNCED in the table): an install at generation 1 of 2
// may be Ready and not in sync. A component's drift is either found
// ("drift 2") or corrected ("drift 1 corrected").
package fleet

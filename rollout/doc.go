// Package rollout decides how a change of a channel's pins reaches the
// channel's installs: in ordered waves, each given the change only when
// the waves before it have proven it healthy.
//
// The package declares and assigns waves (`nuon render --dry-run` shows
// them), and decides (Decide) from installs' signed status when the next
// wave opens, halts or rolls back. The tenant server runs the decisions
// (server/rollout.go) and records each as a signed commit on the
// channel's rollout ref; the renderer gives each install the pins that
// ref says (renderer/rollout.go).
//
// # The policy
//
// A channel declares its rollout beside its pins, in channels/<name>.yaml
// (schemas/channel.schema.json):
//
//	components:
//	  api: 2.4.0
//	rollout:
//	  waves:
//	    - name: canary            # the installs labelled ring=canary
//	      selector:
//	        matchLabels: {ring: canary}
//	      bake: 1h
//	    - name: one               # then one more install, by hash
//	      count: 1
//	      bake: 2h
//	    - name: eu-early          # 10 % of the EU installs
//	      selector:
//	        matchExpressions:
//	          - {key: region, operator: In, values: [eu-west-1, eu-central-1]}
//	      percent: 10
//	      bake: 2h
//	    - name: tenth             # 10 % of the channel, by hash
//	      percent: 10
//	      bake: 4h
//	      minHealthy: 5
//	      failureBudget: 1
//	      onFailure: rollback
//	    - name: rest              # everything else
//	      rest: true
//	  deferred:
//	    wait: 24h
//	    then: proceed
//
// Installs carry labels in installs/<id>.yaml (labels: {ring: canary,
// region: eu-west-1}); keys and values are Kubernetes label keys and
// values, and selectors are Kubernetes label selectors (matchLabels and
// matchExpressions with In, NotIn, Exists, DoesNotExist).
//
// Each wave has a selector, a share — count: N installs, percent: P of
// the channel, or rest: true on the last wave — or both, which takes the
// share of the installs the selector matches. Its other fields:
//
//   - bake: how long its installs must run the new version, healthy,
//     before the next wave starts (default 0s);
//   - minHealthy: healthy reports of the new version the wave needs at
//     least, whatever its deferred installs (default 1; a wave with fewer
//     installs than that is an error, as it could never pass);
//   - failureBudget: failed installs the wave tolerates (default 0);
//   - onFailure: halt (no further wave starts) or rollback (also, the
//     wave's installs go back to the last version healthy on them);
//     default halt;
//   - allowEmpty: the selector may match no install of the channel.
//
// deferred says how a wave treats installs held by their customer,
// waiting for a window, unreachable or stale: they count apart from
// failures, and a wave waits for them at most wait (default 24h), then
// proceeds without them (then: proceed, the default; they get the change
// when they come back) or halts (then: halt).
//
// A channel without rollout has one wave, all, of every install: it
// behaves exactly as before rollouts existed.
//
// # Which install is in which wave
//
// Assign puts every install of the channel in exactly one wave, as a pure
// function of the policy and the installs' ids and labels:
//
//  1. Selector waves choose first, in the order declared. An install two
//     selectors match is in the first one's wave: write the narrow ring
//     first and the broad one after, with no NotIn to keep them apart. A
//     selector wave with a share takes that share of the installs it
//     matches and no earlier wave took, in the order of a hash of its
//     own (of the channel, the selector and the id, so that the share
//     waves after it still get their share of these installs); the
//     others may go to later waves only.
//  2. The share waves divide the installs no selector wave took, in the
//     order of Hash(channel, id): a count wave takes the next N; percent
//     waves share out the hash space in order (percent: 1 then percent:
//     10 take the hashes in the first 1 % and the next 10 % of it); rest
//     takes what is left.
//
// A percent wave's size is its share of the installs on average, not
// exactly: exact sizes would move installs to earlier waves as the fleet
// grows. A percent wave that its share leaves empty (a small fleet)
// takes the next install by hash, so that a small fleet's first waves are
// not empty; a count or rest wave with nothing left to take is empty,
// and a rollout skips it.
//
// # Stable under adding installs
//
// Adding installs to a channel never moves an install already on it to
// an earlier wave. Precisely, for installs whose labels did not change:
//
//   - an install in a pure selector wave (no share) stays in it;
//   - an install a percent wave took by its hash stays in it, whatever
//     is added;
//   - an install in a count wave, or taken by a percent wave only to keep
//     it from being empty, may move to a later wave, when added installs
//     hash before it and fill the share; never to an earlier one.
//
// So a canary of count: 1 stays one install, and the install that was the
// canary before may be replaced by a newcomer that hashes first, and then
// moves to a later wave; it never jumps ahead of a wave it was behind.
// TestAssignStableUnderAdding checks this on random fleets.
//
// # Bad input
//
// Structural mistakes (an unknown field, onFailure: retry, percent: 0)
// fail the channel's schema, so every nuon render refuses them. The rest
// are reported by Parse and Assign, which nuon render --dry-run runs (run
// it on every pull request); the rollout controller refuses a policy they
// refuse, and moves nothing on any channel until main is fixed.
//
// Parse reports, each at its file, line and field: shares that do not
// add up (percent waves over 100 %, rest not last, rest after 100 %),
// a wave with two shares or none, selectors Kubernetes would refuse,
// a minHealthy above a count, duplicate wave names. Assign reports: a
// selector that matches no install of the channel (an error, since it is
// most likely a typo in a label; allowEmpty: true says the emptiness is
// expected, as for a region with no installs yet), a selector wave every
// install of which went to earlier waves (overlapping waves: the wave
// could never hold an install), a wave with some installs but fewer than
// its minHealthy, installs in no wave, and, through Fleet, installs on an
// unknown channel.
//
// The controller also refuses to start a rollout to a version that has
// no release record on main (the error names the channel file and the
// component), and whoever reads a rollout ref refuses a commit the tenant
// server's key did not sign (ErrUnsigned): the render fails and nothing
// moves.
//
// # The rollout ref
//
// Each channel with a rollout has a ref, refs/heads/nuon/rollouts/<name>
// (schemas.RolloutRef). Each commit on it is one decision of the
// controller, signed by the tenant server's render key (Commit); its tree
// holds rollout.json (schemas.RolloutState): the from-pins and to-pins,
// the waves opened with their installs, the per-install pins of a
// rollback, the decision, its reason and its evidence — for each install
// the status commit it rests on and its outcome (healthy, failed with
// the failing components' errors, deferred with why, waiting). Whoever
// reads the ref checks the signature first (Read). The server refuses a
// push of the ref from any install key (an install may push its own
// status ref only). `nuon rollout status` shows it.
//
// A render is a pure function of main and the rollout refs (Pins): an
// install of a channel with a rollout state gets, in order, its rollback
// pins if it was rolled back; the to-pins if its wave opened or the
// rollout finished; otherwise the pins it had before (from-pins). An
// install's own versions (installs/<id>.yaml) win over both. A rollout
// ref of a channel that declares no rollout on main is ignored. Each
// install commit a rollout moved says which rollout and decision did.
//
// # Decisions
//
// Decide is a pure function of the policy, the wave assignment, the
// current state, the installs' latest verified statuses and the time:
//
//   - first sight of a channel: a baseline of its pins, nothing moves;
//   - the pins on main differ from the state's to-pins: a new rollout
//     starts, wave 1 (the first non-empty one) opens;
//   - the open wave passes when every install of it not deferred is
//     healthy on the new pins — a status signed by its own key that
//     names its current desired commit, which renders the to-pins, as
//     both desired and applied, the install Ready and every component
//     Applied and, where it reports health, Ready; health reported for an
//     older desired commit never counts — and at least minHealthy are,
//     the bake time has passed since the last of them turned healthy, the
//     failures are within the budget, and the deferred ones, if any, were
//     waited for deferred.wait (then: proceed); the next non-empty wave
//     opens in the same decision, or the rollout finishes;
//   - failures over the budget: halted (onFailure: halt) or rolled back
//     (onFailure: rollback: the wave's installs get their from-pins);
//   - deferred installs past deferred.wait with then: halt: halted.
//
// Deferred (held by the customer, waiting for a window, stale desired
// state, unreachable: no status commit for twice its heartbeat interval,
// a plan waiting for approval) is never failed. A plan of the new version
// that a policy denied or an approver rejected (component Rejected) is an
// answer, not a wait: it counts as failed. TestDecideRandom checks on random fleets and reports
// that no install outside the opened waves has the new pins and that no
// wave passes with a failure past its budget or an install not heard from.
//
// # A new pin while a rollout runs
//
// It supersedes the rollout: a new rollout starts from wave 1 with the
// new pins as to-pins, and each install's from-pins are the pins it had
// under the superseded rollout (the old to-pins for the installs of its
// opened waves, its rollback pins if rolled back, the old from-pins for
// the rest). So a fix pinned after a halt reaches the canary first again,
// and the installs that never got the bad version go straight from the
// old one to the fix.
//
// So a halted or rolled back rollout resumes by a new pin: the fixed
// version (or the old one, to bring the opened waves back) starts its own
// rollout from wave 1.
//
// # Operators: pause, resume, abort
//
// An operator whose key trust/requests on main lists sends a signed
// rollout request (nuon rollout pause|resume|abort CHANNEL; a
// schemas.RolloutRequest in a commit of its own, package requests) to the
// tenant server, which carries it out with Control as a decision on the
// channel's rollout ref. The decision names the operator, the key and the
// request commit (Nuon-Rollout-Request trailer) and keeps the signed
// request, so the ref's log says who moved what and anyone can check the
// signature again.
//
//   - pause (running only): Decide decides nothing on a paused rollout —
//     no wave is judged or opens; the installs of opened waves keep the
//     new pins;
//   - resume (paused only): the rollout runs again from where it stood;
//     its open wave is judged on the statuses it has, including those
//     pushed while it was paused;
//   - abort (running, paused, halted or rolled back): the rollout stops
//     for good, every install keeping the pins it has (rollback pins
//     included). Only a new pin on main starts a new rollout, from
//     wave 1, superseding it as above.
//
// A request not signed by the key of the HTTP request, for a channel with
// no rollout, past its deadline, in the server's future, or carried out
// before (the same request commit on the ref's recent history) is refused
// and nothing moves. A new pin while paused supersedes the paused rollout.
//
// An install added to the channel while a rollout runs is in no opened
// wave: it gets the from-pins until the rollout finishes, then the
// to-pins. A channel that gets its first rollout policy in the same
// commit as a pin change has no rollout state yet: the tenant server,
// before it renders that commit, writes the baseline from the channel's
// pins on the main it rendered before (server/rollout_first.go), so every
// install keeps those and the change rolls out from wave 1. A server that
// starts on such a commit (nothing rendered before it), or a channel new
// on main, baselines main's own pins.
//
// # Cost
//
// The controller (server/rollout.go) reads an install's status only when
// its status ref moves and the install is in an open wave; a push of any
// other install costs a map lookup. An evaluation classifies again only
// the installs whose status changed, in the open wave's Tally, and
// judges the whole wave (Decide) only when the tally cannot rule out a
// decision: its last waiting install reported, a failure went over the
// budget, or a status may have gone stale. So its CPU grows with the
// statuses that changed, not with the wave or the fleet; the fleet
// view's rollout page reads the same tally. When main moves, the
// controller reads again only the install files main changed, then
// assigns the waves from memory (Fleet: some 0.2 s of CPU at 100,000
// installs). A decision renders only the installs whose pins it changes
// (renderer/rollout.go): a start, a wave opened or rolled back, the
// channel's first baseline (none), and a finish (the installs its state
// does not name: those added while it ran).
package rollout

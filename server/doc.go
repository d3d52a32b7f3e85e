// Package server is the tenant server (`nuon server`): the one endpoint every
// install agent talks to. It serves the tenant repository over git smart
// HTTP scoped to the install that signs each request, follows main and
// renders every change, and mirrors rendered and status refs upstream.
//
// # Who may do what
//
// Every request carries a signature made with the install's own SSH key
// (signature.RequestSigner), checked against agentKey in installs/<id>.yaml
// on main (signature.RequestVerifier): no shared secret exists. A request
// that is unsigned, badly signed, signed too long ago or by an install main
// does not know is answered 401 and logged. An authenticated install may
//
//   - read refs/heads/nuon/installs/<id> and refs/heads/nuon/status/<id>
//     and the objects reachable from their tips, nothing else: ls-refs
//     lists only these two, and a fetch whose want is not one of their tips
//     is refused before git runs;
//   - push refs/heads/nuon/status/<id> only, fast-forward only, only
//     commits signed by its own key that name it in their Nuon-Install
//     trailer, one parent each. The command list is checked here; git
//     receive-pack then runs with a pre-receive hook (RunPreReceive, `nuon
//     server pre-receive`) that walks the quarantined new commits and
//     verifies each before the ref moves.
//
// Everything else is refused with a git error message that names nothing
// of another install, and logged with the install, the ref and the reason.
//
// # Cost independent of the fleet
//
// The server keeps a table of every install's two ref tips in memory,
// loaded once at start (one git for-each-ref) and updated by its own
// writes: renders and accepted pushes. A poll (protocol v2 ls-refs) and the
// v2 capability advertisement are answered from it without starting a
// process, in a few hundred bytes; the receive-pack advertisement lists
// only the install's own refs. Pack transfer is git's own upload-pack and
// receive-pack (--stateless-rpc). Nothing else may move install or status
// refs in the repository while the server runs.
//
// # Following main
//
// Run checks main every PollInterval and when /hooks/main is posted: with an
// Upstream it first fetches main from it. A new main is rendered exactly as
// `nuon render` does (package publish), the table is updated, the install
// keys are re-read lazily from the new main (an install added on main can
// authenticate at once), and the refs that moved are pushed upstream
// (atomic, fast-forward only); accepted status refs are pushed upstream in
// batches every MirrorDelay.
package server

// Package server is the tenant server (`nuon server`): the one endpoint every
// install agent talks to. It serves the tenant repository over git smart
// HTTP scoped to the install that signs each request, follows main and
// renders every change, and mirrors rendered and status refs upstream.
//
// # Who may do what
//
// Every request carries a signature made with the install's own SSH key
// (request.Signer), checked against agentKey in installs/<id>.yaml
// on main (request.Verifier): no shared secret exists. A request
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
// # Measured
//
// On the project's 2-core machine while other builds ran (load average
// about 20, so wall-clock rates are far below what the cores give; CPU
// time per operation is the steadier figure), `make bench-server`:
//
//	                          1,000 installs      100,000 installs
//	poll (ls-refs), wire      704 B in, 312 B out 704 B in, 312 B out
//	poll CPU (client+server)  247 µs              219 µs
//	polls/s, 16 pollers       1,325               1,162
//	fetch of own state        1,004 B, 4.8 ms CPU 1,028 B, 4.5 ms CPU
//	status push, wire         1,698 B in, 663 out 1,697 B in, 663 out
//	status push, git+hook CPU 29 ms               43 ms
//
// 220 µs of CPU per poll is about 9,000 polls/s on two idle cores, client
// included. A status push costs a chain of processes (receive-pack,
// unpack-objects, rev-list, the hook and its cat-file): about 30 ms of CPU,
// so one writer on two cores accepts on the order of 60 pushes/s, short of
// 300/s. Without hideRefs and core.alternateRefsPrefixes git read every
// ref of the fleet on each push (189 ms at 100,000 installs). The hook is
// `nuon server pre-receive`, whose Go package initialisation alone takes
// 60–110 ms (jsonschema, go-openapi): a small dedicated hook binary, or a
// check served in-process over a socket, is the next step.
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

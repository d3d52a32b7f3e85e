// Package renderer turns a commit of main into every install's desired
// state and the signed commits that carry it to the installs' agents.
//
// # State
//
// [Install] renders one install from the loaded source: install.json (the
// install-wide part) and components/<name>.json per component, JSON encoded
// one way only (map keys sorted, two-space indents, a final newline). It is
// a pure function: the same source gives the same bytes, so the same main
// gives the same trees, and an install whose tree did not change gets no
// new commit. The tree holds nothing that is not a function of main:
// generation and source commit are trailers of the install's commit.
//
// When nuon.yaml declares a sandbox, it is rendered as one more terraform
// component, components/sandbox.json, first in install.json's order: the
// artifact of its pinned release (the channel's pin, or the install's
// sandbox.version) named after the install's sandbox.name, as the
// module; nuon.yaml's sandbox inputs with the install's sandbox.inputs
// over them and install_id set to the install's id; drift checks off.
// Every other component depends on it. An install whose file names no
// registry gets artifact references that start with the sandbox's
// registry output, ${install.sandbox.outputs.registry.url}/
// ${install.sandbox.outputs.registry.repository_prefix}, which its agent
// resolves; a registry in the install's file wins. A sandbox version bump
// is therefore a new generation like any other. A deleted install renders
// no sandbox: its agent never destroys it (nuon install delete does, with
// the deprovision role).
//
// # Commits and refs
//
// [Render] writes no object itself; it returns them in [Result.Objects]
// with the ref updates, the rendered ref last:
//
//   - refs/heads/nuon/installs/<id>: for each install whose tree changed, a
//     signed commit on top of the previous one, its tree the install's
//     tree, its message trailers Nuon-Install, Nuon-Generation (one more
//     than the previous commit's) and Nuon-Source.
//   - refs/heads/nuon/rendered: one signed commit whose tree holds
//     installs/<id> for every install, the very tree objects of the install
//     refs. It names the changed installs in its trailers.
//
// An install removed from main leaves the rendered tree; its own ref stays
// as it was. A render that changes nothing makes no commit.
//
// # Trusting only what it signed
//
// The renderer believes only commits signed by a key of [Options.Trust]
// (by default its own): an install ref, a rendered ref, or a generation
// trailer that any writer of the tenant repository could have made is
// never taken at its word. Each rendered commit records, in the folder
// issued/<id> of its tree, the last commit the renderer signed for every
// install it ever rendered and that commit's generation: the renderer's own
// signed memory, kept for removed installs too.
//
// An install ref that holds anything but the last commit issued for it (an
// unsigned or foreign commit, a reset to an older signed commit, a deleted
// ref) is reported as [Replaced] and gets a new signed commit whose
// generation is one above the last issued, so an agent that applied that
// generation moves on instead of refusing a replay. The new commit's first
// parent is the last commit issued, its second the commit it replaces: the
// ref moves forward and git history keeps what was there. A rendered ref
// whose tip the renderer did not sign is handled the same way: the render
// continues from the newest rendered commit it signed (first parents, a
// bounded walk) and says so in [Result.Warnings]. A generation that would
// overflow fails that install alone.
//
// # One bad install
//
// Problems confined to one install's file fail that install alone: it is
// reported as [Failed] with its problems in [Result.Problems], keeps its
// previous state and ref, and every other install is rendered. A problem
// in nuon.yaml, a channel or a release concerns every install and fails
// the render, moving no ref.
//
// # Freshness
//
// With a freshness bound in nuon.yaml (schemas.Freshness), every
// per-install commit carries a signed Nuon-Expires trailer, validFor after
// it was signed. A render within renewBefore of an install's expiry signs
// the same tree again with the next generation ([Renewed]), so that an
// agent can tell a ref that is current from one a git host froze. The
// rendered commit records the earliest renewal time (Nuon-Renew-At): a
// render before it reads no install commit for renewal.
//
// # Trusting the previous render
//
// Reading ten thousand install commits costs more than rendering, so a
// render trusts the previous rendered commit when the renderer signed it
// and each install ref holds that install's folder of its tree: the
// rendered commit records, in its Nuon-Install-Refs trailer, a digest of
// every install ref as the render left them. When the refs found do not
// match it (a render stopped between ref updates, or someone moved a
// ref), the render checks every install against its issued record
// instead.
//
// When the previous render is trusted, was made with the same [Format], and
// its source and this one differ only in install files (nuon.yaml,
// channels/ and releases/ are the same), only those installs are read,
// checked and rendered; the others keep their folder of the previous tree.
// [Result.Incremental] says so. An install's state depends on nothing
// else, so the tree is the one a full render makes. Any entry of installs/
// that is not a source file or README.md or .gitkeep (schemas.Classify)
// makes the render a full one, whose load reports it.
//
// # Reading main
//
// [SourceFS] shows main's tree to schemas.Load as it is written, crafted
// entries included (installs/.., a name twice, links, submodules), and
// sizes each blob from its object header: a file over the cap on a source
// file ([Options.MaxFileSize], 1 MiB by default) is refused before it is
// inflated. Every problem names its file: one in an install's own file
// (installs/<id>.yaml too large, say) fails that install alone, any other
// (a crafted entry, installs/a.YAML, nuon.yml) fails the render.
//
// # Scale
//
// A cold render reads, renders and signs every install; what it keeps
// until the objects are written is each install's objects compressed
// (gitobj.Batch.Merge, by the worker that rendered it) and the loaded
// source, whose install files' parsed documents are let go as each is
// checked (schemas.Load). A one-install render reads only that install,
// but still reads the previous installs/ and issued/ trees and every
// install ref, checks their digest, and writes both trees and packed-refs
// again: work that grows with the fleet, at a small cost per install.
// BenchmarkRenderFleet measures both, each render a process of its own,
// beside git fast-import writing the same objects (make bench-fleet; 2
// cores shared with other work, load 10-13; CPU is the steadier figure):
//
//	installs   cold: wall    CPU      peak RSS   fast-import: wall  CPU    one install: wall  CPU     in-process CPU
//	   1,000        0.35 s    0.52 s    40 MB           0.64 s   0.61 s         43 ms     50 ms      23 ms
//	  10,000        4.0 s     4.8 s    156 MB           8.8 s    5.6 s         157 ms    107 ms      69 ms
//	 100,000      171 s      61 s     1.48 GB         279 s     93 s           2.2 s    731 ms     686 ms
//
// What still grows with the fleet: the cold render's memory, most of it
// the compressed objects (2.7 KB an install) and their index, waiting for
// the one pack written at the end; and the one-install render's reading
// and writing of the fleet-wide installs/ and issued/ trees, install refs
// and their digest (about 7 µs an install). Streaming the objects into the
// pack as installs finish, and splitting those trees and the digest into
// shards of the fleet, are the next steps.
package renderer

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
//     installs/<shard>/<id> (schemas.RenderedInstallPath) for every
//     install, the very tree objects of the install refs. It names the
//     changed installs in its trailers, and counts all of them in
//     Nuon-Installs-Rendered.
//
// The rendered tree departs from DESIGN.md's installs/<id>: installs/ and
// issued/ are split into 256 folders named by the first byte of the
// SHA-256 of the id (schemas.Shard), so that a render that changes one
// install of 100,000 writes one folder of some 400 entries and the top
// one, not a folder of 100,000 entries, and the next render reads only
// the shards it needs. Rendered commits of Format 2 and before hold the
// flat layout; the renderer still reads them (schemas.FlatLayout), and the
// next render, a full one since the Format differs, writes the shards.
// No other reader walks the rendered history: agents read their install
// ref, whose tree is the install's folder either way.
//
// An install removed from main leaves the rendered tree; its own ref stays
// as it was. A render that changes nothing makes no commit.
//
// # Trusting only what it signed
//
// The renderer believes only commits signed by a key of [Options.Trust]
// (by default its own): an install ref, a rendered ref, or a generation
// trailer that any writer of the tenant repository could have made is
// never taken at its word. Each rendered commit records, in
// issued/<shard>/<id> of its tree (schemas.IssuedPath), the last commit
// the renderer signed for every install it ever rendered and that
// commit's generation: the renderer's own signed memory, kept for removed
// installs too.
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
// [Result.Incremental] says so, and such a render lists in
// [Result.Installs] only the installs it read ([Result.Total] counts all).
// An install's state depends on nothing else, so the tree is the one a
// full render makes. The two source installs/ trees are compared as bytes,
// entry by entry, and only the entries that differ are read; an install
// of the previous source without a folder (the render failed it) is
// rendered again. An operator's request pending for an install whose
// file did not change still makes the render a full one. Any entry of installs/
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
// A cold render reads, renders and signs every install; each install's
// objects are compressed by the worker that rendered it and, in a batch of
// gitobj.NewSpooledBatch ([Options.Objects], as internal/publish renders),
// written at once to a pack file finished at the end, so that what stays
// in memory is the loaded source and an offset per object. A one-install
// render reads the two source installs/ trees (as bytes, inflated: what
// still grows with the fleet, some 4 MB each at 100,000 installs; a Cache
// keeps the last), the
// install refs as a sorted list (gitrepo.Repo.RefList) for their digest,
// one shard of installs/ and of issued/, and writes those shards, the top
// folders and two refs as ref files of their own (gitrepo.Repo.Apply).
// BenchmarkRenderFleet measures both, each render a process of its own,
// beside git fast-import writing the same objects, and BenchmarkRerender
// the one-install render in-process (make bench-fleet; 2 cores shared with
// other work; CPU is the steadier figure):
//
//	installs   cold: wall    CPU      peak RSS   fast-import: wall  CPU    one install, child: wall  CPU   in-process CPU  BenchmarkRerender CPU
//	   1,000        0.47 s    0.46 s    35 MB           0.87 s   0.81 s          50 ms   40 ms          22 ms          10 ms
//	  10,000        4.4 s     4.3 s     78 MB           7.3 s    6.5 s           75 ms   46 ms          18 ms          18 ms
//	 100,000       54 s      51 s      600 MB          48 s     41 s           185 ms  141 ms         128 ms          81 ms
//
// (load 2-6 on 2 cores; the last column was measured after the binary
// refs digest and the lazy read of packed-refs, the others just before.)
// On a quieter machine (load 1-2), the same code rendered 10,000 installs
// cold in 3.0 s wall, 4.7 s CPU, and 100,000 in 32 s wall, 51 s CPU,
// 585 MB, beside fast-import's 53 s wall and CPU: 10.9 times the CPU of
// 10,000; with GOGC=200, 10.8 times, 825 MB. fast-import's own times
// vary by a quarter from run to run. Before the shards, the spooled pack and the ref
// files, the same sizes took 1.48 GB at 100,000, and a one-install render
// 69 ms of CPU at 10,000 and 686 ms at 100,000. What still grows with the
// fleet: the cold render's CPU (11.8 times from 10,000 to 100,000; a
// quarter of it compressing objects, a sixth collecting garbage, a
// fifth loading and checking main) and memory (the loaded source and an
// index entry per object). git fast-import writes the sharded tree faster
// than it wrote the flat one (93 s of CPU at 100,000 before): the render
// is now 1.25 times its CPU there, and faster below.
//
// The one-install render with a [Cache] (the tenant server's): the cache
// keeps the install refs the last render left with their digest and the
// hash's state at every 1,024th ref, so that refs read equal to them, entry
// by entry, are not hashed again and the new digest is hashed from the mark
// before the first ref moved; and the source's objects outside installs/.
// gitrepo keeps the refs of the last packed-refs it parsed, by content, and
// gitobj.ReadObject no longer copies what it read. BenchmarkRerender then
// took 16.6 ms of CPU at 10,000 and 63.8 ms at 100,000 (was 18 and 81;
// load 1-4). Of the 64 ms at 100,000, inflating main's new installs/ tree
// (a 4 MB loose object git wrote) is some 23 ms, 4 of them zlib's
// adler32, which the SHA-1 check of the object makes redundant; what is
// left of listing the refs (reading packed-refs whole to compare it,
// the ref list copied twice) some 5 ms. The cold render in the same run:
// 10,000 in 3.0 s wall, 4.69 s CPU, 80 MB; 100,000 in 32 s wall, 52.2 s
// CPU, 638 MB (11.1 times the CPU of 10,000; the cold render's code is
// unchanged), fast-import 41 s.
package renderer

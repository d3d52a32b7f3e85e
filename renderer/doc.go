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
// # The trust root
//
// When main holds trust/root/<n>.json (package trust), the render checks
// that the versions chain from version 1 and copies every one, as written,
// into each install's tree: an agent given version 1 follows the chain
// through them. A root that does not chain fails the render; an expired
// newest version, or a render key the newest version does not authorize,
// is a warning. A new version changes every install's tree, so each gets
// exactly one commit; an unchanged root changes nothing. The root's render
// keys, retired and revoked ones included, also count as the renderer's
// own for its history (see loadTrust).
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
// makes the render a full one, whose load reports it. A render that read
// source files makes a rendered commit recording their source even when
// nothing it renders changed (a comment in an install file, a change to
// nuon.yaml that renders the same), so that the next render starts from
// there (TestRenderRecordsSourceRenderedSame); a render that read none (main
// changed outside the source, or only a README in installs/) makes none.
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
// A cold render opens main (nuon.yaml, the channels and the releases, and
// the list of install files: schemas.Open), then a worker per CPU
// ([Options.Workers]) reads, parses and checks one install file, renders
// and signs that install, and takes the next (schemas.Source.EachInstall):
// no more than a worker's install is held at once. Each install's objects
// are compressed by the worker that rendered it and, in a batch of
// gitobj.NewSpooledBatch ([Options.Objects], as internal/publish renders),
// written at once to a pack file finished at the end, so that what stays
// in memory is the shared source, an index entry per object and a result
// per install. A one-install render reads main's installs/
// tree (some 4 MB at 100,000 installs), the install refs as a sorted list
// (gitrepo.Repo.RefList) for their digest, one shard of installs/ and of
// issued/, and writes those shards, the top folders and two refs as ref
// files of their own (gitrepo.Repo.Apply).
//
// The one-install render with a [Cache] (the tenant server's) keeps:
// main's installs/ tree with where each entry starts, so that the next
// tree is compared as bytes at its start and end and read as entries only
// between; and the source's objects outside installs/. The install refs
// go from render to render as a [RefList] ([Result.List], handed back as
// [Previous.List] by the tenant server's ref table): chunks of 1,024 refs
// with the digest of each, never changed, so that a render that moves one
// ref of a million copies and hashes its chunk and hashes the chunks'
// digests (the chunked form of TrailerInstallRefs), where it copied 40 MB
// of refs and hashed them from the ref moved to the last. A cache is
// never trusted for what it should check: the refs are always those read
// from the repository (the ref table moves with every ref the server
// moves, and a table that lags git fails the update with ErrStale), and a
// ref moved behind the renderer's back makes the digests differ
// (TestCacheDoesNotTrustMovedRef). The
// tenant server keeps main's loose objects uncompressed
// (server.ConfigureRepo), so that reading the new installs/ tree is a
// copy rather than an inflate.
//
// BENCHMARKS.md ("Render at fleet scale") has the figures and the commands
// (make bench-fleet). On a quiet machine (2 cores, load 1-1.5):
// BenchmarkRenderFleet rendered 10,000 installs cold in 2.0-2.2 s wall and
// 3.92-4.17 s of CPU, 100,000 in 19.5-19.7 s and 37.1-37.7 s (9.0 to 9.5
// times), 282-300 MB at its peak, beside git fast-import's 41 s for the
// same objects; BenchmarkRerender took 35-37 ms (39-44 ms of CPU) at
// 100,000. Before the last round: 24 s, 42.8 s of CPU (10.1 times), 478 MB.
// Reading and rendering cost 393 µs of CPU per install at 10,000 and 371
// µs at 100,000; what grew faster than the fleet before was the live heap
// of loaded installs the collector marked, and a Go map of a million
// objects (gitobj's spooled index).
package renderer

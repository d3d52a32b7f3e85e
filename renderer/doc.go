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
// # Trusting the previous render
//
// Reading ten thousand install commits costs more than rendering, so a
// render trusts the previous rendered commit: each install ref holds that
// install's folder of the rendered tree. The rendered commit records, in
// its Nuon-Install-Refs trailer, a digest of every install ref as the
// render left them. When the refs found do not match it (a render stopped
// between ref updates, or someone moved a ref), the render reads every
// install's commit instead and moves each ref back to the tree main gives.
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
// inflated. Every problem names its file; bad input moves no ref.
package renderer

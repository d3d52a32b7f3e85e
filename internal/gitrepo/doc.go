// Package gitrepo opens the tenant repository wherever it lives — a local
// path, file://, http(s):// or ssh:// (and user@host:path) — and moves its
// refs safely: on a remote, every update goes in one atomic push that fails
// if any ref moved since it was read; on a local path the refs are
// compare-and-swapped: a few (a render that changed a few installs) as
// ref files of their own, each under git's lock and all checked before
// any moves, as git update-ref does; many in one new packed-refs file,
// which takes in the ref files beside them. RefList lists refs sorted,
// from packed-refs as written and the few ref files, without a map: a
// tenant has 100,000 install refs. The process keeps the refs it parsed
// from the last packed-refs it read, by the file's whole content: the next
// listing reads the file and compares it byte for byte, and parses it only
// when it changed (a render moving a few refs leaves it as it was).
// An update to the zero hash deletes its ref (checked against its old
// value like any other, and always through a new packed-refs): archiving
// an install copies its refs under refs/nuon/archive/ and deletes the live
// ones in one Apply.
//
// Remotes over http(s) and SSH are reached with internal/gitproto (ls-refs
// and fetch in protocol version 2, push with receive-pack), with the
// credentials of internal/gitauth that the agent uses too; file:// and
// git:// with go-git.
package gitrepo

// Package gitrepo opens the tenant repository wherever it lives — a local
// path, file://, http(s):// or ssh:// (and user@host:path) — and moves its
// refs safely: on a remote, every update goes in one atomic push that fails
// if any ref moved since it was read; on a local path the refs are
// compare-and-swapped, those in packed-refs all at once in one new
// packed-refs file. An update to the zero hash deletes its ref (checked
// against its old value like any other): archiving an install copies its
// refs under refs/nuon/archive/ and deletes the live ones in one Apply.
//
// Remotes over http(s) and SSH are reached with internal/gitproto (ls-refs
// and fetch in protocol version 2, push with receive-pack), with the
// credentials of internal/gitauth that the agent uses too; file:// and
// git:// with go-git.
package gitrepo

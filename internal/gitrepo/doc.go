// Package gitrepo opens the tenant repository wherever it lives — a local
// path, file://, http(s):// or ssh:// — and moves its refs safely: on a
// remote, every update goes in one atomic push that fails if any ref moved
// since it was read; on a local path the refs are compare-and-swapped, those
// in packed-refs all at once in one new packed-refs file.
package gitrepo

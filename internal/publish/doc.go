// Package publish renders a tenant repository's main into signed commits and
// moves the rendered and per-install refs: the one render path that both
// `nuon render` and `nuon server` take. It is the I/O shell around the pure
// renderer package: it fetches, resolves, reads the previous refs, flushes
// the objects and applies the ref updates atomically (gitrepo.Apply).
package publish

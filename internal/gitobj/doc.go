// Package gitobj builds git objects in memory and writes them out as one
// packfile, the fast way to add many small objects to a repository: no
// loose files, no deltas, one index built at the end.
//
// It also reads them back: Store wraps go-git's storage of a repository on
// disk and reads objects straight from the pack files through their
// indexes, and from loose files, without loading whole indexes into maps
// first as go-git does. A process that opens a large repository to read a
// few objects, a re-render, pays for those objects only.
package gitobj

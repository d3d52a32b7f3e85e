// Package gitobj builds git objects in memory and writes them out as one
// packfile, the fast way to add many small objects to a repository: no
// loose files, no deltas, one index built at the end.
package gitobj

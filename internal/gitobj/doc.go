// Package gitobj builds git objects in memory and writes them out as one
// packfile, the fast way to add many small objects to a repository: no
// loose files, no deltas, one index built at the end. A batch keeps what
// is merged into it compressed, as the pack will hold it: a render of
// 100,000 installs builds each install's objects in a batch of its own and
// merges them into the render's, so that what waits in memory for the pack
// is its compressed size, not its content (BenchmarkRenderFleet in
// renderer). Objects are compressed with klauspost/compress's zlib, the
// same format as the standard library's for less CPU; trees and objects
// under 128 bytes are stored, where compression buys little. A spooled
// batch (NewSpooledBatch) goes further: what is merged into it is written
// at once to a temporary pack file, finished and renamed into place by
// Flush, so that only an offset per object stays in memory. The pack's
// index is written here from the objects' places sorted by name (the
// bytes go-git's idxfile writer writes): that writer files every object in
// a map and sorts through an interface, twice the time for the 400,000
// objects of a 100,000-install render (see writeIndex).
//
// A spooled batch finds the objects it holds through a hash table written
// here, not a Go map (spoolIndex): the map's cost per object grew with the
// number of objects (18 ms for 90,000 random ids, 342 ms for 900,000: cache
// and TLB misses into 74 MB at a million), and the render of 100,000
// installs merges a million. The table is 8-byte slots over records kept
// in write order, 48 MB at a million, and a miss reads one cache line of
// it. The pack's index is sorted from those records themselves, by
// counting sorts that read and write memory in order (sortEntries).
// BenchmarkSpooledBatch, merging small objects and flushing them: 1,312
// and 1,752 ns of CPU per object at 100,000 and 1,000,000 with the map
// (1.34 times as much at ten times the objects); 1,011 and 1,026 with the
// table (1.01 times).
//
// It also reads them back: Store wraps go-git's storage of a repository on
// disk and reads objects straight from the pack files through their
// indexes, mapped into memory, and from loose files, without loading whole
// indexes into maps first as go-git does. A process that opens a large
// repository to read a few objects, a re-render, pays for those objects
// only. Each pack is opened once and kept open with its index view, and
// zlib readers are kept for reuse: a cold render sizes and reads 100,000
// install files, and opening the pack or making a reader (with its 32 KB
// window) for each was most of that.
//
// A large tree is read once for every reader in the process
// (ReadTreeShared): when main moves, the render, the tenant server's key
// table and its rollout controller each compare main's new installs/ tree,
// 41 MB at a million installs, with the one before. It is indexed once
// (ReadIndexShared, KeepIndex), compared once (the last TreeIndex.Delta
// between two shared trees is kept), and its SHA-1 is checked from the
// state kept at the megabyte before its first byte that differs from a
// kept tree of its length. A loose object git stored uncompressed
// (core.looseCompression 0) is read with one read and taken in place
// (unstore). At a million installs a one-install change in the server
// went from some 365 ms of CPU to some 100-130 ms
// (BenchmarkOneChangeMillion in server).
package gitobj

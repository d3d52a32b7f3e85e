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
// It also reads them back: Store wraps go-git's storage of a repository on
// disk and reads objects straight from the pack files through their
// indexes, mapped into memory, and from loose files, without loading whole
// indexes into maps first as go-git does. A process that opens a large
// repository to read a few objects, a re-render, pays for those objects
// only. Each pack is opened once and kept open with its index view, and
// zlib readers are kept for reuse: a cold render sizes and reads 100,000
// install files, and opening the pack or making a reader (with its 32 KB
// window) for each was most of that.
package gitobj

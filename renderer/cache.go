package renderer

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
)

// Cache keeps what one render read or computed that the next render in the
// same process needs again. Everything it holds is keyed by all it was
// made from, so it is never stale, only unused; it is safe for concurrent
// use. (The install refs the last render left need no cache: they are a
// RefList, which carries its digest, handed back by the caller as
// Previous.List.) It keeps:
//
//   - main's installs/ tree object with where each entry starts, which
//     the next render compares with its own (its previous source). At
//     100,000 installs that tree is some 4 MB; a one-install render of the
//     tenant server then reads one tree, not two, and reads as entries
//     only those between what the two share at their start and end. It is
//     kept from a process's first render too, when installs/ did not
//     change since the render before (a server's start).
//   - the trees and blobs of the source outside installs/ (nuon.yaml,
//     channels/, releases/), by object id, so that a render of a changed
//     install file does not read them from the repository again.
type Cache struct {
	mu   sync.Mutex
	tree plumbing.Hash
	raw  *rawIndex

	trees map[plumbing.Hash][]treeEntry
	blobs map[plumbing.Hash][]byte
	// size is the bytes of blobs and entries of trees held, bounded by
	// maxCachedObjects.
	size int
}

// maxCachedObjects bounds the bytes of source objects a Cache keeps: the
// sample tenant's nuon.yaml, channels/ and releases/ are some 10 KB, a
// large vendor's perhaps a few MB.
const maxCachedObjects = 32 << 20

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{} }

// rawTree returns the tree h with its index, if it is the one kept.
func (c *Cache) rawTree(h plumbing.Hash) (*rawIndex, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tree != h || h.IsZero() {
		return nil, false
	}
	return c.raw, true
}

// keep keeps the tree h, read and indexed as raw.
func (c *Cache) keep(h plumbing.Hash, raw *rawIndex) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tree, c.raw = h, raw
}

// entries returns the tree h's entries, sorted by name, if kept.
func (c *Cache) entries(h plumbing.Hash) ([]treeEntry, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	es, ok := c.trees[h]
	return es, ok
}

// blob returns the blob h, if kept.
func (c *Cache) blob(h plumbing.Hash) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.blobs[h]
	return b, ok
}

// keepEntries keeps the tree h's entries, sorted by name; the caller does
// not change them after.
func (c *Cache) keepEntries(h plumbing.Hash, es []treeEntry) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.trees[h]; ok {
		return
	}
	c.make(len(es) * 64)
	c.trees[h] = es
}

// keepBlob keeps the blob h, read as data; the caller does not change it
// after.
func (c *Cache) keepBlob(h plumbing.Hash, data []byte) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.blobs[h]; ok {
		return
	}
	c.make(len(data))
	c.blobs[h] = data
}

// make makes room for n bytes of objects: when they would not fit, every
// object kept is let go.
func (c *Cache) make(n int) {
	if c.trees == nil || c.size+n > maxCachedObjects {
		c.trees, c.blobs, c.size = map[plumbing.Hash][]treeEntry{}, map[plumbing.Hash][]byte{}, 0
	}
	c.size += n
}

// chunkRefs is the refs of a chunk of chunkedDigest: 977 chunks of some
// 28 KB at a million installs.
const chunkRefs = 1024

// chunkedDigest is the value of TrailerInstallRefs in the chunked form for
// the install refs refs, sorted by id: the SHA-256 of the SHA-256 of each
// run of chunkRefs refs in order (the last one shorter), each ref an
// "id", NUL, 20-byte commit record.
func chunkedDigest(refs []InstallRef) string {
	chunks := make([][sha256.Size]byte, 0, (len(refs)+chunkRefs-1)/chunkRefs)
	buf := make([]byte, 0, 64<<10)
	for len(refs) > 0 {
		n := min(chunkRefs, len(refs))
		buf = chunkRecords(buf[:0], refs[:n])
		chunks = append(chunks, sha256.Sum256(buf))
		refs = refs[n:]
	}
	return topDigest(chunks)
}

// chunkRecords appends the records of refs to buf.
func chunkRecords(buf []byte, refs []InstallRef) []byte {
	for _, r := range refs {
		buf = append(buf, r.ID...)
		buf = append(buf, 0)
		buf = append(buf, r.Commit[:]...)
	}
	return buf
}

// topDigest is the chunked form of the digest of chunks' digests.
func topDigest(chunks [][sha256.Size]byte) string {
	d := sha256.New()
	for _, c := range chunks {
		d.Write(c[:])
	}
	return digestChunks + hex.EncodeToString(d.Sum(nil))
}

// ownIDs returns refs with their ids copied into one string of their
// own. The refs a render is given name their ids within the text they
// were read from (all of packed-refs: some 75 MB at 1,000,000 installs)
// and a render's updates within their ref names, one allocation each: a
// RefList kept from render to render keeps neither, only some 8 bytes per
// id.
func ownIDs(refs []InstallRef) []InstallRef {
	out := slices.Clone(refs)
	ownIDsInPlace(out)
	return out
}

// ownIDsInPlace gives refs ids of their own, as ownIDs, in place.
func ownIDsInPlace(refs []InstallRef) {
	n := 0
	for _, r := range refs {
		n += len(r.ID)
	}
	var b strings.Builder
	b.Grow(n)
	for _, r := range refs {
		b.WriteString(r.ID)
	}
	text := b.String()
	for i, r := range refs {
		refs[i].ID = text[:len(r.ID)]
		text = text[len(r.ID):]
	}
}

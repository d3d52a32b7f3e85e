package renderer

import (
	"slices"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
)

// Cache keeps what one render read or computed that the next render in the
// same process needs again. Everything it holds is keyed by all it was
// made from, so it is never stale, only unused; it is safe for concurrent
// use. It keeps:
//
//   - main's installs/ tree object, which the next render compares with
//     its own (its previous source). At 100,000 installs that tree is some
//     4 MB compressed by git; a one-install render of the tenant server
//     then inflates one tree, not two.
//   - the install refs the last render left, with their digest
//     (TrailerInstallRefs): the next render compares the refs it is given
//     with that list, entry by entry, and hashes them only when they
//     differ. The refs are always those read from the repository, so a
//     ref moved behind the renderer's back makes the lists differ and the
//     digest is hashed, and checked, as without a cache.
//   - the trees and blobs of the source outside installs/ (nuon.yaml,
//     channels/, releases/), by object id, so that a render of a changed
//     install file does not read them from the repository again.
type Cache struct {
	mu   sync.Mutex
	tree plumbing.Hash
	raw  []byte

	refs   []InstallRef
	digest string

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

// rawTree returns the tree h, if it is the one kept.
func (c *Cache) rawTree(h plumbing.Hash) ([]byte, bool) {
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

// keep keeps the tree h, read as raw.
func (c *Cache) keep(h plumbing.Hash, raw []byte) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tree, c.raw = h, raw
}

// refsDigest returns the binary digest of refs (refsDigest(refs, nil,
// true)): the one kept, when refs are the list kept, entry by entry.
func (c *Cache) refsDigest(refs []InstallRef) string {
	if c != nil {
		c.mu.Lock()
		kept, digest := c.refs, c.digest
		c.mu.Unlock()
		if kept != nil && slices.Equal(kept, refs) {
			return digest
		}
	}
	return refsDigest(refs, nil, true)
}

// keepRefs keeps refs, sorted by id with no zero commit, and their binary
// digest.
func (c *Cache) keepRefs(refs []InstallRef, digest string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refs, c.digest = refs, digest
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

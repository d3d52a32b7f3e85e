package renderer

import (
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
)

// Cache keeps what one render read that the next render in the same
// process reads again: main's installs/ tree object, which the next render
// compares with its own (its previous source). At 100,000 installs that
// tree is some 4 MB compressed by git; a one-install render of the tenant
// server then inflates one tree, not two. It holds immutable objects by
// id, so it is never stale; it is safe for concurrent use.
type Cache struct {
	mu   sync.Mutex
	tree plumbing.Hash
	raw  []byte
}

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

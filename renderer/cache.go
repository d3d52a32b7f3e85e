package renderer

import (
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"slices"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
)

// Cache keeps what one render read or computed that the next render in the
// same process needs again. Everything it holds is keyed by all it was
// made from, so it is never stale, only unused; it is safe for concurrent
// use. It keeps:
//
//   - main's installs/ tree object with where each entry starts, which
//     the next render compares with its own (its previous source). At
//     100,000 installs that tree is some 4 MB; a one-install render of the
//     tenant server then reads one tree, not two, and reads as entries
//     only those between what the two share at their start and end. It is
//     kept from a process's first render too, when installs/ did not
//     change since the render before (a server's start).
//   - the install refs the last render left, with their digest
//     (TrailerInstallRefs) and the hash's state at every 1,024th ref: the
//     next render compares the refs it is given with that list, entry by
//     entry (that very list, handed back as Previous.Refs from
//     Result.Refs, without a look), and hashes them only when they
//     differ; the digest it writes
//     it hashes from the state before the first ref it moves. The refs
//     are always those read from the repository, so a ref moved behind
//     the renderer's back makes the lists differ and the digest is
//     hashed, and checked, as without a cache.
//   - the trees and blobs of the source outside installs/ (nuon.yaml,
//     channels/, releases/), by object id, so that a render of a changed
//     install file does not read them from the repository again.
type Cache struct {
	mu   sync.Mutex
	tree plumbing.Hash
	raw  *rawIndex

	refs *refsMemo

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

// knownRefs returns what the cache keeps of refs (a list sorted by id with
// no zero commit) when refs are, entry by entry, the list it keeps; nil
// otherwise. The list kept itself (Result.Refs, handed back by the tenant
// server's ref table) is known without a look at its entries: a memo's
// list is never changed, and at a million installs the comparison was a
// tenth of a one-install render.
func (c *Cache) knownRefs(refs []InstallRef) *refsMemo {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	m := c.refs
	c.mu.Unlock()
	switch {
	case m == nil || len(m.refs) != len(refs):
		return nil
	case len(refs) > 0 && &m.refs[0] == &refs[0]:
		return m
	case !slices.Equal(m.refs, refs):
		return nil
	}
	return m
}

// keepRefs keeps m for the next render; m is not changed after.
func (c *Cache) keepRefs(m *refsMemo) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refs = m
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

// refsMemo is a list of install refs and their binary digest
// (refsDigest(refs, nil, true)), with the SHA-256 state at every
// markEvery refs: a render that moves one ref hashes the refs from the
// mark before it, not from the first.
type refsMemo struct {
	refs   []InstallRef
	digest string
	// marks[k] is the hash's state (sha256's MarshalBinary) after the
	// records of refs[:k*markEvery].
	marks [][]byte
}

// markEvery is the refs between two marks of a refsMemo: 98 marks of
// some 100 bytes at 100,000 installs.
const markEvery = 1024

// hashRefs returns the memo of refs with moved in their place (as
// refsDigest(refs, moved, true) hashes them). m, when not nil, is the
// memo of refs: the hash resumes from its last mark before the first
// moved ref.
func hashRefs(m *refsMemo, refs, moved []InstallRef) *refsMemo {
	merged := mergeRefs(refs, moved)
	d := sha256.New()
	from := 0
	var marks [][]byte
	if m != nil && len(m.marks) > 0 {
		// refs before the first moved one are the same in merged.
		p := len(refs)
		if len(moved) > 0 {
			p, _ = slices.BinarySearchFunc(refs, moved[0].ID, func(e InstallRef, id string) int { return strings.Compare(e.ID, id) })
		}
		k := min(p/markEvery, len(m.marks)-1)
		if err := d.(encoding.BinaryUnmarshaler).UnmarshalBinary(m.marks[k]); err == nil {
			from, marks = k*markEvery, slices.Clone(m.marks[:k])
		} else {
			d.Reset()
		}
	}
	buf := make([]byte, 0, 32<<10)
	for i := from; i < len(merged); i++ {
		if i%markEvery == 0 {
			d.Write(buf)
			buf = buf[:0]
			state, err := d.(encoding.BinaryMarshaler).MarshalBinary()
			if err != nil {
				// No marks: the next render hashes from the first ref.
				return &refsMemo{refs: merged, digest: refsDigest(merged, nil, true)}
			}
			marks = append(marks, state)
		}
		r := merged[i]
		buf = append(buf, r.ID...)
		buf = append(buf, 0)
		buf = append(buf, r.Commit[:]...)
		if len(buf) > cap(buf)-256 {
			d.Write(buf)
			buf = buf[:0]
		}
	}
	d.Write(buf)
	return &refsMemo{refs: merged, digest: digestBinary + hex.EncodeToString(d.Sum(nil)), marks: marks}
}

// ownIDs returns refs with their ids copied into one string of their
// own. The refs a render is given name their ids within the text they
// were read from (all of packed-refs: some 75 MB at 1,000,000 installs)
// and a render's updates within their ref names, one allocation each: a
// memo keeps neither, only some 8 bytes per id.
func ownIDs(refs []InstallRef) []InstallRef {
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
	out := make([]InstallRef, len(refs))
	for i, r := range refs {
		out[i] = InstallRef{ID: text[:len(r.ID)], Commit: r.Commit}
		text = text[len(r.ID):]
	}
	return out
}

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
//     (TrailerInstallRefs) and the digest of every chunk of 1,024 refs: the
//     next render compares the refs it is given with that list, entry by
//     entry (that very list, handed back as Previous.Refs from
//     Result.Refs, without a look), and hashes them only when they
//     differ; the digest it writes it hashes from the chunks' digests
//     kept and those of the chunks the refs it moves are in. The refs
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

// refsMemo is a list of install refs and their digest in the chunked
// form (chunkedDigest), with the digest of each chunk: a render that moves
// one ref hashes the chunk of 1,024 refs that holds it and the chunks'
// digests, some 60 KB at a million installs, where a digest of every ref
// hashed from the ref moved to the last, 14 MB on average.
type refsMemo struct {
	refs   []InstallRef
	digest string
	// chunks[k] is the SHA-256 of the records of
	// refs[k*chunkRefs:(k+1)*chunkRefs].
	chunks [][sha256.Size]byte
}

// hashRefs returns the memo of refs with moved in their place (as
// chunkedDigest(mergeRefs(refs, moved)) hashes them). m, when not nil, is
// the memo of refs itself: its chunks are kept but those a moved ref
// falls in, or, when refs are added or gone (the chunks after shift),
// those from the first moved ref on.
func hashRefs(m *refsMemo, refs, moved []InstallRef) *refsMemo {
	merged := mergeRefs(refs, moved)
	n := (len(merged) + chunkRefs - 1) / chunkRefs
	chunks := make([][sha256.Size]byte, n)
	stale := make([]bool, n)
	switch {
	case m == nil || len(m.refs) != len(refs) || len(m.chunks) != (len(refs)+chunkRefs-1)/chunkRefs:
		clear(chunks)
		for k := range stale {
			stale[k] = true
		}
	case len(merged) == len(refs):
		// Each moved id was there: the refs are where they were.
		copy(chunks, m.chunks)
		for _, r := range moved {
			i, _ := slices.BinarySearchFunc(merged, r.ID, func(e InstallRef, id string) int { return strings.Compare(e.ID, id) })
			stale[i/chunkRefs] = true
		}
	default:
		p, _ := slices.BinarySearchFunc(merged, moved[0].ID, func(e InstallRef, id string) int { return strings.Compare(e.ID, id) })
		copy(chunks, m.chunks[:min(p/chunkRefs, len(m.chunks))])
		for k := p / chunkRefs; k < n; k++ {
			stale[k] = true
		}
	}
	buf := make([]byte, 0, 64<<10)
	for k := range chunks {
		if stale[k] {
			buf = chunkRecords(buf[:0], merged[k*chunkRefs:min((k+1)*chunkRefs, len(merged))])
			chunks[k] = sha256.Sum256(buf)
		}
	}
	return &refsMemo{refs: merged, digest: topDigest(chunks), chunks: chunks}
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

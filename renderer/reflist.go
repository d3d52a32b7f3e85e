package renderer

import (
	"crypto/sha256"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
)

// RefList is install refs sorted by id, each id once, none zero, held in
// chunks of chunkRefs refs (the last one shorter) with the digest of each
// chunk and of them all (chunkedDigest, the TrailerInstallRefs a render
// writes). A list is never changed once made: With makes the list with
// some refs moved and shares every chunk it does not change. At a million
// installs a render that moves one ref copies one chunk of 40 KB and the
// list of chunks, and hashes one chunk and the chunks' digests, where it
// copied a list of 40 MB and hashed it from the ref moved to the last.
// The ids of the refs moved are copied into strings of their own
// (ownIDs), so that a list kept from render to render does not keep alive
// each update's ref name.
type RefList struct {
	chunks [][]InstallRef
	sums   [][sha256.Size]byte
	n      int
	digest string
}

// NewRefList returns the list of refs: sorted by id, the first of an id
// kept, those with a zero commit left out (as Previous.Refs are read).
// The list may hold refs itself and their ids: the caller does not change
// refs after, and gives ids of their own (ownIDs) to a list it keeps
// while the text they were read from should go.
func NewRefList(refs []InstallRef) *RefList {
	return newRefList(Previous{Refs: refs}.installRefs())
}

// newRefList returns the list of refs, sorted by id, each id once, none
// zero, whose ids are the list's own; refs is not changed after.
func newRefList(refs []InstallRef) *RefList {
	l := &RefList{n: len(refs)}
	l.appendChunks(refs)
	l.digest = topDigest(l.sums)
	return l
}

// appendChunks appends refs to l's chunks, chunkRefs a chunk, and their
// digests; l's last chunk is full.
func (l *RefList) appendChunks(refs []InstallRef) {
	buf := make([]byte, 0, 64<<10)
	for len(refs) > 0 {
		c := refs[:min(chunkRefs, len(refs)):min(chunkRefs, len(refs))]
		buf = chunkRecords(buf[:0], c)
		l.chunks = append(l.chunks, c)
		l.sums = append(l.sums, sha256.Sum256(buf))
		refs = refs[len(c):]
	}
}

// Len is the number of refs.
func (l *RefList) Len() int {
	if l == nil {
		return 0
	}
	return l.n
}

// Digest is the refs' TrailerInstallRefs, in the chunked form.
func (l *RefList) Digest() string {
	if l == nil {
		return topDigest(nil)
	}
	return l.digest
}

// locate returns where id is or would be: its chunk k and its place i
// in it (k == len(chunks) past the last), and whether it is there.
func (l *RefList) locate(id string) (k, i int, found bool) {
	if l == nil {
		return 0, 0, false
	}
	k, _ = slices.BinarySearchFunc(l.chunks, id, func(c []InstallRef, id string) int { return strings.Compare(c[len(c)-1].ID, id) })
	if k == len(l.chunks) {
		return k, 0, false
	}
	i, found = slices.BinarySearchFunc(l.chunks[k], id, func(e InstallRef, id string) int { return strings.Compare(e.ID, id) })
	return k, i, found
}

// Find returns id's commit and whether the list has id.
func (l *RefList) Find(id string) (plumbing.Hash, bool) {
	k, i, ok := l.locate(id)
	if !ok {
		return plumbing.ZeroHash, false
	}
	return l.chunks[k][i].Commit, true
}

// Refs returns the refs as one slice, a copy.
func (l *RefList) Refs() []InstallRef {
	out := make([]InstallRef, 0, l.Len())
	if l != nil {
		for _, c := range l.chunks {
			out = append(out, c...)
		}
	}
	return out
}

// With returns the list with moved in place of the refs of their ids,
// moved sorted by id, each id once: a zero commit takes its id out.
// Chunks with no ref moved are shared with l; when refs are added or
// taken out, those after the first moved one shift and are made again.
func (l *RefList) With(moved []InstallRef) *RefList {
	if l == nil {
		l = &RefList{}
	}
	if len(moved) == 0 {
		return l
	}
	resize := false
	for _, m := range moved {
		if _, _, found := l.locate(m.ID); !found || m.Commit.IsZero() {
			resize = true // added, or taken out
			break
		}
	}
	out := &RefList{n: l.n, chunks: slices.Clone(l.chunks), sums: slices.Clone(l.sums)}
	if !resize {
		moved = ownIDs(moved)
		buf := make([]byte, 0, 64<<10)
		last := -1
		for _, m := range moved {
			k, i, _ := l.locate(m.ID)
			if k != last {
				out.chunks[k] = slices.Clone(l.chunks[k])
				last = k
			}
			out.chunks[k][i] = m
		}
		last = -1
		for _, m := range moved {
			if k, _, _ := l.locate(m.ID); k != last {
				buf = chunkRecords(buf[:0], out.chunks[k])
				out.sums[k] = sha256.Sum256(buf)
				last = k
			}
		}
		out.digest = topDigest(out.sums)
		return out
	}
	// From the chunk of the first moved id on, the refs are merged and
	// cut into chunks again.
	// Every chunk but the last is full.
	k0, _, _ := l.locate(moved[0].ID)
	k0 = max(0, min(k0, len(l.chunks)-1))
	var tail []InstallRef
	for _, c := range l.chunks[k0:] {
		tail = append(tail, c...)
	}
	// Ids of their own for all of them: one copy of the refs, where a copy
	// of moved's and then the merge were two of a cold render's million.
	tail = slices.DeleteFunc(mergeRefs(tail, moved), func(r InstallRef) bool { return r.Commit.IsZero() })
	ownIDsInPlace(tail)
	out.chunks, out.sums = out.chunks[:k0], out.sums[:k0]
	out.n = k0*chunkRefs + len(tail)
	out.appendChunks(tail)
	out.digest = topDigest(out.sums)
	return out
}
